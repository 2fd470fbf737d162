"""``schedule_once``: snapshot → pure engine → decisions applied in one transaction.

Safety against over-admission:
* one cycle at a time — a transaction-scoped PostgreSQL advisory lock serialises cycles, even
  across worker processes and hosts;
* every admission is a conditional ``UPDATE … WHERE state = 'queued'``: a job cancelled while
  the cycle ran is simply not admitted (its capacity stays free), never admitted twice;
* preemption signals are conditional on the victim still holding its GPUs;
* a growth is conditional on the job still running with the worker count the engine saw, and
  a reclaimed grown worker is removed only from a job still holding it (row locked).
Backend calls (dispatch, stop, resize) happen after commit, driven by the event rows and claims
(the outbox).
"""

from __future__ import annotations

import json
import logging
import time
from array import array
from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from jobs import reasons, services, workflows
from jobs.models import Job, JobEvent, JobKind
from jobs.resize import drop_workers, record_scaled, request_resize
from jobs.retries import waiting_out_backoff
from jobs.scheduler.engine.model import CycleResult, Explain, Preemption
from jobs.scheduler.scheduler import schedule
from jobs.scheduling.cache_keys import EXPLAIN_KEY, LAST_CYCLE_KEY, QUEUE_KEY
from jobs.scheduling.config import read_config
from jobs.scheduling.snapshot import build_snapshot
from jobs.scheduling.warm import warm_engine
from jobs.states import HOLDING, JobState

log = logging.getLogger(__name__)
CYCLE_LOCK = 0x6770_7001  # "gp" + 1: the advisory lock key of the scheduling cycle
EXPLAIN_HEAD = 100  # explanations cached per cycle for the head of the queue
EXPLAIN_TTL = 600
EXPLAIN_ALL_EVERY = 60  # seconds between cycles that cache every waiting job's explanation
EXPLAIN_ALL_KEY = "explain:all-cached-at"
DRY_TTL = 30  # explanations from a dry cycle (explain_job) live this long
DRY_LOCK_KEY = "explain:dry-running"
DRY_WAIT_SECONDS = 5  # how long a request waits for another request's dry cycle
HELD_REASONS = ("dependency", "array_cap")  # answers of jobs.workflows.held_back, not the engine's


@dataclass(frozen=True)
class CycleReport:
    admitted: int
    preempted: int
    reservations: int
    waiting: int
    decide_ms: float  # reading the snapshot (or only what changed) and running the engine
    apply_ms: float
    rebuilds: int  # engine rebuilds so far in this process
    grown: int = 0  # running jobs that got workers (the grow pass)


def schedule_once(now: datetime | None = None, *, wait: bool = True, warm: bool = True) -> CycleReport | None:
    """One scheduling cycle. With ``wait=False`` it returns None at once if another cycle holds
    the lock (the periodic task uses that: a cycle already running will see the new jobs).
    ``warm=False`` builds the engine from a full snapshot instead of the process's warm one."""
    # DESIGN §17: jobs whose dependency can no longer be met are cancelled first (their own
    # transactions); the snapshot then holds back the ones whose dependencies are still unmet.
    services.cancel_unmet_dependents()
    engine = warm_engine()
    with transaction.atomic():
        if not _lock(wait):
            return None
        now = now or timezone.now()
        try:
            t0 = time.perf_counter()
            result = engine.cycle(now) if warm else _cold_cycle(now)
            t1 = time.perf_counter()
            applied = _apply(result, now)
            t2 = time.perf_counter()
            waiting = _cache_explanations(result, now)
        except BaseException:
            engine.invalidate()  # the engine believes decisions that were rolled back
            raise
        admitted, preempted, reserved, grown = applied
        if (
            admitted < len(result.admissions)
            or preempted < len(result.preemptions)
            or grown < len(result.growths)
            or any(p.worker is not None for p in result.preemptions)
        ):
            # A job was cancelled or changed while the cycle ran — or a grown worker was taken
            # back, which renumbers the job's workers: a fresh engine reads them as stored.
            engine.invalidate()
    _hold_for_budget(result.held)
    report = CycleReport(
        admitted, preempted, reserved, waiting, (t1 - t0) * 1e3, (t2 - t1) * 1e3, engine.rebuilds, grown
    )
    log.info("scheduling cycle: %s", report)
    cache.set(
        LAST_CYCLE_KEY,
        {
            "at": now.isoformat(),
            "decide_ms": report.decide_ms,
            "apply_ms": report.apply_ms,
            "admitted": report.admitted,
        },
        timeout=None,
    )
    return report


