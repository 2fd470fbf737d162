"""Build the engine's frozen snapshot from the database (reads only).

Tree node ids are "d<id>" for departments and "p<id>" for projects; node ids "n<id>"; job ids
the decimal primary key. Quantities become integer milli-units (1000 = one device)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from jobs.scheduler.engine.model import Consolidation, QueuedJob, RunningJob, Snapshot
from jobs.scheduler.footprint import Request, filled, share_from
from jobs.scheduling.config import MILLI, Config, cuda_version, fair_usage, read_config
from jobs.states import HOLDING, TERMINAL, JobState

# A job's acceptable flavors in its order, the still-active ones (None: only its flavor).
_CHOICES_SQL = """
           CASE WHEN cardinality(j.flavor_choices) > 1 THEN ARRAY(
               SELECT fc.name FROM unnest(j.flavor_choices) WITH ORDINALITY AS u(fid, k)
               JOIN quotas_flavor fc ON fc.id = u.fid WHERE fc.active ORDER BY u.k
           ) END"""
# What each worker asks besides GPUs (DESIGN §15): its own figures and the share it was submitted
# with, for the ones it left empty (``_request``).
_REQUEST_SQL = "j.min_cuda_version, j.cpu_millicores, j.memory_mib, j.local_disk_gib, j.unit_share::text"
_REQUEST_COLUMNS = 4  # the last four; the CUDA version is the one before them, the submitter before it
_USER = -_REQUEST_COLUMNS - 2
# Whether it checkpoints (what a preemption costs it: the engine's victim order), before the submitter.
_CHECKPOINTING = _USER - 1
# Preemptible by its class, or made so by the idle policy (jobs.idle_service) whatever its class says.
_PREEMPTIBLE_SQL = "(pc.preemptible OR j.idle_preemptible_at IS NOT NULL)"
# DESIGN §17: the queued jobs held back from the engine — a dependency not met yet (after_ok: its job
# has not succeeded; after_not_ok: it has not ended otherwise; after_any: it has not ended), or a
# task of an array with a cap beyond the room the cap leaves: the room (cap − its tasks holding
# GPUs) goes to the lowest-indexed queued tasks. ``jobs.workflows.held_back`` says why. One
# uncorrelated query (a hashed NOT IN for the reads below): its cost follows the dependencies and
# capped tasks waiting, not the length of the queue — a per-row EXISTS tripled live_job_states at
# 30,000 queued jobs.
TERMINAL_SQL = "(" + ", ".join(f"'{s.value}'" for s in sorted(TERMINAL)) + ")"
HELD_SQL = f"""
    SELECT d.job_id FROM jobs_jobdependency d
    JOIN jobs_job w ON w.id = d.job_id AND w.state = 'queued'
    JOIN jobs_job p ON p.id = d.depends_on_id
    WHERE NOT CASE d.condition
        WHEN 'after_ok' THEN p.state = 'succeeded'
        WHEN 'after_not_ok' THEN p.state IN {TERMINAL_SQL} AND p.state <> 'succeeded'
        ELSE p.state IN {TERMINAL_SQL} END
    UNION ALL
    SELECT ranked.id FROM (
        SELECT t.id, a.max_running - COALESCE(h.holding, 0) AS room,
               row_number() OVER (PARTITION BY t.array_id ORDER BY t.array_index) AS rank
        FROM jobs_job t
        JOIN jobs_jobarray a ON a.id = t.array_id AND a.max_running IS NOT NULL
        LEFT JOIN (SELECT array_id, count(*) AS holding FROM jobs_job
                   WHERE array_id IS NOT NULL AND state IN ('admitted', 'running') GROUP BY array_id) h
            ON h.array_id = t.array_id
        WHERE t.state = 'queued'
    ) ranked WHERE ranked.rank > ranked.room
