"""The meter: job events → the append-only usage ledger (DESIGN §7 "Facts and corrections").

Two cursors. The *event-time* cursor ``metered_through`` is the last whole site-zone hour at least
``METER_LAG_SECONDS`` ago that is in the ledger. The *recorded-order* cursor ``events_seen`` is the
transaction snapshot (plus the highest event id) the last complete run started from: an event
its transaction was not visible to is new to the next run, whatever its ``occurred_at`` — so a
fact the backend reports late (an earlier end, a tier flip an hour ago) is found by a plain run.

Per batch of jobs, in its own transaction:

1. the job's events are read and cut into allocation segments (``billing.allocation``, pure), and
   at the project's department moves (each piece is charged to the owner at its time);
2. PostgreSQL splits every segment at the local hours (``generate_series``) and *diffs* the
   result against the job's live ledger rows within the job's scope: a live row that is no longer
   true gets a reversal (the same key, negated card-seconds), a true row that is missing is
   inserted as the next revision. A job with a newly recorded fact from before the event-time
   cursor is re-derived from its first event (scope: everything); any other job only from the
   cursor on, the hours this run adds.

So each job's net rows equal its usage as its facts now say, the ledger only ever grows, and a
re-run, or a run after a crash half-way, writes nothing that is already true. The cursors move
only after every batch committed.

Runs are serialised by a session-level advisory lock, which ``statement_close_month`` also
takes, so a month never closes while a meter run is writing. Rows of a closed month written
later (reversals and corrections alike) reach the next month's statements as adjustments.
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

from jobs.requests import Request, Share, default_request, filled, flavor_shares
from jobs.states import JobState
from quotas.selectors import site_zone

from . import allocation, rollup
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

# Card-seconds of one row: devices held × their fraction of a card × seconds, rounded once.
# Exact: the fraction of a card is a rational (numerator / denominator, quotas.Flavor) and the one
# division comes last, so seven 1/7 slices for an hour are 3600 card-seconds, not 3599.99993.
CARD_SECONDS = """round(s.workers::numeric * j.gpus_per_worker * f.fraction_numerator
             * coalesce(j.gpu_milli, 1000)
             * extract(epoch FROM least(s.e, h.h + interval '1 hour') - greatest(s.s, h.h))
             / (f.fraction_denominator * 1000.0), 6)"""

# The row's seconds, exact (numeric): the segment inside the hour.
_SECONDS = "extract(epoch FROM least(s.e, h.h + interval '1 hour') - greatest(s.s, h.h))"
# Core-seconds and MiB-seconds (DESIGN §15 "Metering"): workers × a worker's request (``s.cpu``
# millicores, ``s.mem`` MiB) × seconds, and the same of the part beyond the share (``s.xcpu``,
# ``s.xmem``); rounded once like card-seconds. A worker's figures come from Python (``_machine``).
# Most jobs ask nothing beyond the share: a zero figure skips its arithmetic (numeric, per row).
MACHINE_SECONDS = ",\n       ".join(
    f"CASE WHEN s.{v} = 0 THEN 0 ELSE round(s.workers::numeric * s.{v} * {_SECONDS}{per}, 6) END"
    for v, per in (("cpu", " / 1000"), ("mem", ""), ("xcpu", " / 1000"), ("xmem", ""))
)

_COLUMNS = """job_id, segment_start, segment_end, hour_start, month, flavor_id, project_id, department_id,
    user_id, priority_class_id, tier, gpu_count, card_seconds, relative_throughput, core_seconds, mib_seconds,
    extra_core_seconds, extra_mib_seconds"""
# A reversal: the same row with every quantity negated.
_NEGATED = (
    _COLUMNS.replace("card_seconds", "-card_seconds")
    .replace("extra_core_seconds", "-extra_core_seconds")
    .replace(" core_seconds", " -core_seconds")
    .replace("extra_mib_seconds", "-extra_mib_seconds")
    .replace(" mib_seconds", " -mib_seconds")
)
# A live row and a true row are the same fact when they agree on everything the facts decide. The
# relative throughput is not a fact of the job but the flavor's profile when metered (DESIGN §14):
# a profile edit alone never reverses a row. Core- and MiB-seconds neither (snapshots of the request
# and the share when metered): a job's request is fixed at submission, and a share the flavor's
# nodes changed later does not rewrite billed hours.
_SAME = """{a}.job_id = {b}.job_id AND {a}.segment_start = {b}.segment_start
    AND {a}.segment_end = {b}.segment_end AND {a}.tier = {b}.tier AND {a}.gpu_count = {b}.gpu_count
    AND {a}.department_id = {b}.department_id AND {a}.card_seconds = {b}.card_seconds"""

# Two scratch tables per connection, emptied for every batch: the batch's true rows, and its
# charges already in the ledger within scope (live or reversed). With statistics (ANALYZE) the
# anti-joins below are hash joins — over CTEs of arrays and generate_series the planner guessed
# nested loops (minutes per batch). A batch with nothing in scope (a first run, the new hours of
# an incremental run) skips all of it: a plain insert of revision 0.
_SCRATCH = """
SET LOCAL jit = off;  -- compiling these plans cost more than running them
CREATE TEMP TABLE IF NOT EXISTS meter_true (
    job_id bigint, segment_start timestamptz, segment_end timestamptz, hour_start timestamptz, month date,
    flavor_id bigint, project_id bigint, department_id bigint, user_id bigint, priority_class_id bigint,
    tier text, gpu_count integer, card_seconds numeric, relative_throughput numeric, core_seconds numeric,
    mib_seconds numeric, extra_core_seconds numeric, extra_mib_seconds numeric);
