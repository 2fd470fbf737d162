"""Snapshot (input) and CycleResult (output) of the pure scheduling core.

Everything is a frozen, slotted dataclass; amounts are integer milli-units (1000 = one device of
the flavor). Times are tz-aware datetimes; the core never reads the wall clock, only
``Snapshot.now``.

Conventions the caller (the Django service) must follow:

* ``Node.external_milli`` — per-GPU milli occupied by allocations NOT listed in
  ``Snapshot.running`` (e.g. pods the portal does not manage, a GPU fenced off as faulty = 1000).
  Usage of running jobs is derived from their placements; do not add it here as well.
* A job admitted by a previous cycle belongs in ``running`` with its placement and
  ``started_at`` = admission time (also once the backend has started it): its GPUs are taken
  from then, and rule 1 / reclaim order by it.
* A preemption victim in its grace period stays in ``running`` with ``terminating=True``. It no
  longer counts for any quota (its preemptor already does), its GPUs stay occupied except where
  the preemptor's placement overlaps them (per GPU the core counts
  ``min(1000, live + terminating)``) and it is never chosen as a victim again. Drop it once it
  has exited.
* A ``pinned`` running job (submitted to the backend directly, DESIGN §11) is never a victim:
  it counts in rule 1 like any job, but reclaim and rule 6 pass it by.
* Elastic growth (DESIGN §4, §5.4): a running job with ``worker_milli`` set may grow one worker
  at a time up to ``grow_to`` workers (see :mod:`jobs.scheduler.engine.grow`). Workers added by growth are
  listed, in order, at the END of ``placement`` with their grow times in ``grown``; inside the
  core each is a *unit* of its job, ``"<job id>/<k>"`` (``k`` = the worker's index in the
  job's placement), with its own rule-1 place (priority, grow time): an on-loan unit is
  reclaimed alone (the job shrinks by that worker, at once — see :class:`Preemption`), and a
  unit is on loan whenever its job's first workers are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from quotas.admission import Limits, TreeNode

__all__ = [
    "Admission", "Consolidation", "CycleResult", "Explain", "Growth", "Holder", "Limits", "Node",
    "NodePower", "Preemption",
    "PriorityClass", "QueuedJob", "Reservation", "RunningJob", "Snapshot", "TreeNode", "Window",
]

Slot = tuple[str, int, int]  # (node id, GPU index on the node, milli)


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU server. ``flavor`` is per node: MIG slice flavors exist only on nodes of that
    flavor, and ``gpus`` then counts slices. ``schedulable`` is False when cordoned or down."""

    id: str
    flavor: str
    gpus: int
    zone: str = ""
    spine: str = ""
    leaf: str = ""
    schedulable: bool = True
    external_milli: tuple[int, ...] = ()
    cluster: str = ""  # a job grows only onto nodes of the cluster it runs on
    # Allocatable CPU, memory and local disk (DESIGN §15); None: not reported (only GPUs count).
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None
    cuda: tuple[int, ...] = ()  # the node's CUDA version, (12, 4); (): not reported


