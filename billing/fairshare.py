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

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from datetime import datetime, timedelta
from math import log

from django.db import connection

HORIZON_HALF_LIVES = 10

# The transitions that close an allocation: leaving the GPU-holding states.
_CLOSES = """c.kind = 'transition' AND c.from_state IN ('admitted', 'running')
             AND c.to_state NOT IN ('admitted', 'running')"""
# The admission that opened the allocation an event closes (or the job's latest): the job's last
# ``admitted`` transition before it, by the (job, occurred_at) index.
_OPENED = """SELECT a.occurred_at AS at, a.data FROM jobs_jobevent a
             WHERE a.job_id = {job} AND a.kind = 'transition' AND a.to_state = 'admitted' AND {before}
             ORDER BY a.occurred_at DESC, a.id DESC LIMIT 1"""

_BEFORE_CLOSE = "(a.occurred_at, a.id) < (c.occurred_at, c.id)"

# The allocations (project, admission, closing event or NULL, units) open before %(now)s and not
# closed before %(cutoff)s.
_RUNS = f"""
WITH runs AS (
    -- allocations closed since the cutoff, opened before now (closed after now: running at now)
    SELECT c.job_id, o.at, c.occurred_at AS closes, o.data
    FROM jobs_jobevent c
    CROSS JOIN LATERAL ({_OPENED.format(job="c.job_id", before=_BEFORE_CLOSE)}) o
    WHERE c.occurred_at >= %(cutoff)s AND {_CLOSES} AND o.at < %(now)s
    UNION ALL
    -- and the jobs holding GPUs: their run is the latest admission (if that is after now, the run
    -- open at now, if any, has its closing event after now: counted above)
    SELECT j.id, o.at, NULL, o.data
    FROM jobs_job j
    CROSS JOIN LATERAL ({_OPENED.format(job="j.id", before="true")}) o
    WHERE j.state IN ('admitted', 'running') AND o.at < %(now)s
), units AS (
    SELECT j.project_id, r.at, r.closes,
           (CASE WHEN r.data->>'workers' ~ '^[0-9]{{1,6}}$' THEN (r.data->>'workers')::int ELSE j.workers END)
           * (CASE WHEN j.gpu_milli IS NULL THEN j.gpus_per_worker::float8 ELSE j.gpu_milli / 1000.0 END)
           * (f.relative_throughput * f.fraction_numerator / f.fraction_denominator)::float8 AS u
    FROM runs r
    JOIN jobs_job j ON j.id = r.job_id
    LEFT JOIN quotas_flavor fr ON fr.name = r.data->>'flavor'
    JOIN quotas_flavor f ON f.id = coalesce(fr.id, j.flavor_id)
)"""  # noqa: S608 - constants only, no user input

# For every instant ``t`` of %(instants)s (the latest is %(now)s, the earliest's horizon %(cutoff)s)
# and every project: Σ over its runs open before ``t`` and not closed before its horizon.
FAIR_USAGE_SQL = _RUNS + """, ages AS (
    -- float8, not extract's numeric: numeric power() cost 40 µs a row (1.8 s at 43,000 runs)
    SELECT t.at AS instant, u.project_id, u.u, extract(epoch FROM t.at - u.at)::float8 AS age_start,
           greatest(extract(epoch FROM t.at - least(coalesce(u.closes, t.at), t.at))::float8, 0) AS age_end
    FROM units u
    JOIN unnest(%(instants)s::timestamptz[]) AS t(at)
      ON u.at < t.at AND (u.closes IS NULL OR u.closes >= t.at - %(horizon)s * interval '1 second')
)
SELECT instant, project_id,
       sum(u * %(h)s::float8 / ln(2::float8)
           * (power(0.5::float8, age_end / %(h)s::float8) - power(0.5::float8, age_start / %(h)s::float8))),
       -- undecayed, over the last half-life: [t − h, t) ∩ [start, end)
       sum(u * greatest(least(age_start, %(h)s::float8) - age_end, 0))
FROM ages GROUP BY instant, project_id
"""  # noqa: S608 - constants only

# The runs themselves, for a series of instants computed in Python (``decayed_series``).
RUNS_SQL = _RUNS + """
SELECT project_id, extract(epoch FROM at)::float8, extract(epoch FROM closes)::float8, u FROM units
"""


