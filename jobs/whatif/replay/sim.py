"""The dynamic replay (issue 7): a trace on a virtual clock through the production engine.

Pure: no Django. Every decision is :class:`jobs.scheduler.scheduler.Engine`'s — this module only moves
the clock and tells the engine what happened (``submit`` at a job's submit time, ``finish`` at
its end, victims ``finish`` + ``submit`` again when they have exited)::

    result = simulate(jobs, nodes, quotas=None, options=Options(policy="pooled"))

Events (submit, start, finish, victim exit) sit in a heap. All events within ``coalesce``
seconds of the earliest are applied together, then ONE cycle runs at the latest of their times
(so nothing starts before it was submitted). Decisions:

* **Preemption.** A victim keeps its GPUs for ``grace`` seconds, then exits and is queued again
  with its original submit time. Without checkpointing (the default: the traces carry none)
  its work restarts from zero; with ``checkpointing=True`` it resumes with what was left. A job
  admitted by preemption starts when its victims have exited (``grace`` later), and its
  queue delay runs until then.
* **The known limitation** of the pure engine (docs/scheduling.md, jobs/scheduling/warm.py): finishing a
  preemptor while its victims are still in their grace period under-counts the GPUs. Here it
  cannot happen: a preemptor starts only once its victims have exited, and in a batch victim
  exits are applied before finishes.
* ``static`` policy = ``borrowing=False`` (each tenant inside its quota); ``pooled`` = the
  engine's defaults (borrowing, lending, reclaim, backfill, fair share). ``backfill`` and
  ``fragmentation_aware`` are the engine's own flags.
* ``max_runtime_seconds`` of a job (what EASY backfill plans with) is its trace duration
  rounded up: an exact estimate; a job without duration never ends.
* **Flavors** (:func:`assign_flavors`): a job runs on one flavor. A job listing GPU models gets
  the listed model with the most capacity (among those with a node big enough for one worker);
  a job listing none is spread over the eligible flavors so the GPUs *requested* of each flavor
  stay proportional to its capacity (in trace order: the flavor whose requested milli-GPUs ÷
  capacity would be lowest; constrained jobs count in their flavor). Durations are deliberately
  not weighed: balancing GPU-seconds lets a few months-long pods "fill" a big flavor's share, so
  the short pods all land on the small flavors (openb: 625 pods on the 2-GPU A10, 317 on the
  4,392-GPU G2), which queue as soon as arrivals are compressed. Jobs no flavor can hold, and
  jobs asking 0 GPUs, are skipped and counted.
* **CPU and memory** (DESIGN §15; Alibaba 2023 has them: pods' and nodes' ``cpu_milli`` /
  ``memory_mib``): with ``Options.resources`` (the default) each engine node carries its CPU and
  memory and each job asks its own per worker (``QueuedJob.cpu_millicores`` / ``memory_mib``), so
  the engine places them as it places a portal job's request (its footprint, docs/resources.md);
  a flavor is assigned only where one worker's footprint fits a node. After every cycle the
  replay reads the engine's pools for the *stranded GPUs* — whole free GPUs that their node's free
  CPU or memory cannot feed at its share — and the result carries their time mean, maximum and
  GPU-hours (metrics.py). A trace without the columns places GPUs only, as before.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from jobs.scheduler.footprint import NodeSize, Request, footprint_units, share_of
from jobs.scheduler.scheduler import (
    Consolidation,
    Engine,
    Limits,
    Node,
    PriorityClass,
    QueuedJob,
    RunningJob,
    Snapshot,
    TreeNode,
)
from jobs.whatif.replay.fair import DecayedUsage
from jobs.whatif.replay.metrics import Recorder
from jobs.whatif.replay.spec import (
    Quotas,
    capacity,
    demand_milli,
    derive_quotas,
    engine_nodes,
    tenant_tree,
)
from jobs.whatif.replay.trace import TraceJob, TraceNode

EPOCH = 1_672_531_200.0  # 2023-01-01 UTC: trace time 0 on the engine's clock
EXIT, START, FINISH, SUBMIT, LIMITS, TICK = 0, 1, 2, 3, 4, 5  # order of events applied in one batch
TICK_ID = "~tick"  # never a job id token of a trace (ids are not empty and a tick is not a job)


@dataclass(frozen=True)
class Options:
    policy: str = "pooled"  # "pooled" | "static"
    borrowing: bool = True  # pooled only; static never borrows
    backfill: bool = True
    fragmentation_aware: bool = True
    coalesce: float = 1.0  # seconds
    grace: float = 0.0  # seconds a victim keeps its GPUs after the preemption signal
    checkpointing: bool = False
    progress_every: float = 0.0  # wall seconds between progress lines on stderr (0: none)
    detail: bool = False  # per-job queue delays, per (tenant, flavor) usage split in-quota / on loan
    quota_split: str = "demand"  # derived quotas: ∝ demand, or "equal" per tenant (spec.derive_quotas)
    # A job listing several GPU models (``A100-80G|Ascend-910B``) is queued with them as its
    # acceptable flavors, in the listed order: the engine takes the first it can place
    # (DESIGN §14). Off (the default, and for the Alibaba trace, whose ``gpu_spec`` lists models
    # in no order of preference): it is pinned to the listed model with the most capacity.
    alternatives: bool = False
    # A job's max_runtime_seconds (what EASY backfill and start estimates plan with) is its trace
    # duration × this, rounded up: 1 = users who know exactly how long their jobs run.
    limit_factor: float = 1.0
    # Queueing strategy of every project (jobs/scheduler/engine/fifo.py), the SPEC's exceptions per
    # tenant (``"queueing"``), the centre's aging bound in seconds (None: none) and the bound
    # the ``waited_over_bound`` figures count against (metrics.py).
    queueing: str = "best_effort"
    queueing_by_tenant: Mapping[str, str] = field(default_factory=dict)
    aging_bound_s: float | None = None
    wait_bound_s: float = 3600.0
    # Seconds between periodic cycles while jobs wait (the service's beat cycle,
    # SCHEDULE_INTERVAL_SECONDS); 0 (the default): cycles only on events. Some decisions depend on
    # the clock (EASY backfill, preemption timing), so a history is reproduced more closely when the
    # replay also cycles between events, as the service did (docs/replay.md, "History as a trace").
    period: float = 0.0
    # Seconds from admission until the backend starts a job (its GPUs are held meanwhile, and its
    # queue delay runs until the start, as the portal records it); 0: it starts when admitted.
    start_latency: float = 0.0
    # Nodes' CPU / memory and jobs' requests from the trace (when it has them) go to the engine;
    # False: GPUs only (what the figures were before issue 33, to compare).
    resources: bool = True
    # Fair share (DESIGN §16): on when the World carries shares (``World.fair_shares``, from the
    # SPEC's ``shares``; an input without them replays without fair share, as before). The
    # engine gets the replay's own decayed usage (jobs/whatif/replay/fair.py) before each cycle.
    fair_share: bool = True
    fair_half_life_s: float = 604800.0  # Slurm's PriorityDecayHalfLife default, 7 days
    fair_entry_s: float = 3600.0  # what an admission charges at once (Snapshot.fair_entry_s)
    # Without shares in the input: each node's quota in cards, summed over flavors (the portal's
    # default shares) — for benches and studies on traces whose SPEC has none (bench/replay.py).
    fair_shares_from_quotas: bool = False
    # False: the half-life and entry charge above win over a history export's own (the replay
    # command's --half-life / --fair-entry).
    fair_from_spec: bool = True
    # Department tree id → a factor on its shares (the policy's ``fair_share_factors``, the
    # advisor's per-department weight); absent: 1.
    fair_share_factors: Mapping[str, float] = field(default_factory=dict)
    # Consolidation (issue 36, jobs/scheduler/engine/consolidate.py): the centre's hourly budget of
    # moves (0: off), the smallest gang it serves and the largest job it moves. Only
    # checkpointing jobs move (``checkpointing``). A moved job's GPUs from its signal to its exit
    # (``grace``: writing its checkpoint) are the work it loses: it resumes from that checkpoint.
    consolidation_moves_per_hour: int = 0
    consolidation_min_gang_gpus: int = 16
    consolidation_max_job_gpus: int = 8
    # Every priority class's minimum runtime (PriorityClass.min_runtime_seconds): never a victim
    # (nor moved) before it has run this long.
    min_runtime_s: float = 0.0


@dataclass(frozen=True)
class World:
    """A configured pool instead of SPEC quotas (the what-if page, billing/whatif.py): the
    engine's own tree node ids and limits (borrow and lend limits included), optionally the
    engine nodes with their real topology, and limit changes over the virtual clock:
    ``changes`` = ((t, limits from t on), ...) — quota windows opening and closing, loans.

    Tenants of the jobs are the tree's project ids. At a change the engine is rebuilt from a
    snapshot of the running, terminating and queued jobs with the new limits — exactly what the
    service's warm engine does when the configuration changes (jobs/scheduling/warm.py) — so no rule is
    re-implemented here."""

    tree: tuple[TreeNode, ...]
    limits: Mapping[tuple[str, str], Limits]
    nodes: tuple[Node, ...] = ()  # () = built from the TraceNodes (engine_nodes)
    changes: tuple[tuple[float, Mapping[tuple[str, str], Limits]], ...] = field(default=())
    # Project quotas (milli-GPUs per flavor) that idle-quota reuse is also judged against — today's,
    # when a what-if changed them (the advisor's overcommit ratio; metrics.Recorder); None: these.
    reference_quotas: Mapping[str, Mapping[str, int]] | None = None
    # Fair-share shares per tree node (the SPEC's ``shares``); empty: no fair share.
    fair_shares: Mapping[str, float] = field(default_factory=dict)
    # The SPEC's ``fair_share`` (a history export's, docs/replay.md): the service's half-life and
    # entry charge (None: the Options'), each flavor's normalised card per unit (relative
    # throughput × card fraction; absent: 1) and each project's decayed usage at the start.
    fair_half_life_s: float | None = None
    fair_entry_s: float | None = None
    fair_norms: Mapping[str, float] = field(default_factory=dict)
    fair_usage_at_start: Mapping[str, float] = field(default_factory=dict)


def project_quotas(tree: Sequence[TreeNode], limits: Mapping[tuple[str, str], Limits]
                   ) -> dict[str, dict[str, int]]:
    """The projects' quotas of ``limits``, milli-GPUs per flavor (what the Recorder measures)."""
    kinds = {n.id: n.kind for n in tree}
    out: dict[str, dict[str, int]] = {}
    for (node, flavor), lim in limits.items():
        if kinds.get(node) == "project":
            out.setdefault(node, {})[flavor] = lim.quota
    return out


