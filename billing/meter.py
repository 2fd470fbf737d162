"""The meter: job events → the append-only usage ledger (DESIGN §7).

One run meters the window [metered_through, watermark), where the watermark is the last full
site-zone hour at least ``METER_LAG_SECONDS`` ago (a transition whose transaction committed a
little late is still seen before its hour is metered). Per batch of jobs, in its own
transaction:

1. the job's events are read and cut into allocation segments (``billing.allocation``, pure);
2. PostgreSQL splits every segment at the local hours (``generate_series``) and inserts the
   rows with ``ON CONFLICT (job, segment_start) DO NOTHING``.

Only after every batch committed does the cursor move. A run killed half-way therefore leaves
some batches in the ledger and the cursor where it was; the next run computes the same rows
(segments are cut at event instants and whole hours only, never at a watermark that is not an
hour) and inserts just the missing ones. Nothing is lost and nothing is counted twice.

Runs are serialised by a session-level advisory lock, which ``statement_close_month`` also
takes, so a month never closes while a meter run is writing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import groupby
from operator import itemgetter

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from jobs.states import JobState
from quotas.selectors import site_zone

from . import allocation
from .models import MeterState
from .periods import floor_hour

log = logging.getLogger(__name__)
METER_LOCK = 0x6770_B111  # "gp" + billing: the advisory lock key of the meter
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

_RELEVANT_EVENTS = """
    (e.kind IN ('on_loan', 'scaled')
     OR (e.kind = 'transition' AND (e.to_state IN ('admitted', 'running') OR e.from_state = 'running')))
"""

_INSERT = """
INSERT INTO billing_usagerecord (job_id, segment_start, segment_end, hour_start, month, flavor_id,
    project_id, department_id, user_id, priority_class_id, tier, gpu_count, card_seconds, metered_at)
SELECT s.job_id, greatest(s.s, h.h), least(s.e, h.h + interval '1 hour'), h.h,
       date_trunc('month', h.h AT TIME ZONE %(tz)s)::date,
       j.flavor_id, j.project_id, p.department_id, j.submitted_by_id, j.priority_class_id,
       CASE WHEN s.on_loan THEN 'on_loan' ELSE 'standard' END,
       s.workers * j.gpus_per_worker,
       round(s.workers * j.gpus_per_worker * f.card_fraction * coalesce(j.gpu_milli, 1000) / 1000.0
             * extract(epoch FROM least(s.e, h.h + interval '1 hour') - greatest(s.s, h.h)), 6),
       %(now)s
FROM (SELECT job_id, timestamptz 'epoch' + s_us * interval '1 microsecond' AS s,
             timestamptz 'epoch' + e_us * interval '1 microsecond' AS e, on_loan, workers
      FROM unnest(%(jobs)s::bigint[], %(starts)s::bigint[], %(ends)s::bigint[], %(loans)s::bool[],
                  %(workers)s::int[]) AS r(job_id, s_us, e_us, on_loan, workers)) s
JOIN jobs_job j ON j.id = s.job_id
JOIN quotas_flavor f ON f.id = j.flavor_id
JOIN portal_project p ON p.id = j.project_id
CROSS JOIN LATERAL generate_series(date_trunc('hour', s.s, %(tz)s), s.e - interval '1 microsecond',
                                   interval '1 hour') AS h(h)
ON CONFLICT DO NOTHING
"""


@dataclass(frozen=True)
class MeterReport:
    since: datetime | None
    through: datetime
    jobs: int
    segments: int
    rows: int  # ledger rows inserted by this run (rows already there are not counted)
    batches: int
    seconds: float


def lag() -> timedelta:
    return timedelta(seconds=settings.BILLING["METER_LAG_SECONDS"])


def watermark(now: datetime) -> datetime:
    """The instant up to which usage may be metered at ``now``: a whole local hour."""
    return floor_hour(now - lag(), site_zone())


@contextmanager
def meter_lock(*, wait: bool = True) -> Iterator[bool]:
    """Session-level (not transaction-level): a run spans many transactions. A process that
    dies releases it with its connection."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_lock(%s)" if wait else "SELECT pg_try_advisory_lock(%s)", [METER_LOCK]
        )
        got = True if wait else cursor.fetchone()[0]
    try:
        yield got
    finally:
        if got:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [METER_LOCK])


def meter_state() -> MeterState:
    return MeterState.objects.get_or_create(pk=1)[0]


def usage_meter(
    *,
    now: datetime | None = None,
    until: datetime | None = None,
    rescan_from: datetime | None = None,
    batch_size: int | None = None,
    pause: float = 0.0,
    wait: bool = True,
) -> MeterReport | None:
    """Meter everything up to the watermark (or ``until``, if earlier). ``rescan_from``
    re-derives the ledger from that hour on — rows already there stay, missing ones (e.g. after
    events were repaired) are added and reach statements as adjustments. With ``wait=False``
    it returns None at once if another run holds the lock."""
    with meter_lock(wait=wait) as got:
        if not got:
            return None
        return _run(now or timezone.now(), until, rescan_from, batch_size, pause)