def _cold_cycle(now: datetime) -> CycleResult:
    """One cycle from a full snapshot, with the operator's engine settings (read once)."""
    config = read_config(now)
    return schedule(build_snapshot(now, config), fragmentation_aware=config.fragmentation_aware,
                    backfill=config.backfill)


def _apply(result: CycleResult, now: datetime) -> tuple[int, int, int, int]:
    # Victims first: a victim's own end (a cancel committing while the cycle runs) then reaches
    # the log before the admission that relies on its GPUs, since the signal's row lock waits for
    # it — the log's order is the order in which the database made things visible.
    preempted = _apply_preemptions(result, now) + _apply_shrinks(result, now)
    admitted = _apply_admissions(result, now)
    reserved = _apply_reservations(result, now)
    _apply_on_loan(result, now)
    grown = _apply_growths(result, now)
    return admitted, preempted, reserved, grown


HOLDS_PER_CYCLE = 200  # approval requests opened per cycle: a long queue is held over a few cycles


def _hold_for_budget(held: tuple[str, ...]) -> int:
    """Send the jobs a spent budget holds to approval (``job_budget_hold``), after the cycle's
    commit and outside its lock: each reads the budget's usage for its reason. The engine holds
    them meanwhile, so none is admitted while its request is being opened."""
    from jobs.approvals import job_budget_hold

    return sum(job_budget_hold(job_id=int(job_id)) for job_id in held[:HOLDS_PER_CYCLE])


def _lock(wait: bool) -> bool:
    with connection.cursor() as cursor:
        if wait:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CYCLE_LOCK])
            return True
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [CYCLE_LOCK])
        return cursor.fetchone()[0]


def _placement_json(admission) -> str:
    return json.dumps(
        [[[int(node[1:]), gpu, m] for node, gpu, m in worker] for worker in admission.placement]
    )


def _apply_admissions(result: CycleResult, now: datetime) -> int:
    if not result.admissions:
        return 0
    rows = [
        (int(a.job_id), a.workers, _placement_json(a), not a.in_quota, json.dumps(list(a.preempts)), a.flavor,
         json.dumps([int(v) for v in a.moved]))
        for a in result.admissions
    ]
    with connection.cursor() as cursor:
        # One statement for all admissions; WHERE state = 'queued' makes each conditional. The
        # cycle took ``now`` before it read the queue, so a job that entered the queue in between
        # (a submission, a requeue) is admitted at ``now`` — the engine's clock, which the warm
        # engine recognises its runs by — but its event is dated no earlier than the queue entry
        # (``was``, read before the update): an event log never has an admission before it.
        cursor.execute(
            """
            WITH v(id, workers, placement, on_loan, preempts, flavor, moved) AS (
                SELECT * FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::bool[], %s::text[], %s::text[],
                                     %s::text[])
            ), was AS (
                SELECT id, state_changed_at FROM jobs_job WHERE id IN (SELECT id FROM v)
            ), moved AS (
                UPDATE jobs_job j SET state = 'admitted', state_changed_at = %s, admitted_at = %s,
                       granted_workers = v.workers, placement = v.placement::jsonb, on_loan = v.on_loan,
                       grown_at = '[]'::jsonb,
                       -- the flavor the engine chose among the job's alternatives (DESIGN §14):
                       -- metering, billing, explain and the backend follow Job.flavor
                       flavor_id = COALESCE((SELECT f.id FROM quotas_flavor f WHERE f.name = v.flavor),
                                            j.flavor_id)
                FROM v JOIN was ON was.id = v.id WHERE j.id = v.id AND j.state = 'queued'
                RETURNING j.id, v.workers, v.on_loan, v.preempts, v.placement, v.flavor, v.moved,
                          GREATEST(j.admitted_at, was.state_changed_at) AS occurred_at
            )
            INSERT INTO jobs_jobevent (job_id, kind, from_state, to_state, reason, occurred_at, data)
            SELECT id, 'transition', 'queued', 'admitted', 'admitted by the scheduler', occurred_at,
                   jsonb_build_object('workers', workers, 'on_loan', on_loan, 'preempts', preempts::jsonb,
                                      'placement', placement::jsonb, 'flavor', flavor,
                                      'moved', moved::jsonb)
            FROM moved
            """,
            [
                [r[0] for r in rows],
                [r[1] for r in rows],
                [r[2] for r in rows],
                [r[3] for r in rows],
                [r[4] for r in rows],
                [r[5] for r in rows],
                [r[6] for r in rows],
                now,
                now,
            ],
        )
        return cursor.rowcount