CREATE TEMP TABLE IF NOT EXISTS meter_held (id bigint, revision smallint, reversed boolean, LIKE meter_true);
TRUNCATE meter_true, meter_held;
"""

_TRUE_ROWS = f"""
INSERT INTO meter_true
SELECT s.job_id, greatest(s.s, h.h), least(s.e, h.h + interval '1 hour'), h.h,
       date_trunc('month', h.h AT TIME ZONE %(tz)s)::date,
       f.id, j.project_id, coalesce(s.department_id, p.department_id), j.submitted_by_id,
       j.priority_class_id, CASE WHEN s.on_loan THEN 'on_loan' ELSE 'standard' END,
       s.workers * j.gpus_per_worker, {CARD_SECONDS}, f.relative_throughput, {MACHINE_SECONDS}
FROM (SELECT job_id, timestamptz 'epoch' + s_us * interval '1 microsecond' AS s,
             timestamptz 'epoch' + e_us * interval '1 microsecond' AS e, on_loan, workers, department_id,
             flavor_id, cpu, mem, xcpu, xmem
      FROM unnest(%(jobs)s::bigint[], %(starts)s::bigint[], %(ends)s::bigint[], %(loans)s::bool[],
                  %(workers)s::int[], %(departments)s::bigint[], %(flavors)s::bigint[], %(cpu)s::bigint[],
                  %(mem)s::bigint[], %(xcpu)s::bigint[], %(xmem)s::bigint[])
           AS r(job_id, s_us, e_us, on_loan, workers, department_id, flavor_id, cpu, mem, xcpu, xmem)) s
JOIN jobs_job j ON j.id = s.job_id
-- the flavor of the run (admission event), else the job's: a requeued job with alternatives
-- may have run on another flavor than the one it holds now (DESIGN §14)
JOIN quotas_flavor f ON f.id = coalesce(s.flavor_id, j.flavor_id)
JOIN portal_project p ON p.id = j.project_id
CROSS JOIN LATERAL generate_series(date_trunc('hour', s.s, %(tz)s), s.e - interval '1 microsecond',
                                   interval '1 hour') AS h(h)
"""  # noqa: S608 - constants only

# The batch's charges inside each job's scope, and whether a reversal names them.
_HELD_ROWS = f"""
INSERT INTO meter_held
SELECT u.id, u.revision, EXISTS (SELECT 1 FROM billing_usagerecord r WHERE r.reverses_id = u.id),
       {_COLUMNS.replace("job_id", "u.job_id", 1)}
FROM billing_usagerecord u
JOIN unnest(%(scope_jobs)s::bigint[], %(scope_from)s::timestamptz[]) AS c(job_id, since)
  ON c.job_id = u.job_id
WHERE u.job_id = ANY(%(scope_jobs)s) AND u.reverses_id IS NULL
  AND (c.since IS NULL OR u.segment_start >= c.since)