def repeat_jobs(jobs: Sequence[TraceJob], repeat: int = 1, scale: float = 1.0) -> list[TraceJob]:
    """The trace ``repeat`` times back to back (copy k shifted by k × span, ids ``<id>#k``),
    arrivals compressed by ``scale`` (submit times ÷ scale: ``scale`` 2 = twice the load)."""
    if not jobs:
        return []
    start = min(j.submit_time for j in jobs)
    span = max(j.submit_time for j in jobs) - start + 1.0
    out = []
    for k in range(repeat):
        for j in jobs:
            t = (j.submit_time + k * span) / scale
            out.append(replace(j, job_id=j.job_id if k == 0 else f"{j.job_id}#{k}", submit_time=t))
    return out


def start_at(jobs: Sequence[TraceJob], t0: float) -> list[TraceJob]:
    """A warm start at trace time ``t0``: jobs that ended before ``t0`` are dropped, jobs running
    at ``t0`` are submitted at ``t0`` with what is left of their duration, later ones unchanged."""
    out = []
    for j in jobs:
        if j.submit_time >= t0:
            out.append(j)
        elif j.duration is None or j.submit_time + j.duration > t0:
            left = None if j.duration is None else j.submit_time + j.duration - t0
            out.append(replace(j, submit_time=t0, duration=left))
    return out