"""  # noqa: S608 - constants only
ELIGIBLE_SQL = f"j.id NOT IN ({HELD_SQL})"
# Raw SQL rather than the ORM: at 50,000 queued jobs the ORM's per-row converters cost ~1 s a cycle.
_JOBS_SQL = f"""
    SELECT j.id, j.project_id, f.name, pc.value, {_PREEMPTIBLE_SQL}, j.workers, j.min_workers,
           j.gpus_per_worker, j.gpu_milli, j.submitted_at, j.max_runtime_seconds, j.approved,
           j.admitted_at, j.started_at, j.placement, j.terminating_since, {_CHOICES_SQL}, j.checkpointing,
           j.submitted_by_id, {_REQUEST_SQL}
    FROM jobs_job j
    JOIN quotas_flavor f ON f.id = j.flavor_id
    JOIN jobs_priorityclass pc ON pc.id = j.priority_class_id
    WHERE j.state = ANY(%s) AND j.kind <> 'external' AND {ELIGIBLE_SQL}
"""  # noqa: S608 - constants only, no user input
# External jobs (DESIGN §11) wait in their backend's queue, not the portal's: never in the engine's
# queue. Running, they hold GPUs and count like any job, but are pinned (never a victim).


# What the grow pass may bring a GPU-holding job to (its target), 0 when it may not grow: elastic
# (min_workers < workers, whole GPUs), running on the cluster (dispatched), not being stopped, an
# inference service or a checkpointing training job (training restarts from its checkpoint when
# resized), on a cluster whose backend resizes jobs (Kubernetes, the simulator; never Slurm).
GROW_TO_SQL = """
    CASE WHEN j.state = 'running' AND j.dispatched_at IS NOT NULL AND j.terminating_since IS NULL
              AND j.cancel_requested_at IS NULL AND j.expire_requested_at IS NULL
              AND j.gpu_milli IS NULL AND j.min_workers < j.workers
              AND (j.kind = 'inference' OR (j.kind = 'training' AND j.checkpointing))
              AND c.kind IN ('kubernetes', 'simulator')
         THEN COALESCE(j.target_workers, j.workers) ELSE 0 END
"""
_HOLDING_SQL = f"""
    SELECT j.id, j.project_id, f.name, pc.value, {_PREEMPTIBLE_SQL}, j.workers, j.min_workers,
           j.gpus_per_worker, j.gpu_milli, j.submitted_at, j.max_runtime_seconds, j.approved,
           j.admitted_at, j.started_at, j.placement, j.terminating_since, j.grown_at, {GROW_TO_SQL},
           j.kind = 'external', {_CHOICES_SQL}, j.checkpointing, j.submitted_by_id, {_REQUEST_SQL}
    FROM jobs_job j
    JOIN quotas_flavor f ON f.id = j.flavor_id
    JOIN jobs_priorityclass pc ON pc.id = j.priority_class_id
    LEFT JOIN quotas_cluster c ON c.id = j.cluster_id
    WHERE j.state = ANY(%s)
"""  # noqa: S608 - a constant, no user input


def worker_milli(workers: int, min_workers: int | None, gpus: int, gpu_milli: int | None) -> int:
    """One worker's milli for an elastic whole-GPU job, else 0 (the engine never grows it)."""
    if gpu_milli is not None or min_workers is None or min_workers >= workers:
        return 0
    return gpus * MILLI


def _running(row: tuple) -> RunningJob:
    jid, project, flavor, priority, preemptible, workers, min_workers, gpus, gpu_milli = row[:9]
    submitted, max_runtime = row[9], row[10]
    admitted_at, started_at, placement, terminating_since, grown_at, grow_to, pinned = row[12:19]
    # Django's psycopg adapter hands jsonb over as text (JSONField parses it); so do we.
    slots = tuple((f"n{node}", gpu, m) for worker in json.loads(placement) for node, gpu, m in worker)
    wm = worker_milli(workers, min_workers, gpus, gpu_milli)
    grown = tuple(datetime.fromisoformat(at) for at in json.loads(grown_at)) if wm else ()
    req = _request(row[-_REQUEST_COLUMNS:], gpus, gpu_milli)
    requests = () if req is None else tuple(
        (f"n{worker[0][0]}", *req) for worker in json.loads(placement) if worker)
    return RunningJob(
        id=str(jid), project_id=f"p{project}", flavor=flavor, priority=priority, preemptible=preemptible,
        # The engine's start is when the GPUs were taken (its own admission): a warm engine knows
        # only that, and a cold one must order rule 1 and reclaim exactly as the warm one does.
        started_at=admitted_at or started_at, max_runtime_seconds=max_runtime, placement=slots,
        terminating=terminating_since is not None, terminating_since=terminating_since,
        worker_milli=wm, grow_to=grow_to, grown=grown, submitted_at=submitted, pinned=pinned,
        requests=requests, user=f"u{row[_USER]}", checkpointing=bool(row[_CHECKPOINTING]),
    )


