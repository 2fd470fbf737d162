# Issue 24 (usage explorer): each job's GPU samples summed per UTC hour, kept by triggers on
# jobs_jobgpusample (jobs/sample_hours.py) and built here from the samples as they stand.
#
# The SQL lives here, frozen as it was when this migration was written, so that a fresh `migrate`
# builds the 0022 schema whatever jobs/sample_hours.py becomes later (jobs/sample_hours.py keeps the
# backfill for its repair, `rebuild`).

from django.db import migrations, models


# A job's hour is its samples' minutes cut at UTC hours, whatever the session's time zone.
_HOUR = "date_trunc('hour', {minute} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"

# The statement's keys go into arrays: ``unnest`` reads each hour's samples through the
# (job, minute) unique index whatever the planner believes of the transition tables. An hour's
# samples are a range of that index written as row comparisons, which only it can serve: written
# ``job_id = … AND minute …`` the planner took the job_id index and filtered every sample of the
# job (1,440 a day for each of 1,000 jobs: 280 ms for a poll, 50 ms now). The planner's estimate
# of row comparisons is millions of rows, which made it JIT-compile the recount (140 ms of a poll
# that then runs in milliseconds): not in this function. An insert,
# a delete and an update (from the old rows and the new: an update could move a sample) share the
# function; an upsert fires both the INSERT and the UPDATE trigger, each with its own rows.
TRIGGER = f"""
CREATE FUNCTION jobs_gpu_sample_hours() RETURNS trigger AS $$
DECLARE
    job_ids bigint[];
    hours timestamptz[];
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(k.job_id), array_agg(k.hour) INTO job_ids, hours
        FROM (SELECT DISTINCT a.job_id, {_HOUR.format(minute="a.minute")} AS hour FROM added a) k;
    ELSIF TG_OP = 'DELETE' THEN
        SELECT array_agg(k.job_id), array_agg(k.hour) INTO job_ids, hours
        FROM (SELECT DISTINCT r.job_id, {_HOUR.format(minute="r.minute")} AS hour FROM removed r) k;
    ELSE
        SELECT array_agg(k.job_id), array_agg(k.hour) INTO job_ids, hours
        FROM (SELECT a.job_id, {_HOUR.format(minute="a.minute")} AS hour FROM added a
              UNION
              SELECT r.job_id, {_HOUR.format(minute="r.minute")} AS hour FROM removed r) k;
    END IF;
    IF job_ids IS NULL THEN
        RETURN NULL;
    END IF;
    -- One writer of samples at a time, until it commits: another writer's recount of the same hour
    -- cannot see this one's uncommitted samples, and its upsert, waiting for this one's row, would
    -- then win with a sum that misses them. Each statement below reads after the lock is granted.
    PERFORM pg_advisory_xact_lock(1735421955);  -- 0x6770_7003, "gp" + 3
    DELETE FROM jobs_gpusamplehour h
    USING unnest(job_ids, hours) AS k(job_id, hour)
    WHERE h.job_id = k.job_id AND h.hour = k.hour
      AND NOT EXISTS (SELECT FROM jobs_jobgpusample s
                      WHERE (s.job_id, s.minute) >= (k.job_id, k.hour)
                        AND (s.job_id, s.minute) < (k.job_id, k.hour + interval '1 hour'));
    INSERT INTO jobs_gpusamplehour (job_id, hour, gpus, gpu_util)
    SELECT k.job_id, k.hour, sum(s.gpus), sum(s.gpus * s.gpu_util_pct)
    FROM unnest(job_ids, hours) AS k(job_id, hour)
    JOIN jobs_jobgpusample s
      ON (s.job_id, s.minute) >= (k.job_id, k.hour)
     AND (s.job_id, s.minute) < (k.job_id, k.hour + interval '1 hour')
    GROUP BY k.job_id, k.hour
    ON CONFLICT (job_id, hour) DO UPDATE SET gpus = EXCLUDED.gpus, gpu_util = EXCLUDED.gpu_util
    WHERE (jobs_gpusamplehour.gpus, jobs_gpusamplehour.gpu_util)
          IS DISTINCT FROM (EXCLUDED.gpus, EXCLUDED.gpu_util);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql SET jit = off;

CREATE TRIGGER jobs_jobgpusample_hours_insert
    AFTER INSERT ON jobs_jobgpusample REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_gpu_sample_hours();
CREATE TRIGGER jobs_jobgpusample_hours_update
    AFTER UPDATE ON jobs_jobgpusample REFERENCING OLD TABLE AS removed NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_gpu_sample_hours();
CREATE TRIGGER jobs_jobgpusample_hours_delete
    AFTER DELETE ON jobs_jobgpusample REFERENCING OLD TABLE AS removed
    FOR EACH STATEMENT EXECUTE FUNCTION jobs_gpu_sample_hours();
"""  # noqa: S608 - constants only

DROP_TRIGGER = """
DROP TRIGGER IF EXISTS jobs_jobgpusample_hours_insert ON jobs_jobgpusample;
DROP TRIGGER IF EXISTS jobs_jobgpusample_hours_update ON jobs_jobgpusample;
DROP TRIGGER IF EXISTS jobs_jobgpusample_hours_delete ON jobs_jobgpusample;
DROP FUNCTION IF EXISTS jobs_gpu_sample_hours();
"""

# Every job's hours from all its samples (the backfill).
BACKFILL = f"""
INSERT INTO jobs_gpusamplehour (job_id, hour, gpus, gpu_util)
SELECT s.job_id, {_HOUR.format(minute="s.minute")}, sum(s.gpus), sum(s.gpus * s.gpu_util_pct)
FROM jobs_jobgpusample s
GROUP BY 1, 2
"""  # noqa: S608 - constants only


def build(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_gpusamplehour")
        cursor.execute(BACKFILL)


class Migration(migrations.Migration):

    dependencies = [
        ('jobs', '0021_scheduler_settings_rule_changes'),
    ]

    operations = [
        migrations.CreateModel(
            name='GpuSampleHour',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job_id', models.BigIntegerField()),
                ('hour', models.DateTimeField()),
                ('gpus', models.BigIntegerField()),
                ('gpu_util', models.FloatField()),
            ],
            options={
                'indexes': [models.Index(fields=['hour'], name='gpusamplehour_hour')],
                'constraints': [models.UniqueConstraint(fields=('job_id', 'hour'), name='gpusamplehour_unique_hour')],
            },
        ),
        migrations.RunSQL(TRIGGER, DROP_TRIGGER),
        migrations.RunPython(build, migrations.RunPython.noop),
    ]