def overlay_jobs(jobs: Sequence[TraceJob], copies: int = 1) -> list[TraceJob]:
    """``copies`` copies of the trace over the SAME window (arrival rate × ``copies``, window and
    durations unchanged): copy k's submit times are rotated by k/copies of the span
    (``first + (t − first + k·span/copies) mod span``), ids ``<id>#o<k>``."""
    if not jobs or copies <= 1:
        return list(jobs)
    first = min(j.submit_time for j in jobs)
    span = max(j.submit_time for j in jobs) - first + 1.0
    out = list(jobs)
    for k in range(1, copies):
        for j in jobs:
            t = first + (j.submit_time - first + k * span / copies) % span
            out.append(replace(j, job_id=f"{j.job_id}#o{k}", submit_time=t))
    out.sort(key=lambda j: j.submit_time)
    return out


def prepare(jobs: Sequence[TraceJob], *, tenants: str = "trace", start: float | None = None,
            overlay: int = 1, repeat: int = 1, scale: float = 1.0) -> list[TraceJob]:
    """The load options of ``replay`` / bench/replay.py, in this order: tenant split
    (:func:`jobs.whatif.replay.spec.split_tenants`), warm start at ``start``, ``overlay`` copies over the
    window, then ``repeat`` back to back and arrivals ÷ ``scale``."""
    from jobs.whatif.replay.spec import split_tenants

    out = split_tenants(jobs, tenants)
    if start is not None:
        out = start_at(out, start)
    return repeat_jobs(overlay_jobs(out, overlay), repeat, scale)