def _apply_preemptions(result: CycleResult, now: datetime) -> int:
    whole = [p for p in result.preemptions if p.worker is None]
    if not whole:
        return 0
    # The English reason ("reclaim for job 12") and the same as a message for the reader's language.
    # Jobs moved for consolidation are marked: the engine's hourly budget counts their events.
    victims = [(int(p.victim_id), reasons.preempted_for(p.reason, int(p.for_job_id)))
               for p in whole if p.reason != "consolidate"]
    moved = [(int(p.victim_id), reasons.preempted_for(p.reason, int(p.for_job_id)))
             for p in whole if p.reason == "consolidate"]
    return len(preemption_signal(victims, now)) + len(preemption_signal(moved, now, {"consolidate": True}))


def preemption_signal(
    victims: list[tuple[int, object]], now: datetime, data: dict | None = None
) -> list[int]:
    """Tell each victim ``(job id, reason)`` to stop within its grace period: in one statement, the
    conditional update (still holding GPUs, not signalled yet) and its ``preemption_signal`` event.
    The scheduler's preemptions and a node drained with "requeue now" (jobs/clusters/nodes.py) both come
    here. Returns the ids signalled."""
    if not victims:
        return []
    said = [reasons.stored(why) for _id, why in victims]
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH v(id, reason, message) AS (SELECT * FROM unnest(%s::bigint[], %s::text[], %s::text[])),
            signalled AS (
                UPDATE jobs_job j SET terminating_since = %s
                FROM v WHERE j.id = v.id AND j.state = ANY(%s) AND j.terminating_since IS NULL
                RETURNING j.id, j.state, v.reason, v.message
            )
            INSERT INTO jobs_jobevent
                (job_id, kind, from_state, to_state, reason, reason_message, occurred_at, data)
            SELECT id, 'preemption_signal', state, state, reason, message::jsonb, %s, %s::jsonb
            FROM signalled
            RETURNING job_id
            """,
            [[job_id for job_id, _why in victims], [text for text, _m in said],
             [json.dumps(m) for _t, m in said], now, [s.value for s in HOLDING], now, json.dumps(data or {})],
        )
        return [row[0] for row in cursor.fetchall()]


def _apply_shrinks(result: CycleResult, now: datetime) -> int:
    """Grown workers taken back by a reclaim or a higher-priority job of the project: the job
    runs on without them, from now (no grace period: see jobs/scheduler/engine/preempt.py)."""
    by_job: dict[int, list[Preemption]] = {}
    for p in result.preemptions:
        if p.worker is not None:
            by_job.setdefault(int(p.victim_id), []).append(p)
    applied, resized = 0, []
    for job_id, taken in sorted(by_job.items()):
        job = Job.objects.select_for_update().filter(pk=job_id, state__in=list(HOLDING)).first()
        drop = {p.worker for p in taken}
        held = len(job.placement) if job else 0
        if job is None or job.terminating_since or max(drop) >= held or min(drop) < held - len(job.grown_at):
            continue  # it ended or changed meanwhile: nothing of what the engine saw is left
        placement, grown = drop_workers(job, drop)
        Job.objects.filter(pk=job_id).update(
            placement=placement, grown_at=grown, granted_workers=len(placement), resize_requested_at=now
        )
        why = reasons.preempted_for(taken[0].reason, int(taken[0].for_job_id))
        record_scaled(
            job,
            before=held,
            after=len(placement),
            reason=reasons.reason(reasons.SCALED_FOR, before=held, after=len(placement), why=why),
            at=now,
            removed=sorted(drop),
            placement=placement,
        )
        applied += len(taken)
        resized.append(job_id)
    request_resize(resized)
    return applied


_GROW_SQL = """
    WITH v(id, before, after, added) AS (
        SELECT * FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::text[])
    ), grown AS (
        UPDATE jobs_job j
        SET placement = j.placement || v.added::jsonb,
            grown_at = j.grown_at
                || (SELECT jsonb_agg(%s::jsonb) FROM generate_series(v.before + 1, v.after)),
            granted_workers = v.after, resize_requested_at = %s
        FROM v WHERE j.id = v.id AND j.state = 'running' AND j.terminating_since IS NULL
               AND jsonb_array_length(j.placement) = v.before
        RETURNING j.id, v.before, v.after, j.placement
    ), events AS (
        INSERT INTO jobs_jobevent
            (job_id, kind, from_state, to_state, reason, reason_message, occurred_at, data)
        SELECT id, 'scaled', 'running', 'running', 'scaled ' || before || '→' || after || ' by the scheduler',
               jsonb_build_object('msgid', %s::text, 'context', %s::text,
                                  'params', jsonb_build_object('before', before, 'after', after)),
               %s, jsonb_build_object('workers', after, 'from', before, 'placement', placement)
        FROM grown
    )
    SELECT id FROM grown