"""  # noqa: S608 - constants only

_REVERSE = f"""
INSERT INTO billing_usagerecord ({_COLUMNS}, revision, reverses_id, metered_at)
SELECT {_NEGATED}, l.revision, l.id, %(now)s
FROM meter_held l
WHERE NOT l.reversed AND NOT EXISTS (SELECT 1 FROM meter_true t WHERE {_SAME.format(a="t", b="l")})
"""  # noqa: S608 - constants only

# What is true and not live is charged as the next revision of its start (0 if it has none).
_CHARGE = f"""
INSERT INTO billing_usagerecord ({_COLUMNS}, revision, reverses_id, metered_at)
SELECT t.*, coalesce(n.next, 0), NULL, %(now)s
FROM meter_true t
LEFT JOIN (SELECT job_id, segment_start, max(revision) + 1 AS next FROM meter_held GROUP BY 1, 2) n
  ON n.job_id = t.job_id AND n.segment_start = t.segment_start
WHERE NOT EXISTS (SELECT 1 FROM meter_held l WHERE NOT l.reversed AND {_SAME.format(a="l", b="t")})
"""  # noqa: S608 - constants only

_CHARGE_NEW = f"""
INSERT INTO billing_usagerecord ({_COLUMNS}, revision, reverses_id, metered_at)
SELECT t.*, 0, NULL, %(now)s FROM meter_true t
"""  # noqa: S608 - constants only


@dataclass(frozen=True)
class MeterReport:
    since: datetime | None
    through: datetime
    jobs: int
    segments: int
    rows: int  # charge rows written by this run (rows already true are not counted)
    batches: int
    seconds: float
    reversed: int = 0  # reversal rows written: live rows a late fact made untrue
    corrected_jobs: int = 0  # jobs re-derived from their first event because of a late fact


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
    """Meter everything up to the watermark (or ``until``, if earlier) and correct what facts
    recorded since the last run changed. ``rescan_from`` re-derives every job's ledger from that
    hour on the same way (a repair after events were restored); corrections of closed months
    reach statements as adjustments. With ``wait=False`` it returns None at once if another run
    holds the lock."""
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
    since = state.metered_through
    if since is not None:  # a run never shortens what is metered; it may still correct it
        upto = max(upto, since)
    seen = _seen_now()  # before reading anything: what this run is sure to have read
    late = _late_jobs(state, since)
    scope = since if rescan_from is None or since is None else min(since, floor_hour(rescan_from, zone))
    jobs = sorted(
        set(_candidates(scope, upto, state.open_jobs, full=since is None or rescan_from is not None)) | late
    )
    moves = _moves()
    shares: dict[int, Share] = {}  # flavors' shares now, for jobs that stored none (external jobs)
    size = batch_size or settings.BILLING["METER_BATCH_JOBS"]
    holding: list[int] = []
    segments = rows = reversed_rows = batches = 0
    for i in range(0, len(jobs), size):
        batch = jobs[i : i + size]
        scopes = {job: None if job in late else scope for job in batch}
        with transaction.atomic():
            found, still = _segments(batch, scopes, upto, moves, shares)
            high = rollup.ledger_high_water()
            undone, done = _apply(found, scopes, now, zone.key)
            if undone or done:
                rollup.roll_up(high, zone.key)  # the usage explorer's daily sums, in step
        holding += still
        segments += len(found)
        rows += done
        reversed_rows += undone
        batches += 1
        if pause:
            time.sleep(pause)
    with transaction.atomic():
        state = MeterState.objects.select_for_update().get(pk=1)
        if state.metered_through is None or upto >= state.metered_through:
            state.metered_through = upto
            state.open_jobs = sorted(holding)
        state.events_seen, state.events_seen_id, state.events_seen_xid = seen
        state.last_run_at = now
        state.last_rows = rows + reversed_rows
        state.save()
    report = MeterReport(
        since, upto, len(jobs), segments, rows, batches, time.perf_counter() - t0, reversed_rows, len(late)
    )
    log.info("meter: %s", report)
    return report


def _seen_now() -> tuple[str, int, int | None]:
    """The recorded-order cursor as of now: this snapshot, the highest event id it sees, and its
    own transaction if it has one — a snapshot lists that as in progress, yet sees its events
    (a run inside a caller's transaction: a test, a shell)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT txid_current_snapshot()::text, coalesce(max(id), 0), txid_current_if_assigned()"
            " FROM jobs_jobevent"
        )
        return cursor.fetchone()