def _holds(nodes: Sequence[TraceNode]) -> Callable[[TraceJob, str], bool]:
    """``holds(job, flavor)``: one worker of the job fits some node of the flavor — its GPUs, and
    with CPU / memory its footprint at the flavor's share (a whole-GPU worker, as the engine's
    ``Pool.demand`` counts it) or its request on one node (a shared worker)."""
    biggest: dict[str, int] = defaultdict(int)
    by_flavor: dict[str, list[TraceNode]] = defaultdict(list)
    for n in nodes:
        biggest[n.model] = max(biggest[n.model], n.gpus)
        by_flavor[n.model].append(n)
    shares = {f: share_of(NodeSize(n.gpus, n.cpu_milli, n.memory_mib) for n in ns)
              for f, ns in by_flavor.items()}
    known: dict[tuple, bool] = {}  # a trace has few shapes: each (shape, flavor) is judged once

    def holds(j: TraceJob, f: str) -> bool:
        if biggest[f] < j.num_gpus:
            return False
        if not j.cpu_milli and not j.memory_mib:
            return True
        shared = j.num_gpus == 1 and j.gpu_milli < 1000
        key = (j.num_gpus, shared, j.cpu_milli, j.memory_mib, f)
        hit = known.get(key)
        if hit is None:
            if shared:
                hit = any((not j.cpu_milli or n.cpu_milli is None or n.cpu_milli >= j.cpu_milli)
                          and (not j.memory_mib or n.memory_mib is None or n.memory_mib >= j.memory_mib)
                          for n in by_flavor[f])
            else:
                hit = footprint_units(j.num_gpus, Request(j.cpu_milli, j.memory_mib), shares[f]) <= biggest[f]
            known[key] = hit
        return hit

    return holds


def without_resources(jobs: Sequence[TraceJob], nodes: Sequence[TraceNode]
                      ) -> tuple[list[TraceJob], list[TraceNode]]:
    """The trace with its CPU and memory dropped: GPUs only (``Options.resources`` False)."""
    def bare(x):
        return replace(x, cpu_milli=None, memory_mib=None) if x.cpu_milli or x.memory_mib else x

    return [bare(j) for j in jobs], [bare(n) for n in nodes]


def assign_flavors(jobs: Iterable[TraceJob], nodes: Sequence[TraceNode]) -> dict[str, str]:
    cap = capacity(nodes)
    holds = _holds(nodes)
    # requested milli-GPUs per flavor so far (NOT GPU-seconds: see the module docstring)
    assigned: dict[str, int] = defaultdict(int)
    out = {}
    for j in jobs:
        if j.num_gpus <= 0:
            continue
        ok = [f for f in sorted(cap) if cap[f] > 0 and holds(j, f)]
        d = demand_milli(j)
        if j.gpu_types:
            allowed = [f for f in ok if f in j.gpu_types]
            if allowed:
                f = max(allowed, key=lambda f: (cap[f], f))
                assigned[f] += d
                out[j.job_id] = f
            continue
        if ok:
            f = min(ok, key=lambda f: ((assigned[f] + d) / cap[f], f))
            assigned[f] += d
            out[j.job_id] = f
    return out


def alternatives(jobs: Iterable[TraceJob], nodes: Sequence[TraceNode]) -> dict[str, tuple[str, ...]]:
    """Jobs listing two or more models that can hold one of their workers: those models, in
    the trace's order (the job's preference)."""
    cap = capacity(nodes)
    holds = _holds(nodes)
    out = {}
    for j in jobs:
        ok = tuple(f for f in dict.fromkeys(j.gpu_types) if cap.get(f, 0) > 0 and holds(j, f))
        if len(ok) > 1 and j.num_gpus > 0:
            out[j.job_id] = ok
    return out


class Observer:
    """Looks at a replay without changing it (bench/estimates.py): ``sample(t, snapshot,
    requeue)`` every ``every`` virtual seconds (after the cycle at ``t``, the snapshot a cycle at
    ``t`` would be fed, and each GPU-holding job as the replay would queue it again if it were
    preempted now), ``started(job_id, t)`` when a job gets its GPUs, ``released(job_id, t,
    finished)`` when it gives them back (``finished`` False: a preemption victim that exited and
    waits again) — bench/fairness.py's per-job start and end times."""

    every: float = 0.0

    def sample(self, t: float, snapshot: Snapshot, requeue: dict[str, QueuedJob]) -> None:
        pass

    def started(self, job_id: str, t: float) -> None:
        pass

    def released(self, job_id: str, t: float, finished: bool) -> None:
        pass


def _consolidation(options: Options) -> Consolidation | None:
    if options.consolidation_moves_per_hour <= 0:
        return None
    return Consolidation(options.consolidation_moves_per_hour, options.consolidation_min_gang_gpus,
                         options.consolidation_max_job_gpus)


