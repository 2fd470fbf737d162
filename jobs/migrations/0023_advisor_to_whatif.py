"""The advisor's models left for the `whatif` app (issue 31; whatif 0001 takes them into its state).
State only: their tables stay as they are, under the same names."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0022_gpu_sample_hours"),
        ("whatif", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="AdvisorEvent"),
                migrations.DeleteModel(name="AdvisorHistoryData"),
                migrations.DeleteModel(name="AdvisorCandidate"),
                migrations.DeleteModel(name="AdvisorSearch"),
            ],
            database_operations=[],
        ),
    ]