_LATE = f"""
SELECT DISTINCT e.job_id FROM (
    SELECT * FROM jobs_jobevent WHERE id > %(seen_id)s
    UNION
    SELECT * FROM jobs_jobevent
    WHERE recorded_xid >= txid_snapshot_xmin(%(seen)s::txid_snapshot)
      AND NOT txid_visible_in_snapshot(recorded_xid, %(seen)s::txid_snapshot)
      AND recorded_xid IS DISTINCT FROM %(seen_xid)s
) e
WHERE e.occurred_at < %(since)s AND {_RELEVANT_EVENTS}
"""  # noqa: S608 - constants only


def _late_jobs(state: MeterState, since: datetime | None) -> set[int]:
    """Jobs with an allocation fact recorded since the last run that happened before the
    event-time cursor: their metered past may be wrong, so they are re-derived in full."""
    if since is None or not state.events_seen:
        return set()  # a first run derives everything in full anyway
    with connection.cursor() as cursor:
        cursor.execute(
            _LATE,
            {
                "seen": state.events_seen,
                "seen_id": state.events_seen_id,
                "seen_xid": state.events_seen_xid,
                "since": since,
            },
        )
        return {row[0] for row in cursor.fetchall()}


def _moves() -> dict[int, list[allocation.Move]]:
    """Every project's department history (a small table: one row per move)."""
    found: dict[int, list[allocation.Move]] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT project_id, (extract(epoch FROM at) * 1000000)::bigint, from_department_id,"
            " to_department_id FROM portal_projectmove ORDER BY project_id, at, id"
        )
        for project, at, source, target in cursor.fetchall():
            found.setdefault(project, []).append(allocation.Move(at, source, target))
    return found


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
       CASE WHEN e.data->>'workers' ~ '^[0-9]{{1,6}}$' THEN (e.data->>'workers')::int END,
       CASE WHEN e.to_state = 'admitted' THEN f.id END
FROM jobs_jobevent e
LEFT JOIN quotas_flavor f ON f.name = e.data->>'flavor'
WHERE e.job_id = ANY(%s) AND e.occurred_at < %s AND {_RELEVANT_EVENTS}
ORDER BY e.job_id, e.occurred_at, e.id
"""  # noqa: S608 - a constant
# The CASE above, in order: admission, into running, out of running, tier flip, scaling.
_KINDS = (allocation.ADMITTED, allocation.START, allocation.END, allocation.TIER, allocation.WORKERS)


def _segments(
    job_ids: list[int],
    scopes: dict[int, datetime | None],
    upto: datetime,
    moves: dict[int, list[allocation.Move]] | None = None,
    shares: dict[int, Share] | None = None,
) -> tuple[list[tuple], list[int]]:
    """(job, start µs, end µs, on_loan, workers, department, flavor, *a worker's CPU and memory
    (``_machine``)) of each job's allocation in [its scope, upto) — cut at its project's moves
    when ``moves`` are given — and the jobs that still hold GPUs at ``upto``. ``shares``: the
    flavors' shares now, filled as needed (a run passes one dict for all its batches)."""
    with connection.cursor() as cursor:
        cursor.execute(_SHAPES, [job_ids])
        rows = cursor.fetchall()
        cursor.execute(_EVENTS, [job_ids, upto])
        events = cursor.fetchall()
    shapes = {pk: (workers, project) for pk, workers, project, *_ in rows}
    machine = _machine(rows, shares if shares is not None else {})
    found: list[tuple] = []
    holding: list[int] = []
    Mark = allocation.Mark
    until = _us(upto)
    for job_id, rows in groupby(events, key=itemgetter(0)):
        marks = [
            Mark(at, _KINDS[code], on_loan, workers, flavor)
            for _job, at, code, on_loan, workers, flavor in rows
        ]
        since = scopes.get(job_id)
        workers, project = shapes.get(job_id, (1, None))
        pieces, holds = allocation.segments(
            marks, default_workers=workers, until=until, since=None if since is None else _us(since)
        )
        if moves:
            pieces = allocation.by_owner(pieces, moves.get(project, []))
        held = machine.get(job_id, NO_MACHINE)
        found += [(job_id, p.start, p.end, p.on_loan, p.workers, p.department, p.flavor, *held)
                  for p in pieces]
        if holds:
            holding.append(job_id)
    return found, holding