def _request(columns: tuple, gpus: int, gpu_milli: int | None) -> tuple[int, int, int] | None:
    """One worker's (cpu, memory, disk) when the job asked any of them, the rest from its share
    at submission (``jobs.requests.effective_request`` without the read of today's share); None
    when it asked none — the engine then counts its GPUs' share of each node it runs on
    (docs/resources.md), which is at least the flavor's share it gets by default."""
    cpu, memory, disk, unit_share = columns
    if cpu is None and memory is None and disk is None:
        return None
    asked = filled(Request(cpu, memory, disk), share_from(json.loads(unit_share or "{}")),
                   units=gpus, milli=gpu_milli)
    return (asked.cpu_millicores or 0, asked.memory_mib or 0, asked.local_disk_gib or 0)


def _queued(row: tuple) -> QueuedJob:
    return _as_queued(row, row[16])


def _as_queued(row: tuple, choices) -> QueuedJob:
    """A job row (``_JOBS_SQL``, or ``_HOLDING_SQL``: the same first 12 columns) as queued."""
    jid, project, flavor, priority, preemptible, workers, min_workers, gpus, milli = row[:9]
    submitted, runtime, ok = row[9:12]
    # Alternatives (DESIGN §14): the job's order of its still-active flavors. A requeued job
    # starts again from its first choice, not from the flavor it last ran on (``Job.flavor``).
    choices = tuple(choices or ())
    if choices:
        flavor = choices[0]
    cpu, memory, disk = _request(row[-_REQUEST_COLUMNS:], gpus, milli) or (None, None, None)
    min_cuda = cuda_version(row[-_REQUEST_COLUMNS - 1])
    return QueuedJob(
        id=str(jid), project_id=f"p{project}", flavor=flavor, submitted_at=submitted, workers=workers,
        min_workers=min_workers, gpus_per_worker=gpus, gpu_milli=milli, priority=priority,
        preemptible=preemptible, max_runtime_seconds=runtime, approved=ok,
        flavors=choices if len(choices) > 1 else (),
        cpu_millicores=cpu, memory_mib=memory, local_disk_gib=disk, min_cuda=min_cuda,
        user=f"u{row[_USER]}", checkpointing=bool(row[_CHECKPOINTING]),
    )



# A job waiting out its retry backoff (DESIGN §17, jobs.retries) is not in the engine's queue
# before its instant: the warm engine asks again for it at every cycle until it is.
_READY_SQL = " AND (j.not_before IS NULL OR j.not_before <= %s)"


def queued_jobs(ids: Iterable[int] | None = None, now: datetime | None = None) -> tuple[QueuedJob, ...]:
    sql, params = _JOBS_SQL + _READY_SQL, [[JobState.QUEUED.value], now or timezone.now()]
    if ids is not None:
        sql += " AND j.id = ANY(%s)"
        params.append(list(ids))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return tuple(_queued(r) for r in cursor.fetchall())


def build_snapshot(now: datetime, config: Config | None = None) -> Snapshot:
    return _snapshot(now, config, _holding_rows())