"""


def _apply_growths(result: CycleResult, now: datetime) -> int:
    """One conditional UPDATE for all growths: only jobs still running (not being stopped) with
    the worker count the engine saw get the new workers; each gets one ``scaled`` event."""
    if not result.growths:
        return 0
    ids, before, after, added = [], [], [], []
    for g in result.growths:
        ids.append(int(g.job_id))
        before.append(g.workers - len(g.added))
        after.append(g.workers)
        added.append(json.dumps([[[int(n[1:]), gpu, m] for n, gpu, m in worker] for worker in g.added]))
    with connection.cursor() as cursor:
        cursor.execute(
            _GROW_SQL,
            [ids, before, after, added, json.dumps(now.isoformat()), now,
             reasons.SCALED_BY_SCHEDULER, reasons.CONTEXT, now],
        )
        done = [row[0] for row in cursor.fetchall()]
    request_resize(done)
    return len(done)


_RESERVE_SQL = """
    WITH v(id, data) AS (SELECT id, data::jsonb FROM unnest(%s::bigint[], %s::text[]) AS u(id, data)),
    moved AS (
        SELECT v.id, v.data FROM v
        WHERE (SELECT e.data FROM jobs_jobevent e WHERE e.job_id = v.id AND e.kind = 'reservation'
               ORDER BY e.occurred_at DESC, e.id DESC LIMIT 1) IS DISTINCT FROM v.data
    ),
    waiting AS (
        SELECT j.id FROM jobs_job j WHERE j.id IN (SELECT id FROM moved) AND j.state = 'queued'
        ORDER BY j.id FOR UPDATE
    )
    INSERT INTO jobs_jobevent (job_id, kind, from_state, to_state, reason, occurred_at, data)
    SELECT moved.id, 'reservation', 'queued', 'queued', 'head of its priority level', %s, moved.data
    FROM moved JOIN waiting ON waiting.id = moved.id
