# Issue 24 (usage explorer): each admission's queue wait, kept by a trigger on jobs_jobevent
# (jobs/waits.py) and built here from the event log as it stands.
#
# The SQL lives here, frozen as it was when this migration was written, so that a fresh `migrate`
# builds the 0018 schema whatever jobs/waits.py becomes later (jobs/waits.py keeps the backfill's
# upsert for its repair, `rebuild`).

from django.db import migrations, models

# The admissions of the jobs whose events meet {which} with their waits, upserted.
_UPSERT = """
INSERT INTO jobs_admissionwait (event_id, job_id, admitted_at, wait_minutes, project_id, user_id,
                                flavor_id, kind, priority_class_id)
SELECT w.id, w.job_id, w.occurred_at, w.minutes, j.project_id, j.submitted_by_id, j.flavor_id, j.kind,
       j.priority_class_id
FROM (
    SELECT e.id, e.job_id, e.to_state, e.occurred_at,
           (extract(epoch FROM e.occurred_at - max(e.occurred_at) FILTER (WHERE e.to_state = 'queued')
                OVER (PARTITION BY e.job_id ORDER BY e.occurred_at, e.id)) / 60)::float8 AS minutes
    FROM jobs_jobevent e
    WHERE e.kind = 'transition' AND e.to_state IN ('queued', 'admitted') AND {which}
) w
JOIN jobs_job j ON j.id = w.job_id
WHERE w.to_state = 'admitted' AND w.minutes IS NOT NULL
ON CONFLICT (event_id) DO UPDATE
SET wait_minutes = EXCLUDED.wait_minutes, project_id = EXCLUDED.project_id, user_id = EXCLUDED.user_id,
    flavor_id = EXCLUDED.flavor_id, kind = EXCLUDED.kind, priority_class_id = EXCLUDED.priority_class_id
WHERE (jobs_admissionwait.wait_minutes, jobs_admissionwait.project_id, jobs_admissionwait.user_id,
       jobs_admissionwait.flavor_id, jobs_admissionwait.kind, jobs_admissionwait.priority_class_id)
      IS DISTINCT FROM (EXCLUDED.wait_minutes, EXCLUDED.project_id, EXCLUDED.user_id, EXCLUDED.flavor_id,
                        EXCLUDED.kind, EXCLUDED.priority_class_id)
"""

# The statement's jobs go into an array first: ``job_id = ANY(job_ids)`` reads their events through
# the (job, occurred_at) index whatever the planner believes of the transition table (joined to it
# directly, a bulk insert into a freshly loaded table was planned as a nested loop over both:
# minutes per 5,000 events).
TRIGGER = f"""
CREATE FUNCTION jobs_admission_waits() RETURNS trigger AS $$
DECLARE
    job_ids bigint[];
BEGIN
    SELECT array_agg(DISTINCT a.job_id) INTO job_ids FROM added a
    WHERE a.kind = 'transition' AND a.to_state IN ('queued', 'admitted');
    IF job_ids IS NOT NULL THEN
        {_UPSERT.format(which="e.job_id = ANY(job_ids)")};
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER jobs_jobevent_admission_waits
    AFTER INSERT ON jobs_jobevent REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_admission_waits();
"""  # noqa: S608 - constants only

DROP_TRIGGER = """
DROP TRIGGER IF EXISTS jobs_jobevent_admission_waits ON jobs_jobevent;
DROP FUNCTION IF EXISTS jobs_admission_waits();
"""

# Every admission's wait from the whole event log (the backfill).
BACKFILL = _UPSERT.format(which="TRUE")


def build(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_admissionwait")
        cursor.execute(BACKFILL)


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
