"""The queue wait before each admission (``AdmissionWait``, issue 24), kept by a statement-level
trigger on jobs_jobevent so that every writer of events — the scheduler's raw SQL, transitions,
external imports — keeps it without knowing about it.

The wait is the usage explorer's definition (and the reports page's): an admission's wait runs
from the latest ``queued`` transition of the job before it (by occurred_at, then id) to the
admission. The trigger recomputes, with the same window, every admission of the jobs that the
statement gave a queued or admitted event and upserts them: idempotent, exact after a late queue
entry, and an admission's grouping columns follow its job (a flavor chosen among alternatives is
set in the statement that inserts the admission).

The trigger's SQL is migration jobs/0018's, its one copy; this module keeps the backfill as the
repair (``rebuild``)."""

from __future__ import annotations

from django.db import connection

# Every admission of the event log with its wait, upserted (the migration's backfill, as there).
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
    WHERE e.kind = 'transition' AND e.to_state IN ('queued', 'admitted')
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


def rebuild() -> None:
    """Every admission's wait from the whole event log (the migration's backfill; a repair)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_admissionwait")
        cursor.execute(_UPSERT)
