"""The fair share's usage (DESIGN §16): decayed normalised card-seconds per project, in ONE statement.

A job counts from its admission (the ``admitted`` transition), not from its start on the cluster:
a burst of submissions cannot all pass on one stale factor. An allocation runs from an admission
to the transition that leaves the GPU-holding states (``admitted``/``running`` → anything else),
half-open; with no such transition yet (up to ``now``) it is still running. Its units are its
workers (the admission event's count, else the job's) × GPUs per worker (``gpu_milli``/1000 for a
shared GPU) × the flavor's normalisation (§14: relative throughput × the card fraction of a unit),
the flavor being the run's (the admission event's), else the job's. Elastic scaling inside a run
is not followed (the admitted count is used throughout) — a simplification the meter does not make.

Decay with half-life ``h``: a card-second used at age ``a`` counts ``0.5^(a/h)``. Over a constant
allocation ``[s, e)`` the sum is the exact integral

    units × h/ln2 × (0.5^((now − min(e, now))/h) − 0.5^((now − s)/h))

so splitting a job into many, or cutting a run anywhere, changes nothing. Only runs that ended
within :data:`HORIZON_HALF_LIVES` half-lives of ``now`` are read (older ones weigh < 0.1 %).

Registered in ``jobs.scheduling.config.fair_usage_providers`` (billing.apps): the scheduling cycle
reads it every cycle; the report (``billing.fairshare_report``) reads the same figures."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection

HORIZON_HALF_LIVES = 10

# Transitions that open an allocation (admission) or close it (leaving admitted/running).
_MARKS = """e.kind = 'transition' AND (e.to_state = 'admitted'
            OR (e.from_state IN ('admitted', 'running') AND e.to_state NOT IN ('admitted', 'running')))"""

FAIR_USAGE_SQL = f"""
WITH touched AS (
    -- jobs with an allocation that may end inside the horizon: a mark since the cutoff, or still
    -- holding GPUs (their admission may be older than the cutoff)
    SELECT e.job_id FROM jobs_jobevent e
    WHERE e.occurred_at >= %(cutoff)s AND e.occurred_at < %(now)s AND {_MARKS}
    UNION
    SELECT j.id FROM jobs_job j WHERE j.state IN ('admitted', 'running')
), marks AS (
    SELECT e.job_id, e.occurred_at AS at, e.to_state = 'admitted' AS opens, e.data,
           lead(e.occurred_at) OVER (PARTITION BY e.job_id ORDER BY e.occurred_at, e.id) AS closes
    FROM jobs_jobevent e JOIN touched t ON t.job_id = e.job_id
    WHERE e.occurred_at < %(now)s AND {_MARKS}
), runs AS (
    SELECT m.job_id, extract(epoch FROM %(now)s - m.at) AS age_start,
           greatest(extract(epoch FROM %(now)s - coalesce(m.closes, %(now)s)), 0) AS age_end, m.data
    FROM marks m
    WHERE m.opens AND (m.closes IS NULL OR m.closes >= %(cutoff)s)
), units AS (
    SELECT j.project_id, r.age_start, r.age_end,
           (CASE WHEN r.data->>'workers' ~ '^[0-9]{{1,6}}$' THEN (r.data->>'workers')::int ELSE j.workers END)
           * (CASE WHEN j.gpu_milli IS NULL THEN j.gpus_per_worker::float8 ELSE j.gpu_milli / 1000.0 END)
           * (f.relative_throughput * f.fraction_numerator / f.fraction_denominator)::float8 AS u
    FROM runs r
    JOIN jobs_job j ON j.id = r.job_id
    LEFT JOIN quotas_flavor fr ON fr.name = r.data->>'flavor'
    JOIN quotas_flavor f ON f.id = coalesce(fr.id, j.flavor_id)
)
SELECT project_id,
       sum(u * %(h)s / ln(2) * (power(0.5, age_end / %(h)s) - power(0.5, age_start / %(h)s))),
       -- undecayed, over the last half-life: [now − h, now) ∩ [start, end)
       sum(u * greatest(least(age_start, %(h)s) - age_end, 0))
FROM units GROUP BY project_id
"""  # noqa: S608 - constants only, no user input


@dataclass(frozen=True)
class ProjectUsage:
    decayed_card_seconds: float  # normalised, decayed to ``now``
    window_card_seconds: float  # normalised, undecayed, over [now − half-life, now)


def project_usage(now: datetime, half_life_s: int) -> dict[int, ProjectUsage]:
    """Every project with an allocation inside the horizon (project id →)."""
    cutoff = now - timedelta(seconds=HORIZON_HALF_LIVES * half_life_s)
    with connection.cursor() as cursor:
        cursor.execute(FAIR_USAGE_SQL, {"now": now, "cutoff": cutoff, "h": float(half_life_s)})
        return {pk: ProjectUsage(float(decayed), float(window)) for pk, decayed, window in cursor.fetchall()}


def fair_usage(now: datetime, half_life_s: int) -> dict[str, float]:
    """The scheduling cycle's provider: tree id ("p<id>") → decayed normalised card-seconds."""
    return {f"p{pk}": u.decayed_card_seconds for pk, u in project_usage(now, half_life_s).items()}
