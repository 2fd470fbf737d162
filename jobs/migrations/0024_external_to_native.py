"""The external-job models left for the `native` app (issue 31; native 0001 takes them into its
state). State only: their tables stay as they are, under the same names."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0023_advisor_to_whatif"),
        ("native", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="ExternalObservation"),
                migrations.DeleteModel(name="ExternalCursor"),
                migrations.DeleteModel(name="ExternalSource"),
            ],
            database_operations=[],
        ),
    ]