@dataclass(frozen=True, slots=True)
class NodePower:
    """A node's power in its rack (DESIGN §18), watts: ``idle_w`` its draw besides its GPU
    boards, ``board_w`` what one busy unit of its flavor draws (a card's board power, a slice's
    share of it), ``measured_w`` the DCGM power of its GPUs now (None: not measured, then its
    draw is estimated from the units in use)."""

    rack: str
    idle_w: int = 0
    board_w: int = 0
    measured_w: int | None = None


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemptible: bool = True
    grace_seconds: int = 0
    # A job of the class is never a victim (rule 5, rule 6, borrowing within the cohort) until it
    # has run this long since ``started_at`` (Slurm ``PreemptExemptTime``; DESIGN §16).
    min_runtime_seconds: int = 0


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: str
    project_id: str
    flavor: str
    priority: int
    preemptible: bool
    started_at: datetime
    max_runtime_seconds: int | None
    placement: tuple[Slot, ...]
    terminating: bool = False
    terminating_since: datetime | None = None  # when the preemption was signalled
    worker_milli: int = 0  # the demand of one worker, a multiple of 1000 (0: never grows)
    grow_to: int = 0  # the grow pass may add workers up to this many (its target)
    grown: tuple[datetime, ...] = ()  # grow times of the last len(grown) workers of placement
    submitted_at: datetime | None = None  # the grow pass's queue order (None: started_at)
    # What each worker asks of its node besides its GPUs (DESIGN §15), in placement order:
    # ``(node id, cpu millicores, memory MiB, local disk GiB)`` per worker (0: nothing); empty:
    # nothing asked. A grown worker's entry follows the same order as its slots.
    requests: tuple[tuple[str, int, int, int], ...] = ()
    user: str = ""  # who submitted it (per-user caps, DESIGN §16); "": nobody's cap counts it
    # Not the portal's to stop: a job submitted to the backend directly (``sbatch``, ``kubectl``,
    # DESIGN §11). It counts for quotas and holds its GPUs like any job, but no cycle ever
    # chooses it as a victim (rule 5 or 6) — the portal did not start it and cannot requeue it.
    pinned: bool = False
    # What a preemption would cost it (the victim order, jobs/scheduler/engine/preempt.py):
    # a checkpointing job saves on the preemption signal (DESIGN §4) and loses nothing but its
    # restart; another loses its work since ``last_checkpoint_at`` (None: since it started).
    checkpointing: bool = False
    last_checkpoint_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A pending job. Demand per worker = ``gpus_per_worker`` × 1000, or ``gpu_milli`` (< 1000)
    of one shared GPU (then ``workers`` must be 1). Elastic when ``min_workers < workers``."""

    id: str
    project_id: str
    flavor: str
    submitted_at: datetime
    workers: int = 1
    min_workers: int | None = None  # None: same as workers (plain gang)
    gpus_per_worker: int = 1
    gpu_milli: int | None = None
    priority: int = 0
    preemptible: bool = True
    max_runtime_seconds: int | None = None
    approved: bool = False
    # Acceptable flavors in the owner's order of preference (DESIGN §14); ``flavor`` must be the
    # first. Empty (or one flavor): only ``flavor``. The cycle takes the first it can place.
    flavors: tuple[str, ...] = ()
    # What each worker asks of its node besides its GPUs (DESIGN §15); None: nothing.
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None
    min_cuda: tuple[int, ...] = ()  # nodes reporting a lower CUDA version are never chosen
    user: str = ""  # who submitted it (per-user caps, DESIGN §16); "": no cap applies
    checkpointing: bool = False  # once running, as RunningJob.checkpointing


@dataclass(frozen=True, slots=True)
class Window:
    """A reservation or a maintenance window over ``[start, end)`` (DESIGN §17).

    ``project_id`` None: maintenance (a reservation for nobody). It holds either named ``nodes``
    or ``gpus`` whole GPUs of ``flavor`` (any nodes). A job *meets* a window when its run, from
    now to now + its maximum runtime (no limit: forever), overlaps it; a job that meets a window
    of another project (or a maintenance) is never placed on its nodes, nor on the GPUs its
    count still holds (see :mod:`jobs.scheduler.engine.windows`)."""

    id: str
    start: datetime
    end: datetime
    project_id: str | None = None
    nodes: tuple[str, ...] = ()
    flavor: str = ""
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class Consolidation:
    """The centre's consolidation policy (jobs/scheduler/engine/consolidate.py): a queued job of at
    least ``min_gang_gpus`` GPUs that only fragmentation keeps out may have running
    checkpointing jobs of at most ``max_job_gpus`` GPUs moved out of its way, at most
    ``max_moves_per_hour`` moves in any hour (counted with ``Snapshot.recent_moves``)."""

    max_moves_per_hour: int
    min_gang_gpus: int = 16
    max_job_gpus: int = 8


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: datetime
    nodes: tuple[Node, ...]
    tree: tuple[TreeNode, ...]
    limits: Mapping[tuple[str, str], Limits]  # (tree node id, flavor) -> effective limits
    running: tuple[RunningJob, ...] = ()
    queued: tuple[QueuedJob, ...] = ()
    over_budget_tenants: frozenset[str] = frozenset()  # tree node ids (departments/projects)
    # Projects whose approval policy lets jobs through a spent budget (policy.over_budget off).
    budget_exempt: frozenset[str] = frozenset()
    # Per-user caps inside a project (DESIGN §16): project tree id -> (GPU milli, running jobs)
    # one user's running jobs of that project may hold at most (None: no cap of that kind).
    user_caps: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    priority_classes: tuple[PriorityClass, ...] = ()  # grace periods of terminating jobs
    # Queueing strategy per project (docs/scheduling.md, "Queueing strategies"). Under strict
    # FIFO a job that cannot be admitted blocks the later jobs of its project in its priority
    # level (on the flavors it could use); the others are best effort (later jobs that fit go
    # ahead). Under best effort a job waiting longer than its project's aging bound (seconds
    # since submission; the default when the project has none; None = never) blocks the same
    # way. Keys are tree ids of projects.
    strict_fifo: frozenset[str] = frozenset()
    aging_bound_s: Mapping[str, int] = field(default_factory=dict)
    default_aging_bound_s: int | None = None
    # Fair share (DESIGN §16): decayed normalised card-seconds per project and shares per tree
    # node. Empty: no fair share (today's order by dominant share alone).
    fair_usage: Mapping[str, float] = field(default_factory=dict)
    fair_shares: Mapping[str, float] = field(default_factory=dict)
    fair_entry_s: float = 3600.0
    # Reservations and maintenance windows (DESIGN §17) not yet over.
    windows: tuple[Window, ...] = ()
    # Tree ids (projects, departments) whose queue is on hold or draining (DESIGN §17): their
    # queued jobs are not admitted.
    queues_held: frozenset[str] = frozenset()
    # Consolidation (issue 36): None = off. ``recent_moves``: when each job moved for
    # consolidation in the last hour was signalled (the hourly budget counts them).
    consolidation: Consolidation | None = None
    recent_moves: tuple[datetime, ...] = ()
    # Rack power (DESIGN §18, jobs/scheduler/engine/power.py): rack id -> its power cap in watts
    # (capped racks only), and node id -> the power figures of each node in one of them.
    rack_caps: Mapping[str, int] = field(default_factory=dict)
    node_power: Mapping[str, NodePower] = field(default_factory=dict)


# -- results ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Admission:
    """``placement`` has one tuple of slots per granted worker. ``preempts`` lists the victims
    whose GPUs this job takes: start it only after they have exited (grace period)."""

    job_id: str
    workers: int
    placement: tuple[tuple[Slot, ...], ...]
    in_quota: bool
    preempts: tuple[str, ...] = ()
    flavor: str = ""  # the flavor it runs on: one of the job's alternatives (QueuedJob.flavors)
    moved: tuple[str, ...] = ()  # jobs moved for consolidation to make its room (in ``preempts``)


@dataclass(frozen=True, slots=True)
class Preemption:
    """``worker`` None: the whole job ``victim_id`` is preempted (signal, grace period). A
    worker index: only that grown worker of the job goes (a unit, see the module docstring);
    its GPUs count as free from the next cycle on, so the job shrinks at once and the
    preemptor's ``preempts`` does not name it."""

    victim_id: str
    reason: str  # "reclaim" (rule 5) | "priority" (rule 6) | "borrow" | "consolidate" (moved)
    for_job_id: str
    worker: int | None = None