"""


def _apply_reservations(result: CycleResult, now: datetime) -> int:
    """Record a reservation event when a job's reservation is new or moved, not every cycle: one
    statement for all of them (it was three per reservation). Like an admission, conditional on the
    job still waiting: the row lock waits for a cancel committing meanwhile, so no "queued" note
    lands after the job left the queue."""
    if not result.reservations:
        return 0
    ids, data = [], []
    for r in result.reservations:
        ids.append(int(r.job_id))
        data.append(json.dumps({
            "flavor": r.flavor,
            "nodes": [int(n[1:]) for n in r.nodes],
            "earliest_start": r.earliest_start.isoformat(),
        }))
    with connection.cursor() as cursor:
        cursor.execute(_RESERVE_SQL, [ids, data, now])
        return cursor.rowcount


def _apply_on_loan(result: CycleResult, now: datetime) -> None:
    """Rule 1 is recomputed every cycle: store the split where it changed, with an "on_loan"
    event per flipped job (metering bills in-quota and on-loan time apart from these)."""
    ids = [int(j) for j in result.on_loan]
    flags = [result.on_loan[j] for j in result.on_loan]
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH flipped AS (
                UPDATE jobs_job j SET on_loan = v.on_loan
                FROM unnest(%s::bigint[], %s::bool[]) AS v(id, on_loan)
                WHERE j.id = v.id AND j.on_loan IS DISTINCT FROM v.on_loan AND j.state = ANY(%s)
                RETURNING j.id, j.state, v.on_loan
            )
            INSERT INTO jobs_jobevent (job_id, kind, from_state, to_state, reason, occurred_at, data)
            SELECT id, 'on_loan', state, state, 'in-quota / on-loan split recomputed', %s,
                   jsonb_build_object('on_loan', on_loan)
            FROM flipped
            """,
            [ids, flags, [s.value for s in HOLDING], now],
        )


# Figures of an explanation that count things rather than milli-units of a flavor.
# Counts and seconds: as they are (the other numbers are milli-units).
EXPLAIN_COUNTS = frozenset({"workers", "nodes_with_gpus", "nodes_below", "cap_jobs", "running_jobs",
                            "min_runtime_s", "exempt_for_s", "racks_at_cap"})


def explain_to_dict(e: Explain, at: datetime) -> dict:
    return {
        "position": e.position,
        "reason": e.reason,
        "flavor": e.flavor,
        "blocking_node": e.node_id,
        # In the flavor's units (cards, slices; 0.5 of a shared card), counts as they are.
        "numbers": {k: v if k in EXPLAIN_COUNTS else v / 1000 for k, v in e.numbers},
        "message": e.message,
        "holders": [
            {"job": int(h.job_id), "project": int(h.project_id[1:]), "gpus": h.milli / 1000}
            for h in e.holders
        ],
        "reservation": None
        if e.reservation is None
        else {
            "job": int(e.reservation.job_id),
            "nodes": [int(n[1:]) for n in e.reservation.nodes],
            "earliest_start": e.reservation.earliest_start.isoformat(),
        },
        "computed_at": at.isoformat(),
        # A job with alternative flavors: why each one, in the job's order, is not used now.
        "alternatives": [explain_to_dict(x, at) for x in e.alternatives],
        # Queueing strategies (docs/scheduling.md): reason "fifo" names the job it waits behind
        # and why that one blocks ("strict_fifo" | "aging"); a job over its aging bound says
        # how long it has waited.
        "behind": int(e.behind) if e.behind is not None else None,
        "behind_why": e.behind_why or None,
        # Reasons "resources" and "invalid": the dimension its nodes lack (DESIGN §15).
        "resource": e.resource or None,
        "waited_seconds": e.waited_s,
        "aging_bound_seconds": e.aging_bound_s,
        # Reasons "maintenance" and "reserved" (DESIGN §17): the window's nodes and start; the
        # project it is reserved for is not named (it may be another tenant's).
        "window": None if e.window is None else {
            "nodes": [int(n[1:]) for n in e.window.nodes],
            "starts_at": e.window.start.isoformat(),
            "maintenance": e.window.project_id is None,
        },
    }