def simulate(jobs: Sequence[TraceJob], nodes: Sequence[TraceNode], quotas: Quotas | None = None,
             options: Options = Options(), engine_factory: Callable[..., Engine] = Engine,
             world: World | None = None, observer: Observer | None = None) -> dict:
    wall0 = time.perf_counter()
    if options.policy not in ("pooled", "static"):
        raise ValueError(f"unknown policy {options.policy!r}")
    if not options.resources:
        jobs, nodes = without_resources(jobs, nodes)
    flavors = assign_flavors(jobs, nodes)
    choices = alternatives(jobs, nodes) if options.alternatives else {}
    flavors.update((jid, fs[0]) for jid, fs in choices.items())
    cap = capacity(nodes)
    cpu_only = sum(1 for j in jobs if j.num_gpus <= 0)
    runnable = [j for j in jobs if j.job_id in flavors]
    horizon = max((j.submit_time + (j.duration or 0.0) for j in runnable), default=0.0)
    if world is not None:
        tree, limits = world.tree, world.limits
        quotas = project_quotas(tree, limits)
    elif quotas is None:
        quotas = derive_quotas(runnable, flavors, cap, horizon, options.quota_split)
    if world is None:
        tree, limits = tenant_tree({j.tenant for j in runnable}, quotas)
    by_id = {j.job_id: j for j in runnable}
    priorities = sorted({j.priority for j in runnable})
    t_first = min((j.submit_time for j in runnable), default=0.0)
    enodes = world.nodes if world is not None and world.nodes else engine_nodes(nodes)
    if not options.resources:
        enodes = tuple(replace(n, cpu_millicores=None, memory_mib=None, local_disk_gib=None) for n in enodes)
    classes = tuple(PriorityClass(str(p), p, True, math.ceil(options.grace), math.ceil(options.min_runtime_s))
                    for p in priorities)
    policy = _consolidation(options)
    strategies = _queueing(tree, options)
    shares = dict(world.fair_shares) if world is not None and options.fair_share else {}
    if options.fair_share and not shares and options.fair_shares_from_quotas:
        shares = quota_shares(limits)
    if shares and options.fair_share_factors:
        shares = weighted_shares(shares, options.fair_share_factors, tree)
    half_life, entry, norms = _fair_settings(world, options)
    meter = DecayedUsage(half_life, t_first) if shares else None
    if meter is not None:
        strategies = {**strategies, "fair_shares": shares, "fair_entry_s": entry}
        for project, value in (world.fair_usage_at_start if world is not None else {}).items():
            meter.seed(project, value, t_first)
    snap = Snapshot(_dt(t_first), enodes, tree, limits, priority_classes=classes, consolidation=policy,
                    **strategies)
    borrowing = options.policy == "pooled" and options.borrowing
    flags = {"fragmentation_aware": options.fragmentation_aware, "backfill": options.backfill,
             "borrowing": borrowing}
    engine = engine_factory(snap, **flags)
    reference = world.reference_quotas if world is not None else None
    rec = Recorder(quotas, cap, wait_bound=options.wait_bound_s, reference=reference)
    resourced = any(n.cpu_millicores is not None or n.memory_mib is not None for n in enodes)

    heap: list[tuple[float, int, int, str, int]] = []
    seq = 0
    for j in runnable:
        heap.append((j.submit_time, SUBMIT, seq, j.job_id, 0))
        seq += 1
    job_events = len(heap)  # submits, starts, finishes and exits in the heap (stale ones too)
    for k, (t, _) in enumerate(world.changes if world is not None else ()):
        heap.append((t, LIMITS, seq, str(k), 0))  # str(k): never a job id token
        seq += 1
    heapq.heapify(heap)
    track = world is not None or observer is not None  # keep what a snapshot would list
    next_sample = t_first
    remaining = {j.job_id: j.duration for j in runnable}
    token: dict[str, int] = defaultdict(int)  # invalidates the start/finish events of a victim
    started: dict[str, float] = {}  # running jobs (GPUs held) -> start time
    admitted_at: dict[str, float] = {}  # admitted jobs (incl. waiting for victims) -> cycle time
    ends: dict[str, float] = {}
    cycles = submitted = 0
    total = len(runnable)
    last_print = time.perf_counter()
    t_end = t_first
    last_submit = max((j.submit_time for j in runnable), default=0.0)
    # For a rebuild (world.changes): what the engine was told, as a snapshot would list it.
    waiting: dict[str, QueuedJob] = {}  # queued, not admitted
    # admitted -> (job, admitted at, slots, per worker (node, cpu, memory, disk) when it asks any)
    holding: dict[str, tuple[QueuedJob, float, tuple, tuple]] = {}
    signalled: dict[str, float] = {}  # preemption victims not yet exited -> signal time
    moving: set[str] = set()  # of them, the ones moved for consolidation
    move_times: list[float] = []  # when each move was signalled (the engine's hourly budget)
    loan_flag: dict[str, bool] = {}
    ran_on: dict[str, str] = {}  # admitted job -> the flavor the engine chose for it

    def push(t: float, kind: int, jid: str) -> None:
        nonlocal seq, job_events
        seq += 1
        job_events += kind != TICK
        heapq.heappush(heap, (t, kind, seq, jid, token[jid]))

    ticking = False  # a periodic cycle is in the heap

    def queued(jid: str) -> QueuedJob:
        j = by_id[jid]
        rem = remaining[jid]
        shared = j.num_gpus == 1 and j.gpu_milli < 1000
        return QueuedJob(jid, j.tenant, flavors[jid], _dt(j.submit_time), j.workers, None,
                         j.num_gpus, j.gpu_milli if shared else None, j.priority, True,
                         None if rem is None else max(1, math.ceil(rem * options.limit_factor)), False,
                         choices.get(jid, ()), cpu_millicores=j.cpu_milli, memory_mib=j.memory_mib,
                         checkpointing=options.checkpointing)

    def world_snapshot(t: float) -> Snapshot:
        running = tuple(
            RunningJob(jid, q.project_id, q.flavor, q.priority, q.preemptible, _dt(at),
                       q.max_runtime_seconds, slots, terminating=jid in signalled,
                       terminating_since=_dt(signalled[jid]) if jid in signalled else None,
                       submitted_at=q.submitted_at, requests=reqs)
            for jid, (q, at, slots, reqs) in holding.items())
        usage = {"fair_usage": meter.at(t)} if meter is not None else {}
        recent = tuple(_dt(m) for m in move_times if m > t - 3600.0)
        return Snapshot(_dt(t), enodes, tree, limits, running, tuple(waiting.values()),
                        priority_classes=classes, consolidation=policy, recent_moves=recent,
                        **strategies, **usage)

    def begin(jid: str, t: float) -> None:
        started[jid] = t
        if observer is not None:
            observer.started(jid, t)
        rec.started(jid, ran_on.get(jid, flavors[jid]), demand_milli(by_id[jid]), t)
        if loan_flag.get(jid):
            rec.tier(jid, True, t)
        if remaining[jid] is not None:
            ends[jid] = t + remaining[jid]
            push(ends[jid], FINISH, jid)

    while heap:
        if rec.window is None and heap[0][0] > last_submit:
            rec.mark_window(last_submit)
        limit = heap[0][0] + options.coalesce
        batch_t = heap[0][0]
        finished, fresh, changed, new_limits = [], [], False, None
        clock_only = True  # only limit changes / periodic cycles in this batch
        while heap and heap[0][0] <= limit:
            t, kind, _, jid, tok = heapq.heappop(heap)
            job_events -= kind not in (TICK, LIMITS)
            if kind == TICK:
                ticking = False
            if kind in (TICK, LIMITS) and not job_events and not engine.state.pending:
                continue  # nothing left to happen: no cycle, and the makespan stays
            if tok != token[jid]:
                continue
            if kind == TICK and not job_events:
                continue  # only limit changes ahead: a cycle between them changes nothing
            clock_only = clock_only and kind in (TICK, LIMITS)
            batch_t = max(batch_t, t)
            if kind == TICK:
                pass  # a periodic cycle: only the clock moved
            elif kind == LIMITS:
                new_limits = world.changes[int(jid)][1]
            elif kind == SUBMIT:
                rec.submitted(jid, by_id[jid].tenant, t)
                fresh.append(queued(jid))
                submitted += 1
            elif kind == START:
                begin(jid, t)
                continue
            elif kind == FINISH:
                rec.released(jid, t, finished=True)
                if observer is not None:
                    observer.released(jid, t, True)
                if meter is not None:
                    meter.end(jid, t)
                del started[jid], admitted_at[jid], ends[jid]
                holding.pop(jid, None)
                finished.append(jid)
            else:  # EXIT of a victim: free its GPUs, queue it again
                if meter is not None:
                    meter.end(jid, t)
                if jid in started:
                    ran = t - started.pop(jid)
                    if jid in moving:  # from its signal on it wrote its checkpoint: no progress
                        saving = min(ran, t - signalled[jid])
                        rec.move_lost(jid, saving)
                        ran -= saving
                    rec.released(jid, t, finished=False, lost=not options.checkpointing)
                    if observer is not None:
                        observer.released(jid, t, False)
                    if options.checkpointing and remaining[jid] is not None:
                        remaining[jid] = max(0.0, remaining[jid] - ran)
                moving.discard(jid)
                ends.pop(jid, None)
                admitted_at.pop(jid, None)
                holding.pop(jid, None)
                signalled.pop(jid, None)
                finished.append(jid)
                fresh.append(queued(jid))
            changed = True
        if not clock_only:  # a limit change that starts nothing does not lengthen the run
            t_end = max(t_end, batch_t)
        if not changed:
            continue
        if track:
            waiting.update((q.id, q) for q in fresh)
        if new_limits is not None:
            limits = new_limits
            engine = engine_factory(world_snapshot(batch_t), **flags)
        else:
            engine.finish(finished)
            engine.submit(fresh)
        if meter is not None:
            engine.set_fair(meter.at(batch_t), shares)
        result = engine.cycle(_dt(batch_t))
        cycles += 1
        if resourced:
            rec.stranded(batch_t, stranded_gpus(engine))
        if clock_only and (result.admissions or result.preemptions):
            t_end = max(t_end, batch_t)
        for p in result.preemptions:
            if p.worker is not None:
                raise RuntimeError("replay jobs are not elastic; a grown worker was preempted")
            rec.preempted()
            v = p.victim_id
            if p.reason == "consolidate":
                rec.moved()
                move_times.append(batch_t)
            out = batch_t + options.grace
            if v in ends and ends[v] <= out:
                continue  # ends on its own within the grace period: a normal finish
            if p.reason == "consolidate":
                moving.add(v)
            token[v] += 1  # its pending start / finish no longer happens
            push(out, EXIT, v)
            signalled[v] = batch_t
        for a in result.admissions:
            admitted_at[a.job_id] = batch_t
            ran_on[a.job_id] = a.flavor
            if meter is not None:  # a job counts from admission (DESIGN §16)
                units = demand_milli(by_id[a.job_id]) / 1000 * norms.get(a.flavor, 1.0)
                meter.start(a.job_id, by_id[a.job_id].tenant, units, batch_t)
            if track:
                q = replace(waiting.pop(a.job_id), flavor=a.flavor, flavors=())  # runs on one flavor
                holding[a.job_id] = (q, batch_t, tuple(s for w in a.placement for s in w),
                                     _worker_requests(q, a.placement))
            delay = max(options.grace if a.preempts else 0.0, options.start_latency)
            if delay > 0:
                push(batch_t + delay, START, a.job_id)
            else:
                begin(a.job_id, batch_t)
        if observer is not None and observer.every and batch_t >= next_sample:
            observer.sample(batch_t, world_snapshot(batch_t), {jid: queued(jid) for jid in holding})
            next_sample = batch_t + observer.every
        if options.detail:
            for jid, flag in result.on_loan.items():
                loan_flag[jid] = flag
                if jid in started:
                    rec.tier(jid, flag, batch_t)
        # The next periodic cycle while jobs wait — only while something else can still happen
        # (a wait that nothing will end must not tick forever).
        if options.period > 0 and not ticking and engine.state.pending and heap:
            # on the grid of the period from trace time 0, as beat's schedule is
            push((math.floor(batch_t / options.period) + 1) * options.period, TICK, TICK_ID)
            ticking = True
        if options.progress_every and time.perf_counter() - last_print >= options.progress_every:
            last_print = time.perf_counter()
            print(f"replay: {100 * submitted / max(1, total):5.1f}% submitted, t={batch_t:,.0f}s, "
                  f"running {len(started)}, queued {len(engine.state.pending)}, cycles {cycles}, "
                  f"{last_print - wall0:.0f}s", file=sys.stderr, flush=True)

    if rec.window is None:
        rec.mark_window(max(last_submit, t_end))
    out = rec.summary(t_end, detail=options.detail)
    out.update({
        "policy": options.policy,
        "borrowing": borrowing,
        "backfill": options.backfill,
        "fragmentation_aware": options.fragmentation_aware,
        "coalesce_s": options.coalesce,
        "grace_s": options.grace,
        "checkpointing": options.checkpointing,
        "queueing": options.queueing,
        "queueing_by_tenant": dict(sorted(options.queueing_by_tenant.items())),
        "aging_bound_s": options.aging_bound_s,
        "fair_share": meter is not None,
        "fair_half_life_s": half_life if meter is not None else None,
        "resources": resourced,
        "skipped_cpu_only": cpu_only,
        "skipped_no_flavor": len(jobs) - cpu_only - len(runnable),
        "nodes": len(nodes),
        "gpus": sum(cap.values()) / 1000,
        "cycles": cycles,
        "wall_seconds": round(time.perf_counter() - wall0, 3),
    })
    return out


