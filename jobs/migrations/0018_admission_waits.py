# Issue 24 (usage explorer): each admission's queue wait, kept by a trigger on jobs_jobevent
# (jobs/waits.py) and built here from the event log as it stands.

from django.db import migrations, models

from jobs.waits import DROP_TRIGGER, TRIGGER


def build(apps, schema_editor):
    from jobs.waits import rebuild

    rebuild()


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0017_advisor'),
    ]

    operations = [
        migrations.CreateModel(
            name='AdmissionWait',
            fields=[
                ('event_id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('job_id', models.BigIntegerField()),
                ('admitted_at', models.DateTimeField()),
                ('wait_minutes', models.FloatField()),
                ('project_id', models.BigIntegerField()),
                ('user_id', models.BigIntegerField()),
                ('flavor_id', models.BigIntegerField()),
                ('kind', models.CharField(max_length=12)),
                ('priority_class_id', models.BigIntegerField()),
            ],
            options={
                'indexes': [models.Index(fields=['admitted_at'], name='admissionwait_admitted_at')],
            },
        ),
        migrations.RunSQL(TRIGGER, DROP_TRIGGER),
        migrations.RunPython(build, migrations.RunPython.noop),
    ]
