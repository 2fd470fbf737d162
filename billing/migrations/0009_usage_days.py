# Issue 24 (usage explorer): the ledger's daily sums, kept by the meter (billing/rollup.py) and
# built here from the ledger as it stands.

from django.conf import settings
from django.db import migrations, models


def build(apps, schema_editor):
    from billing.rollup import rebuild

    rebuild(settings.TIME_ZONE)


class Migration(migrations.Migration):

    dependencies = [
        ('billing', '0008_normalised_card_hours'),
    ]

    operations = [
        migrations.CreateModel(
            name='UsageDay',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('day', models.DateField()),
                ('month', models.DateField()),
                ('department_id', models.BigIntegerField()),
                ('project_id', models.BigIntegerField()),
                ('user_id', models.BigIntegerField()),
                ('flavor_id', models.BigIntegerField()),
                ('priority_class_id', models.BigIntegerField()),
                ('kind', models.CharField(max_length=12)),
                ('tier', models.CharField(max_length=10)),
                ('card_seconds', models.DecimalField(decimal_places=6, max_digits=22)),
                ('normalised_seconds', models.DecimalField(decimal_places=9, max_digits=26)),
                ('first_hour', models.DateTimeField()),
                ('last_hour', models.DateTimeField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('day', 'department_id', 'project_id', 'user_id', 'flavor_id', 'priority_class_id', 'kind', 'tier'), name='usageday_key')],
            },
        ),
        migrations.RunPython(build, migrations.RunPython.noop),
    ]