@dataclass(frozen=True, slots=True)
class Growth:
    """The grow pass added ``added`` (one tuple of slots per worker, appended to the job's
    placement in this order) to running job ``job_id``, which now has ``workers`` workers."""

    job_id: str
    workers: int
    added: tuple[tuple[Slot, ...], ...]


@dataclass(frozen=True, slots=True)
class Reservation:
    """EASY backfill: the blocked head job of a priority level starts on ``nodes`` at
    ``earliest_start`` at the latest; jobs that would delay it are not backfilled."""

    job_id: str
    flavor: str
    nodes: tuple[str, ...]
    earliest_start: datetime


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds what a waiting job is owed: a running job and the milli it uses."""

    job_id: str
    project_id: str
    milli: int


@dataclass(frozen=True, slots=True)
class Explain:
    """Why a job waits. ``reason`` is one of REASONS; ``node_id`` / ``flavor`` name the
    blocking quota level (``None`` node = the pool root); ``numbers`` are the milli figures of
    the failed comparison (``workers`` alone is a count); ``holders`` the running jobs using
    capacity it is owed."""

    position: int
    reason: str
    flavor: str
    node_id: str | None = None
    numbers: tuple[tuple[str, int], ...] = ()
    holders: tuple[Holder, ...] = ()
    message: str = ""
    reservation: Reservation | None = None
    # A job with alternative flavors: why each one (in the job's order) cannot be used now.
    alternatives: tuple[Explain, ...] = ()
    # Reason "fifo": the earlier job of its project it waits behind, and why that one blocks
    # ("strict_fifo" | "aging").
    behind: str | None = None
    behind_why: str = ""
    # Over its project's aging bound: how long it has waited (whatever the reason above).
    waited_s: int | None = None
    aging_bound_s: int | None = None
    # Reason "resources": the dimension its workers' nodes lack — "CPU", "memory", "local disk".
    resource: str = ""
    # Reasons "maintenance" and "reserved": the window that bars the room (its nodes, its start).
    window: Window | None = None


REASONS = (
    "budget",        # tenant over budget and the job not approved (§3 rule 9)
    "user_cap",      # its user's running jobs in the project are at a per-user cap (§16)
    "quota",         # not in-quota and borrowing disabled
    "borrow_limit",  # rule 2 cap at a tree node
    "lend_limit",    # rule 4: capacity held back by siblings' lend limits
    "capacity",      # rule 2 at the root, or no one cluster big enough: not enough healthy capacity
    "placement",     # enough capacity in total but no node set of one cluster fits now
    "resources",     # enough GPUs free, but not on nodes with the CPU, memory or disk to feed them
    "cuda",          # room only on nodes below the CUDA version the job requires
    "reservation",   # would delay the reservation of a higher job (EASY backfill)
    "reclaimed",     # admitted earlier in this cycle, then reclaimed by an in-quota job
    "invalid",       # can never run here (e.g. worker larger than any node of the flavor)
    "fifo",          # an earlier job of its project blocks it (strict FIFO, or over its aging bound)
    "min_runtime",   # the jobs it could preempt have not yet run their class's minimum runtime
    "queue_hold",    # its project's or a department's queue is on hold (or draining)
    "maintenance",   # room only on nodes whose maintenance its maximum runtime would cross
    "reserved",      # room only in capacity reserved for another project over its runtime
    "power",         # GPUs free only in racks at their power cap (DESIGN §18)
)


@dataclass(frozen=True, slots=True)
class CycleResult:
    admissions: tuple[Admission, ...]
    preemptions: tuple[Preemption, ...]
    reservations: tuple[Reservation, ...]
    on_loan: Mapping[str, bool]  # every running + newly admitted job -> True when on loan
    explanations: Mapping[str, Explain] = field(default_factory=dict)
    growths: tuple[Growth, ...] = ()  # in the order they were made, one per job
    held: tuple[str, ...] = ()  # waiting jobs held by a spent budget (§3 rule 9), none approved