def _fair_settings(world: World | None, options: Options) -> tuple[float, float, Mapping[str, float]]:
    """(half-life, entry charge, normalisation per flavor) of the replay's fair share: a history
    export's own (the service's settings when it was made), else the Options'."""
    if world is None:
        return options.fair_half_life_s, options.fair_entry_s, {}
    if not options.fair_from_spec:
        return options.fair_half_life_s, options.fair_entry_s, world.fair_norms
    half_life = world.fair_half_life_s if world.fair_half_life_s is not None else options.fair_half_life_s
    entry = world.fair_entry_s if world.fair_entry_s is not None else options.fair_entry_s
    return half_life, entry, world.fair_norms


def weighted_shares(shares: Mapping[str, float], factors: Mapping[str, float],
                    tree: Sequence[TreeNode]) -> dict[str, float]:
    """``shares`` with each named department's multiplied by its factor (a factor naming anything
    but a department of ``tree`` is an error, not ignored)."""
    departments = {n.id for n in tree if n.kind == "department"}
    unknown = sorted(set(factors) - departments)
    if unknown:
        raise ValueError(f"policy.fair_share_factors: not a department of the replay: {', '.join(unknown)}")
    return {node: value * factors.get(node, 1.0) for node, value in shares.items()}


def quota_shares(limits: Mapping[tuple[str, str], Limits]) -> dict[str, float]:
    """Default fair-share shares: each tree node's quota in cards, summed over flavors."""
    out: dict[str, float] = defaultdict(float)
    for (node, _), lim in limits.items():
        out[node] += lim.quota / 1000
    return dict(out)