_SHAPES = """
SELECT id, workers, project_id, flavor_id, gpus_per_worker, gpu_milli, cpu_millicores, memory_mib,
       unit_share <> '{}'::jsonb, (unit_share->>'cpu_millicores')::bigint, (unit_share->>'memory_mib')::bigint
FROM jobs_job WHERE id = ANY(%s)
"""
NO_MACHINE = (0, 0, 0, 0)


def _machine(rows: list[tuple], shares: dict[int, Share]) -> dict[int, tuple[int, int, int, int]]:
    """Per job, what one worker holds besides its GPUs and the part of it beyond the share its
    units include: (millicores, MiB, extra millicores, extra MiB) — ``jobs.requests``' rules
    (its own figures, else its units' share; the share it was submitted with, else the flavor's
    now: an external job has none stored). A dimension the share does not know includes nothing
    and prices nothing beyond it: nothing says the request is beyond the share."""
    found = {}
    # The flavors' shares now, for jobs submitted without one stored: all read at once.
    shares.update(flavor_shares({row[3] for row in rows if not row[8]} - shares.keys()))
    for pk, _workers, _project, flavor_id, units, milli, cpu, mem, stored, share_cpu, share_mem in rows:
        if stored:
            share = Share(cpu_millicores=share_cpu, memory_mib=share_mem)
        else:
            share = shares[flavor_id]
        asked = filled(Request(cpu, mem), share, units=units or 0, milli=milli)
        included = default_request(share, units=units or 0, milli=milli)
        values = []
        for dim in ("cpu_millicores", "memory_mib"):
            held, part = asked.get(dim) or 0, included.get(dim)
            values.append((held, 0 if part is None else max(0, held - part)))
        (cores, extra_cores), (mib, extra_mib) = values
        found[pk] = (cores, mib, extra_cores, extra_mib)
    return found


def _us(at: datetime) -> int:
    return (at - EPOCH) // MICROSECOND


def _apply(found: list[tuple], scopes: dict[int, datetime | None], now: datetime, tz: str) -> tuple[int, int]:
    """Make the jobs' live rows in their scopes equal ``found``: (reversals, charges) written."""
    params = {
        "jobs": [f[0] for f in found],
        "starts": [f[1] for f in found],
        "ends": [f[2] for f in found],
        "loans": [f[3] for f in found],
        "workers": [f[4] for f in found],
        "departments": [f[5] for f in found],
        "flavors": [f[6] for f in found],
        "cpu": [f[7] for f in found],
        "mem": [f[8] for f in found],
        "xcpu": [f[9] for f in found],
        "xmem": [f[10] for f in found],
        "scope_jobs": list(scopes),
        "scope_from": list(scopes.values()),
        "now": now,
        "tz": tz,
    }
    with connection.cursor() as cursor:
        cursor.execute(_SCRATCH)
        cursor.execute(_TRUE_ROWS, params)
        cursor.execute(_HELD_ROWS, params)
        held = cursor.rowcount
        if not held:  # the usual batch: nothing metered in scope yet, nothing to undo
            cursor.execute(_CHARGE_NEW, params)
            return 0, cursor.rowcount
        cursor.execute("ANALYZE meter_true, meter_held")
        cursor.execute(_REVERSE, params)
        undone = cursor.rowcount
        cursor.execute(_CHARGE, params)
        return undone, cursor.rowcount


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
    size = settings.BILLING["METER_BATCH_JOBS"]
    for i in range(0, len(jobs), size):
        batch = jobs[i : i + size]
        found += [f[:5] for f in _segments(batch, dict.fromkeys(batch, start), until)[0]]
    return Tail(cursor, found)


_BOUND = f"""
SELECT p.department_id, j.project_id,
       sum(j.workers::numeric * j.gpus_per_worker * f.fraction_numerator * coalesce(j.gpu_milli, 1000)
           / (f.fraction_denominator * 1000))
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
