"""Each job's GPU samples summed per UTC hour (``GpuSampleHour``, issue 24), kept by statement-level
triggers on jobs_jobgpusample so that every writer of samples — the poller's upsert, the demo's
and the bench's bulk inserts, the cascade of a job's deletion — keeps it without knowing about it.

A statement's (job, hour) keys are **recomputed** from the samples of those hours, not adjusted by
the rows it changed: the poller overwrites a minute (``INSERT … ON CONFLICT DO UPDATE``), and a
recount is exact and idempotent whatever the statement did. An hour left without samples loses
its row. The triggers' SQL is migration jobs/0022's, its one copy (the planner and locking notes
are there); this module keeps the backfill as the repair (``rebuild``)."""

from __future__ import annotations

from django.db import connection

# A job's hour is its samples' minutes cut at UTC hours, whatever the session's time zone.
_HOUR = "date_trunc('hour', {minute} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"

# Every job's hours from all its samples (the backfill; the repair).
_ALL = f"""
INSERT INTO jobs_gpusamplehour (job_id, hour, gpus, gpu_util)
SELECT s.job_id, {_HOUR.format(minute="s.minute")}, sum(s.gpus), sum(s.gpus * s.gpu_util_pct)
FROM jobs_jobgpusample s
GROUP BY 1, 2
"""  # noqa: S608 - constants only


def rebuild() -> None:
    """Every job's hours from all its samples (the migration's backfill; a repair)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_gpusamplehour")
        cursor.execute(_ALL)