def _worker_requests(q: QueuedJob, placement) -> tuple[tuple[str, int, int, int], ...]:
    """``RunningJob.requests`` of an admitted job (a rebuilt engine gives its nodes' CPU and memory
    to it again, as jobs/scheduling/snapshot.py does for a portal job); () when it asks nothing."""
    if q.cpu_millicores is None and q.memory_mib is None and q.local_disk_gib is None:
        return ()
    return tuple((w[0][0], q.cpu_millicores or 0, q.memory_mib or 0, q.local_disk_gib or 0)
                 for w in placement if w)


def stranded_gpus(engine: Engine) -> int:
    """Whole free GPUs the engine's pools cannot use now because their node's free CPU, memory or
    disk cannot feed them at its share (``Pool.whole`` − ``Pool.free``, docs/resources.md)."""
    return sum(sum(p.whole) - sum(p.free) for p in engine.state.pools.values() if p.whole is not None)


def _queueing(tree: Sequence[TreeNode], options: Options) -> dict:
    """The Snapshot's queueing fields: projects under strict FIFO, the centre's aging bound."""
    from jobs.whatif.replay.spec import check_aging_bound, check_queueing

    check_queueing(options.queueing, "--queueing")
    for tenant, strategy in options.queueing_by_tenant.items():
        check_queueing(strategy, f"queueing of {tenant!r}")
    bound = check_aging_bound(options.aging_bound_s, "--aging-bound")
    strict = frozenset(n.id for n in tree if n.kind == "project"
                       and options.queueing_by_tenant.get(n.id, options.queueing) == "strict_fifo")
    return {"strict_fifo": strict, "default_aging_bound_s": None if bound is None else math.ceil(bound)}


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(EPOCH + t, UTC)