def _run(now, until, rescan_from, batch_size, pause) -> MeterReport:
    t0 = time.perf_counter()
    zone = site_zone()
    limit = watermark(now)
    upto = limit if until is None else min(limit, floor_hour(until, zone))
    state = meter_state()
    rescan = rescan_from is not None
    since = state.metered_through
    if rescan and since is not None:  # never later than the cursor: that would skip a stretch
        since = min(since, floor_hour(rescan_from, zone))
    if since is not None and since >= upto:
        return MeterReport(since, upto, 0, 0, 0, 0, time.perf_counter() - t0)
    jobs = _candidates(since, upto, state.open_jobs, full=since is None or rescan)
    size = batch_size or settings.BILLING["METER_BATCH_JOBS"]
    holding: list[int] = []
    segments = rows = batches = 0
    for i in range(0, len(jobs), size):
        batch = jobs[i : i + size]
        with transaction.atomic():
            found, still = _segments(batch, since, upto)
            rows += _insert(found, now, zone.key)
        holding += still
        segments += len(found)
        batches += 1
        if pause:
            time.sleep(pause)
    with transaction.atomic():
        state = MeterState.objects.select_for_update().get(pk=1)
        if state.metered_through is None or upto >= state.metered_through:
            state.metered_through = upto
            state.open_jobs = sorted(holding)
        state.last_run_at = now
        state.last_rows = rows
        state.save()
    report = MeterReport(since, upto, len(jobs), segments, rows, batches, time.perf_counter() - t0)
    log.info("meter: %s", report)
    return report


def _candidates(since: datetime | None, upto: datetime, open_jobs: list[int], *, full: bool) -> list[int]:
    """Jobs that may hold GPUs in [since, upto): every job that ever started (a first run or a
    rescan), else the jobs still holding at ``since`` plus those with a relevant event since."""
    with connection.cursor() as cursor:
        if full:
            cursor.execute(
                "SELECT DISTINCT job_id FROM jobs_jobevent WHERE kind = 'transition' AND to_state = %s"
                " AND occurred_at < %s",
                [JobState.RUNNING.value, upto],
            )
        else:
            cursor.execute(
                f"SELECT DISTINCT job_id FROM jobs_jobevent e WHERE {_RELEVANT_EVENTS}"  # noqa: S608
                " AND e.occurred_at >= %s AND e.occurred_at < %s",
                [since, upto],
            )
        found = {row[0] for row in cursor.fetchall()}
    return sorted(found | set(() if full else open_jobs))


# Instants travel between PostgreSQL and Python as integer epoch microseconds (exact, and far
# cheaper than parsing and formatting a million timestamps per run).
_EVENTS = f"""
SELECT e.job_id, (extract(epoch FROM e.occurred_at) * 1000000)::bigint,
       CASE WHEN e.kind = 'on_loan' THEN 3 WHEN e.kind = 'scaled' THEN 4
            WHEN e.to_state = 'admitted' THEN 0 WHEN e.to_state = 'running' THEN 1 ELSE 2 END,
       CASE e.data->>'on_loan' WHEN 'true' THEN true WHEN 'false' THEN false END,
       CASE WHEN e.data->>'workers' ~ '^[0-9]{{1,6}}$' THEN (e.data->>'workers')::int END
FROM jobs_jobevent e
WHERE e.job_id = ANY(%s) AND e.occurred_at < %s AND {_RELEVANT_EVENTS}
ORDER BY e.job_id, e.occurred_at, e.id
"""  # noqa: S608 - a constant
# The CASE above, in order: admission, into running, out of running, tier flip, scaling.
_KINDS = (allocation.ADMITTED, allocation.START, allocation.END, allocation.TIER, allocation.WORKERS)


def _segments(job_ids: list[int], since, upto) -> tuple[list[tuple], list[int]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, workers FROM jobs_job WHERE id = ANY(%s)", [job_ids])
        default_workers = dict(cursor.fetchall())
        cursor.execute(_EVENTS, [job_ids, upto])
        events = cursor.fetchall()
    found: list[tuple] = []
    holding: list[int] = []
    Mark = allocation.Mark
    until, start = _us(upto), None if since is None else _us(since)
    for job_id, rows in groupby(events, key=itemgetter(0)):
        marks = [Mark(at, _KINDS[code], on_loan, workers) for _job, at, code, on_loan, workers in rows]
        pieces, holds = allocation.segments(
            marks, default_workers=default_workers.get(job_id, 1), until=until, since=start
        )
        found += [(job_id, p.start, p.end, p.on_loan, p.workers) for p in pieces]
        if holds:
            holding.append(job_id)
    return found, holding


def _us(at: datetime) -> int:
    return (at - EPOCH) // MICROSECOND


def _insert(found: list[tuple], now: datetime, tz: str) -> int:
    if not found:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            _INSERT,
            {
                "jobs": [f[0] for f in found],
                "starts": [f[1] for f in found],
                "ends": [f[2] for f in found],
                "loans": [f[3] for f in found],
                "workers": [f[4] for f in found],
                "now": now,
                "tz": tz,
            },
        )
        return cursor.rowcount