def _cache_explanations(result: CycleResult, now: datetime) -> int:
    """Cache the head of the queue's explanations and, in one key, the waiting jobs in the
    cycle's order; one key instead of one per job keeps this cheap with 50,000 jobs waiting.

    Every EXPLAIN_ALL_EVERY seconds the rest of the queue's explanations are cached too: the
    cycle has computed them anyway, and a status page of a job past the head otherwise runs a
    dry cycle of its own (≈ 1 s of CPU with 30,000 waiting, the costliest request of the load
    run). That write takes seconds at that size, so it runs after the commit, outside the
    cycle's lock."""
    explanations = result.explanations
    waiting = list(explanations)
    head = {
        EXPLAIN_KEY.format(jid): explain_to_dict(explanations[jid], now) for jid in waiting[:EXPLAIN_HEAD]
    }
    # The order as packed 64-bit ids: a 30,000-entry dict took ~5 ms to unpickle on every queue page.
    head[QUEUE_KEY] = {"at": now.isoformat(), "ranked": array("q", [int(j) for j in waiting]).tobytes()}
    # Held back before the engine (DESIGN §17): why, for the queue page, as the engine's answers are.
    head |= {EXPLAIN_KEY.format(jid): {**e, "computed_at": now.isoformat()}
             for jid, e in workflows.held_back_all().items()}
    cache.set_many(head, timeout=EXPLAIN_TTL)
    rest = waiting[EXPLAIN_HEAD:]
    if rest and cache.add(EXPLAIN_ALL_KEY, now.isoformat(), timeout=EXPLAIN_ALL_EVERY):
        transaction.on_commit(lambda: _cache_rest(explanations, rest, now), robust=True)
    return len(waiting)


def _cache_rest(explanations, job_ids: list[str], now: datetime) -> None:
    for i in range(0, len(job_ids), 5000):  # bounded pipelines
        chunk = job_ids[i : i + 5000]
        entries = {EXPLAIN_KEY.format(jid): explain_to_dict(explanations[jid], now) for jid in chunk}
        cache.set_many(entries, EXPLAIN_TTL)


def explain_job(job: Job) -> dict:
    """Why ``job`` waits: from the last cycle's cache, else from a dry cycle (no writes).

    A dry cycle explains every waiting job at once (≈ 1 s with 30,000 waiting), so its answers
    are cached for all of them, and one request at a time runs it: the others wait for its
    result rather than each repeating it (the load run: status pages of jobs past the cached
    head were the costliest requests)."""
    if job.state != JobState.QUEUED:
        moved = moved_for(job)
        if moved:  # placed by consolidation (issue 36): how many jobs were moved for it
            return {"position": None, "reason": "consolidated", "numbers": {"moved": moved},
                    "message": f"placed after moving {moved} jobs"}
        return {"position": None, "reason": job.state, "message": "the job is not waiting"}
    if job.kind == JobKind.EXTERNAL:
        return explain_external(job)
    if waiting_out_backoff(job, timezone.now()):
        return explain_backoff(job)
    held = workflows.held_back(job)  # never in the engine's queue: it says why itself
    if held is not None:
        return {**held, "computed_at": timezone.now().isoformat()}
    key = EXPLAIN_KEY.format(job.pk)
    cached = cache.get(key)
    if cached and cached.get("reason") not in HELD_REASONS:  # held no more: that answer is stale
        return cached
    if cache.add(DRY_LOCK_KEY, 1, timeout=DRY_TTL):
        try:
            return _dry_explanations(job)
        finally:
            cache.delete(DRY_LOCK_KEY)
    deadline = time.monotonic() + DRY_WAIT_SECONDS
    while time.monotonic() < deadline:  # another request's dry cycle is running
        time.sleep(0.05)
        cached = cache.get(key)
        if cached and cached.get("reason") not in HELD_REASONS:
            return cached
        if cache.get(DRY_LOCK_KEY) is None:
            break  # it finished without this job: admissible now, or it failed
    return _dry_explanations(job)


