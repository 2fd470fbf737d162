# Issue 24 (usage explorer): the ledger's daily sums, kept by the meter (billing/rollup.py) and
# built here from the ledger as it stands.

from django.conf import settings
from django.db import migrations, models


# The daily sums as this migration's schema has them (frozen here: billing.rollup.rebuild sums the
# columns later migrations add, which do not exist yet at this point).
_BUILD = """
INSERT INTO billing_usageday (day, month, department_id, project_id, user_id, flavor_id, priority_class_id,
                              kind, tier, card_seconds, normalised_seconds, first_hour, last_hour)
SELECT (u.hour_start AT TIME ZONE %(tz)s)::date, u.month, u.department_id, u.project_id, u.user_id,
       u.flavor_id, u.priority_class_id, j.kind, u.tier, sum(u.card_seconds),
       sum(u.card_seconds * u.relative_throughput), min(u.hour_start), max(u.hour_start)
FROM billing_usagerecord u
JOIN jobs_job j ON j.id = u.job_id
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
"""


def build(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DELETE FROM billing_usageday")
        cursor.execute(_BUILD, {"tz": settings.TIME_ZONE})


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