# --- the unmetered tail (reads only) --------------------------------------------------------


@dataclass(frozen=True)
class Tail:
    """Allocation after the meter's cursor: ``segments`` are (job, start µs, end µs, on_loan,
    workers), clipped to [since, until)."""

    cursor: datetime | None
    segments: list[tuple]


def unmetered_tail(
    *, until: datetime, not_before: datetime | None = None, projects: Collection[int] | None = None
) -> Tail:
    """What the next meter runs will add, estimated now: the jobs' allocation segments from the
    cursor (or ``not_before``, if later) up to ``until``, with no lag and no hour alignment.
    Cut by the same rules as the ledger (``allocation.segments``), so ledger + tail is the usage
    as it stands. Writes nothing and takes no lock: a run committing meanwhile can only move
    rows from the tail to the ledger, and callers read the ledger below ``cursor`` only.
    With ``projects``, only the jobs of those projects (a budget check needs a few subtrees, and
    the whole tail reads every running job's events: ~0.2 s at 10,000 running)."""
    cursor, start, jobs = _tail_jobs(until, not_before, projects)
    found: list[tuple] = []
    for i in range(0, len(jobs), settings.BILLING["METER_BATCH_JOBS"]):
        found += _segments(jobs[i : i + settings.BILLING["METER_BATCH_JOBS"]], start, until)[0]
    return Tail(cursor, found)


_BOUND = f"""
SELECT p.department_id, j.project_id,
       sum(j.workers * j.gpus_per_worker * f.card_fraction * coalesce(j.gpu_milli, 1000) / 1000)
FROM jobs_job j
JOIN portal_project p ON p.id = j.project_id
JOIN quotas_flavor f ON f.id = j.flavor_id
WHERE (%(projects)s::bigint[] IS NULL OR j.project_id = ANY(%(projects)s))
  AND (j.state = 'running' OR j.id IN (
      SELECT e.job_id FROM jobs_jobevent e
      WHERE {_RELEVANT_EVENTS} AND e.occurred_at >= %(since)s AND e.occurred_at < %(until)s))
GROUP BY 1, 2
"""  # noqa: S608 - constants only


@dataclass(frozen=True)
class TailBound:
    """At most ``cards`` (department, project, cards) for ``seconds`` each since the cursor."""

    cursor: datetime | None
    seconds: Decimal
    cards: list[tuple[int, int, Decimal]]


def tail_bound(
    *, until: datetime, not_before: datetime | None = None, projects: Collection[int] | None = None
) -> TailBound:
    """An upper bound of ``unmetered_tail``, without reading the events' history: every job that
    may have run in the span — running now, or with an allocation event in it (a job that ran at
    its start and stopped later has one) — at its largest size (``workers``: no grant or growth
    goes beyond it), for the whole span. A budget far from its limit is decided by this alone."""
    cursor = meter_state().metered_through
    start = _tail_start(cursor, not_before)
    if start is None or start >= until:
        return TailBound(cursor, Decimal(0), [])
    with connection.cursor() as db:
        db.execute(_BOUND, {"projects": None if projects is None else sorted(projects),
                            "since": start, "until": until})
        cards = db.fetchall()
    return TailBound(cursor, Decimal(_us(until) - _us(start)) / 1_000_000, cards)


def _tail_start(cursor: datetime | None, not_before: datetime | None) -> datetime | None:
    """The tail begins at the cursor, or at ``not_before`` if that is later."""
    return cursor if not_before is None or (cursor is not None and cursor > not_before) else not_before


def _tail_jobs(
    until: datetime, not_before: datetime | None, projects: Collection[int] | None
) -> tuple[datetime | None, datetime | None, list[int]]:
    """(cursor, start of the tail, the jobs that may hold GPUs in [start, until))."""
    state = meter_state()
    cursor = state.metered_through
    start = _tail_start(cursor, not_before)
    if start is None or start >= until:
        return cursor, start, []
    jobs = _candidates(cursor or start, until, state.open_jobs, full=cursor is None)
    if projects is not None:
        jobs = _of_projects(jobs, projects)
    return cursor, start, jobs


def _of_projects(job_ids: list[int], projects: Collection[int]) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM jobs_job WHERE id = ANY(%s) AND project_id = ANY(%s) ORDER BY id",
            [job_ids, sorted(projects)],
        )
        return [row[0] for row in cursor.fetchall()]