@dataclass(frozen=True)
class ProjectUsage:
    decayed_card_seconds: float  # normalised, decayed to ``now``
    window_card_seconds: float  # normalised, undecayed, over [now − half-life, now)


def project_usage(now: datetime, half_life_s: int) -> dict[int, ProjectUsage]:
    """Every project with an allocation inside the horizon of ``now`` (project id →)."""
    horizon = HORIZON_HALF_LIVES * half_life_s
    params = {"instants": [now], "now": now, "horizon": horizon, "h": float(half_life_s),
              "cutoff": now - timedelta(seconds=horizon)}
    with connection.cursor() as cursor:
        cursor.execute(FAIR_USAGE_SQL, params)
        return {pk: ProjectUsage(float(d), float(w)) for _at, pk, d, w in cursor.fetchall()}


def decayed_series(instants: list[datetime], half_life_s: int) -> dict[datetime, dict[int, float]]:
    """Each instant's decayed usage per project (the report's chart): the runs are read once (one
    statement) and summed at every instant with prefix sums. With ``c(x) = 2^((x − t0)/h)``, a run
    closed at ``e ≤ t`` contributes ``u·h/ln2 · 0.5^((t − t0)/h) · (c(e) − c(s))`` and one open at
    ``t`` ``u·h/ln2 · (1 − 0.5^((t − t0)/h) · c(s))``: the same integral as :data:`FAIR_USAGE_SQL`,
    without evaluating every run at every instant (30 instants × 50,000 runs took 7 s in SQL)."""
    out: dict[datetime, dict[int, float]] = {at: {} for at in instants}
    if not instants:
        return out
    h, horizon = float(half_life_s), HORIZON_HALF_LIVES * half_life_s
    cutoff = min(instants) - timedelta(seconds=horizon)
    with connection.cursor() as cursor:
        cursor.execute(RUNS_SQL, {"now": max(instants), "cutoff": cutoff})
        rows = cursor.fetchall()
    t0, k = cutoff.timestamp(), h / log(2)
    by_project: dict[int, list[tuple[float, float | None, float]]] = {}
    for pk, start, close, u in rows:
        by_project.setdefault(pk, []).append((start, close, float(u)))
    for pk, runs in by_project.items():
        opened = _Prefix(sorted((s, u, u * 2 ** ((s - t0) / h), 0.0) for s, _c, u in runs))
        closed = _Prefix(sorted((c, u, u * 2 ** ((s - t0) / h), u * 2 ** ((c - t0) / h))
                                for s, c, u in runs if c is not None))
        for at in instants:
            t = at.timestamp()
            decay = 0.5 ** ((t - t0) / h)
            since, by = closed.upto(t - horizon, right=False), closed.upto(t, right=True)
            done = closed.between(since, by)
            started = opened.upto(t, right=False)
            held_u, held_ua = opened.total(started, 1, 2)
            gone_u, gone_ua = closed.total(by, 1, 2)
            if started - by or by - since:  # a run open at t, or one closed within its horizon
                closed_part = decay * (done[3] - done[2])
                open_part = (held_u - gone_u) - decay * (held_ua - gone_ua)
                out[at][pk] = k * (closed_part + open_part)
    return out


class _Prefix:
    """Rows sorted by their first value, with prefix sums of the others."""

    def __init__(self, rows: list[tuple[float, float, float, float]]):
        self.keys = [r[0] for r in rows]
        self.sums = [(0.0, 0.0, 0.0, 0.0)]
        for r in rows:
            last = self.sums[-1]
            self.sums.append((0.0, last[1] + r[1], last[2] + r[2], last[3] + r[3]))

    def upto(self, key: float, *, right: bool) -> int:
        return (bisect_right if right else bisect_left)(self.keys, key)

    def total(self, n: int, *columns: int) -> tuple[float, ...]:
        return tuple(self.sums[n][c] for c in columns)

    def between(self, lo: int, hi: int) -> tuple[float, ...]:
        return tuple(b - a for a, b in zip(self.sums[lo], self.sums[hi], strict=True))


def fair_usage(now: datetime, half_life_s: int) -> dict[str, float]:
    """The scheduling cycle's provider: tree id ("p<id>") → decayed normalised card-seconds."""
    return {f"p{pk}": u.decayed_card_seconds for pk, u in project_usage(now, half_life_s).items()}