def build_forecast_input(now: datetime) -> tuple[Snapshot, dict[str, QueuedJob]]:
    """The snapshot, and each GPU-holding portal job as the queue would list it again once
    preempted — the service requeues a victim with its submission time, shape, limit, approval
    and flavor choices unchanged (``dispatch._requeue``) — for ``jobs.scheduler.forecast`` (one read of
    the jobs)."""
    rows = _holding_rows()
    return _snapshot(now, None, rows), {str(r[0]): _requeued(r) for r in rows if not r[18]}


def _holding_rows() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(_HOLDING_SQL, [[s.value for s in HOLDING]])
        return cursor.fetchall()


def _snapshot(now: datetime, config: Config | None, holding: list[tuple]) -> Snapshot:
    config = config or read_config(now)
    return Snapshot(
        now=now, nodes=config.nodes, tree=config.tree, limits=config.limits,
        running=tuple(_running(r) for r in holding), queued=queued_jobs(now=now),
        over_budget_tenants=config.over_budget, budget_exempt=config.budget_exempt,
        priority_classes=config.classes, strict_fifo=config.strict_fifo,
        aging_bound_s=dict(config.aging_bounds), default_aging_bound_s=config.default_aging_bound,
        fair_usage=fair_usage(now, config.fair_half_life_s), fair_shares=dict(config.fair_shares),
        fair_entry_s=float(config.fair_entry_s),
        user_caps=dict(config.user_caps), windows=config.windows, queues_held=config.queues_held,
        consolidation=Consolidation(config.consolidation_moves_per_hour)
        if config.consolidation_moves_per_hour else None,
        recent_moves=recent_moves(now) if config.consolidation_moves_per_hour else (),
        rack_caps=config.rack_caps, node_power=config.node_power,
    )


def recent_moves(now: datetime) -> tuple[datetime, ...]:
    """When each job moved for consolidation in the hour before ``now`` was signalled (the
    engine's hourly budget counts them; their events carry ``data.consolidate``)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT occurred_at FROM jobs_jobevent WHERE kind = 'preemption_signal' AND occurred_at > %s "
            "AND (data->>'consolidate')::boolean ORDER BY occurred_at",
            [now - timedelta(hours=1)])
        return tuple(row[0] for row in cursor.fetchall())


def _requeued(row: tuple) -> QueuedJob:
    return _as_queued(row, row[19])


def elastic_job_states() -> list[tuple[int, int, int, int, int | None, datetime]]:
    """(id, workers held, grow_to, gpus_per_worker, gpu_milli, submitted_at) of the elastic jobs
    holding GPUs: the warm engine retargets them, or rebuilds when one shrank outside it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT j.id, jsonb_array_length(j.placement), {GROW_TO_SQL}, j.gpus_per_worker,
                   j.gpu_milli, j.submitted_at
            FROM jobs_job j LEFT JOIN quotas_cluster c ON c.id = j.cluster_id
            WHERE j.state = ANY(%s) AND j.min_workers < j.workers
            """,  # noqa: S608 - constants only
            [[s.value for s in HOLDING]],
        )
        return cursor.fetchall()


# A queued job the engine may not see (external, or held back: ELIGIBLE_SQL) is not live to it.
_LIVE_SQL = f"""
    SELECT j.id, j.state, j.terminating_since IS NOT NULL, j.admitted_at, j.approved,
           j.idle_preemptible_at IS NOT NULL
    FROM jobs_job j
    WHERE j.state = ANY(%s) AND NOT (j.state = 'queued' AND (j.kind = 'external' OR NOT ({ELIGIBLE_SQL})))
"""  # noqa: S608 - constants only


def live_job_states() -> list[tuple[int, str, bool, datetime | None, bool, bool]]:
    """(id, state, terminating, admitted_at, approved, made preemptible by the idle policy) of every
    queued or GPU-holding job: the cheap per-cycle read from which a warm engine derives what
    changed since its last cycle (the admission time tells one run of a job from the next;
    ``approved`` a queued job that went to approval and came back between two cycles)."""
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_SQL, [[JobState.QUEUED.value, *(s.value for s in HOLDING)]])
        return cursor.fetchall()