# -- loading (shared by the ``replay`` command and bench/replay.py) -----------------------
ALIBABA_NODES = "openb_node_list_gpu_node.csv"
ALIBABA_PODS = "openb_pod_list_default.csv"
QOS_TENANT = {"LS": "LS", "Guaranteed": "LS", "BE": "BE", "Burstable": "BE"}


def alibaba_paths(trace: str | None, alibaba_dir: str | None) -> tuple[str, str] | None:
    """(pods csv, nodes csv) when the input is the Alibaba trace: ``--alibaba DIR`` (default
    pod list there unless TRACE names one) or a TRACE named ``openb_pod_list_*.csv`` (nodes from
    its folder)."""
    from pathlib import Path

    if trace and Path(trace).name.startswith("openb_pod_list_"):
        base = Path(alibaba_dir) if alibaba_dir else Path(trace).parent
        return str(trace), str(base / ALIBABA_NODES)
    if alibaba_dir:
        base = Path(alibaba_dir)
        if not (base / ALIBABA_NODES).exists() and (base / "csv" / ALIBABA_NODES).exists():
            base = base / "csv"
        return str(trace or base / ALIBABA_PODS), str(base / ALIBABA_NODES)
    return None


def alibaba_jobs(pods_csv: str) -> list[TraceJob]:
    """The GPU pods, the QoS class as the tenant: LS and Guaranteed → ``LS/default`` (online,
    reserved), BE and Burstable → ``BE/default`` (batch, opportunistic)."""
    from jobs.whatif.replay.alibaba import read_pods

    out = []
    for j in read_pods(pods_csv):
        qos = j.tenant.split("/")[0]
        out.append(replace(j, tenant=f"{QOS_TENANT.get(qos, qos)}/default"))
    return out


def load(trace: str | None = None, *, alibaba_dir: str | None = None, cluster: str | None = None
         ) -> tuple[list[TraceJob], list[TraceNode], Quotas | None]:
    from jobs.whatif.replay.csvtrace import read_trace
    from jobs.whatif.replay.spec import load_spec

    quotas = None
    nodes: list[TraceNode] = []
    ali = alibaba_paths(trace, alibaba_dir)
    if ali:
        from jobs.whatif.replay.alibaba import read_nodes

        jobs = alibaba_jobs(ali[0])
        nodes = read_nodes(ali[1])
    elif trace:
        jobs = read_trace(trace)
    else:
        raise ValueError("a trace CSV or --alibaba DIR is required")
    if cluster:
        nodes, quotas = load_spec(cluster)
    if not nodes:
        raise ValueError("no cluster: give --cluster SPEC.json (or use the Alibaba trace)")
    return jobs, nodes, quotas