def moved_for(job: Job) -> int:
    """How many jobs were moved for consolidation to admit ``job`` (its last admission), while it
    holds GPUs; 0 otherwise."""
    if job.state not in HOLDING:
        return 0
    data = (JobEvent.objects.filter(job=job, kind="transition", to_state=JobState.ADMITTED)
            .order_by("-occurred_at", "-id").values_list("data", flat=True).first())
    return len((data or {}).get("moved") or ())


def explain_backoff(job: Job) -> dict:
    """A job requeued after a failed run or a start timeout waits out its backoff (DESIGN §17):
    not in the engine's queue before ``not_before``."""
    return explain_backoffs([job], timezone.now())[job.pk]


def explain_backoffs(jobs: list[Job], now: datetime) -> dict[int, dict]:
    """The answers of the jobs among ``jobs`` that wait out a backoff at ``now``, from one query
    (the queue page shows a page of them): ``retry`` of ``max_retries`` after a failure, or
    ``start_timeouts`` and the cluster's ``backend_reason`` when the last requeue was a start
    timeout (that count is not a retry)."""
    waiting = [j for j in jobs if j.state == JobState.QUEUED and waiting_out_backoff(j, now)]
    if not waiting:
        return {}
    requeues = JobEvent.objects.filter(
        job_id__in=[j.pk for j in waiting], kind="transition", to_state=JobState.QUEUED)
    last = dict(requeues.order_by("job_id", "-occurred_at", "-id").distinct("job_id")
                .values_list("job_id", "data"))
    return {job.pk: _backoff_answer(job, last.get(job.pk) or {}, now) for job in waiting}


def _backoff_answer(job: Job, requeue: dict, now: datetime) -> dict:
    answer = {
        "position": None,
        "reason": "backoff",
        "until": job.not_before.isoformat(),
        "message": f"waits out its backoff until {job.not_before.isoformat()}",
        "computed_at": now.isoformat(),
    }
    if "start_timeout" in requeue:
        answer.update(start_timeouts=job.start_timeouts, backend_reason=requeue.get("why", ""))
    else:
        answer.update(retry=job.retries, max_retries=job.max_retries)
    return answer


def explain_external(job: Job) -> dict:
    """An external job waits in its cluster's own queue, never the engine's (DESIGN §11): the
    reason is the one its backend gave (Slurm's ``Reason``, e.g. ``AssocGrpGRES``), kept in
    ``message`` by the import; ``reason`` is "external"."""
    return {
        "position": None,
        "reason": "external",
        "message": job.message,
        "computed_at": timezone.now().isoformat(),
    }


def _dry_explanations(job: Job) -> dict:
    now = timezone.now()
    explanations = _cold_cycle(now).explanations
    # A dry run goes stale quickly: DRY_TTL, not the cycle's EXPLAIN_TTL.
    cache.set_many(
        {EXPLAIN_KEY.format(jid): explain_to_dict(e, now) for jid, e in explanations.items()}, DRY_TTL
    )
    e = explanations.get(str(job.pk))
    if e is None:  # the next cycle admits it
        return {
            "position": 0,
            "reason": "admissible",
            "message": "admitted at the next cycle",
            "computed_at": now.isoformat(),
        }
    return explain_to_dict(e, now)
