"""Mutable engine state built from a Snapshot: pools, ledgers, running jobs, sub-queues.

Internally times are float POSIX seconds and tree nodes / GPUs small ints, so the hot loops
compare numbers, not datetimes and strings. The state outlives one cycle in the incremental
:class:`~jobs.scheduler.scheduler.Engine`; :func:`~jobs.scheduler.scheduler.schedule` builds a fresh one.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime

from jobs.scheduler.engine.model import QueuedJob, RunningJob, Snapshot
from jobs.scheduler.engine.pool import FULL, Pool
from jobs.scheduler.engine.power import Power
from jobs.scheduler.engine.timeline import Timeline
from jobs.scheduler.engine.windows import Windows, hold_back
from jobs.scheduler.fairshare import cost
from quotas.admission import Ledger, QuotaTree

NEVER = float("inf")
NEVER_MILLI = 1 << 62  # no cap: more than any pool


class Run:
    """A running (or admitted this cycle) job. ``slots`` are its GPUs on healthy nodes as
    pool indices; ``root_r`` their milli (what counts at the root).

    A worker added by the grow pass is a Run of its own, a *unit*: ``base`` is the job's first
    Run, ``job`` the job's id (a base's ``units`` lists its live units). Elastic bases carry
    ``wmilli`` (one worker's milli), ``grow_to`` and ``submitted`` (see jobs/scheduler/engine/grow.py)."""

    __slots__ = ("id", "project_id", "proj", "path", "flavor", "r", "root_r", "priority",
                 "preemptible", "started", "end", "slots", "placement", "in_quota",
                 "terminating", "fresh", "ghost", "ghost_until", "key",
                 "job", "base", "units", "wmilli", "grow_to", "submitted", "workers", "pinned",
                 "res", "req", "ghost_res", "user", "saved")

    def __init__(self, rid, project_id, proj, path, flavor, r, priority, preemptible, started,
                 end, placement, slots):
        self.id = rid
        self.project_id = project_id
        self.proj = proj
        self.path = path
        self.flavor = flavor
        self.r = r
        self.priority = priority
        self.preemptible = preemptible
        self.started = started
        self.end = end
        self.placement = placement
        self.slots = slots
        self.root_r = sum(m for _, _, m in slots)
        self.in_quota = False
        self.terminating = False
        self.fresh = False
        self.ghost: list[tuple[int, int, int]] = []
        self.ghost_until = 0.0
        # Rule 1 order; ids compare as numbers do ("99" before "100": the portal's ids are decimal)
        self.key = (-priority, started, len(rid), rid)
        self.job = rid
        self.base: Run | None = None
        self.units: list[Run] | tuple = ()  # a list once it has units (most jobs never do)
        self.wmilli = 0
        self.grow_to = 0
        self.submitted = started
        self.workers = 0  # of a base: its workers, units included (0: not elastic)
        self.pinned = False  # never a victim (RunningJob.pinned)
        # CPU, memory and disk it holds (DESIGN §15): (pool node index, (cpu, memory, disk)) per
        # worker on a healthy node; ``req`` one worker's request (what a grown worker asks).
        self.res: tuple = ()
        self.req: tuple | None = None
        self.ghost_res: list = []
        self.user = ""  # who submitted it: counts for its project's per-user caps
        # Since when a preemption would lose its work (the victim order, preempt.victim_key):
        # None when it saves on the preemption signal (checkpointing) or lost nothing yet.
        self.saved: float | None = started


class Pending:
    """A queued job, flattened for the hot loop (``milli`` is the demand of ONE worker)."""

    __slots__ = ("id", "project_id", "proj", "path", "flavor", "workers", "min_workers", "milli",
                 "priority", "preemptible", "submitted", "runtime", "approved", "job", "flavors",
                 "home", "req", "pms", "min_cuda", "user", "checkpointing")

    def __init__(self, job: QueuedJob, proj: int, path: tuple[int, ...]):
        self.job = job
        self.id = job.id
        self.project_id = job.project_id
        self.proj = proj
        self.path = path
        # With alternatives, ``flavor`` is the one being tried: the cycle sets it while it
        # evaluates, explains or places the job and puts back ``flavors[0]`` unless admitted.
        # ``home`` names the job's sub-queue, which never changes.
        self.flavors = tuple(job.flavors) if len(job.flavors) > 1 else ()
        self.flavor = self.flavors[0] if self.flavors else job.flavor
        self.home = "|".join(self.flavors) if self.flavors else job.flavor
        shared = job.gpu_milli is not None and job.gpu_milli < FULL
        self.milli = job.gpu_milli if shared else job.gpus_per_worker * FULL
        self.workers = 1 if shared else job.workers
        mw = job.min_workers if job.min_workers is not None else job.workers
        self.min_workers = 1 if shared else max(1, min(mw, job.workers))
        self.priority = job.priority
        self.preemptible = job.preemptible
        self.submitted = job.submitted_at.timestamp()
        rt = job.max_runtime_seconds
        self.runtime = NEVER if rt is None else float(rt)
        self.approved = job.approved
        req = (job.cpu_millicores or 0, job.memory_mib or 0, job.local_disk_gib or 0)
        self.req = req if any(req) else None
        # Per flavor, one worker's footprint in the indexes (Pool.demand), where it differs
        # from ``milli``: it asks more CPU, memory or disk than its units' share there.
        self.pms: dict[str, int] = {}
        self.min_cuda = tuple(job.min_cuda)
        self.user = job.user
        self.checkpointing = job.checkpointing

    @property
    def pmilli(self) -> int:
        """One worker's milli as placement sees it on the flavor being tried (``milli`` counts
        for quota; this for the nodes)."""
        pms = self.pms
        return pms[self.flavor] if pms and self.flavor in pms else self.milli


class SubQueue:
    """Pending jobs of one (priority, project, flavor), by submit time then id.

    Suffix minima let a cycle pass over a whole sub-queue in O(1) when even its least
    demanding remaining job cannot move (``suf_*[k]`` = min over jobs ``k..``).
    """

    __slots__ = ("priority", "proj", "flavor", "jobs", "pos", "epoch", "seq", "dirty",
                 "suf_g", "suf_shared", "suf_r", "suf_rt", "suf_w", "alt")

    def __init__(self, priority: int, proj: int, flavor: str, seq: int):
        self.priority = priority
        self.proj = proj
        self.flavor = flavor
        # Jobs with alternative flavors ("A|B" as ``flavor``, no pool of that name): the O(1)
        # per-flavor pass-over tests do not apply, each job is tested on its own flavors.
        self.alt = "|" in flavor
        self.jobs: list[tuple[float, str, Pending]] = []
        self.pos = 0
        self.epoch = 0
        self.seq = seq
        self.dirty = True

    def add(self, p: Pending) -> None:
        insort(self.jobs, (p.submitted, p.id, p))
        self.dirty = True

    def compact(self, gone: set[str]) -> None:
        """Drop admitted/cancelled jobs and refresh the suffix minima; rewind."""
        self.pos = 0
        if gone:
            jobs = self.jobs
            cut = 0
            while cut < len(jobs) and jobs[cut][1] in gone:
                cut += 1
            if cut == len(gone) and not self.dirty:
                # FIFO case: the first ``cut`` jobs left; later minima are unchanged.
                self.jobs = jobs[cut:]
                for name in ("suf_g", "suf_shared", "suf_r", "suf_rt", "suf_w"):
                    setattr(self, name, getattr(self, name)[cut:])
                return
            kept = [e for e in jobs if e[1] not in gone]
            if len(kept) != len(jobs):
                self.jobs = kept
                self.dirty = True
        if self.dirty:
            self._suffixes()
            self.dirty = False

    def _suffixes(self) -> None:
        n = len(self.jobs)
        g = [NEVER] * (n + 1)
        sh = [NEVER] * (n + 1)
        r = [NEVER] * (n + 1)
        rt = [NEVER] * (n + 1)
        w = [NEVER] * (n + 1)
        for k in range(n - 1, -1, -1):
            p = self.jobs[k][2]
            g[k], sh[k], r[k], rt[k], w[k] = g[k + 1], sh[k + 1], r[k + 1], rt[k + 1], w[k + 1]
            pm = p.pmilli  # on the nodes: its footprint where it asks more than the share
            if pm < FULL:
                sh[k] = min(sh[k], pm)
            else:
                g[k] = min(g[k], pm // FULL)
            r[k] = min(r[k], p.min_workers * p.milli)
            rt[k] = min(rt[k], p.runtime)
            w[k] = min(w[k], p.min_workers)
        self.suf_g, self.suf_shared, self.suf_r, self.suf_rt, self.suf_w = g, sh, r, rt, w

    def head(self) -> Pending | None:
        return self.jobs[self.pos][2] if self.pos < len(self.jobs) else None


class State:
    """Everything the cycle mutates. Built once from a Snapshot."""

    def __init__(self, snap: Snapshot) -> None:
        self.now_dt: datetime = snap.now
        self.now = snap.now.timestamp()
        self.tree = QuotaTree(snap.tree)
        self.grace = {pc.value: pc.grace_seconds for pc in snap.priority_classes}
        # Minimum runtime before a job may be preempted, per priority value (DESIGN §16).
        self.min_runtime = {pc.value: float(pc.min_runtime_seconds) for pc in snap.priority_classes
                            if pc.min_runtime_seconds > 0}
        self.over_budget = {self.tree.index[t] for t in snap.over_budget_tenants
                            if t in self.tree.index}
        self.budget_exempt = {self.tree.index[t] for t in snap.budget_exempt if t in self.tree.index}
        # Queues on hold or draining (DESIGN §17), and reservations / maintenance windows.
        self.on_hold = {self.tree.index[t] for t in snap.queues_held if t in self.tree.index}
        self.windows = Windows(snap.windows, self.now)
        # Queueing strategies (jobs/scheduler/engine/fifo.py): projects under strict FIFO, aging bounds.
        self.strict = {self.tree.index[t] for t in snap.strict_fifo if t in self.tree.index}
        self.bounds = {self.tree.index[t]: float(b) for t, b in snap.aging_bound_s.items()
                       if t in self.tree.index and b is not None}
        self.default_bound = None if snap.default_aging_bound_s is None else float(snap.default_aging_bound_s)
        self.fifo = bool(self.strict or self.bounds or self.default_bound is not None)
        flavors = {n.flavor for n in snap.nodes} | {f for _, f in snap.limits}
        flavors |= {j.flavor for j in snap.running} | {j.flavor for j in snap.queued}
        flavors |= {f for j in snap.queued for f in j.flavors}
        self.pools = {f: Pool(f, [n for n in snap.nodes if n.flavor == f and n.schedulable])
                      for f in sorted(flavors)}
        self.ledgers = {f: Ledger(self.tree, f, snap.limits, self.pools[f].capacity)
                        for f in self.pools}
        self.timelines = {f: Timeline(pool) for f, pool in self.pools.items()}
        self.running: dict[str, Run] = {}
        self.terminating: dict[str, Run] = {}
        self.order: dict[str, list[tuple]] = {f: [] for f in self.pools}  # rule-1 order
        self.ends: dict[str, list[tuple]] = {f: [] for f in self.pools}  # (end, id, run)
        self.by_proj: dict[tuple[int, str], dict[str, Run]] = {}
        self.onloan: dict[str, dict[str, Run]] = {f: {} for f in self.pools}
        # On-loan jobs in rule-5 order within a level (lowest priority, most recent), kept
        # sorted so a reclaim never sorts: (priority, -started, id, run).
        self.loan_sorted: dict[str, list[tuple]] = {f: [] for f in self.pools}
        self.loan_sub: dict[tuple[str, int], list[tuple]] = {}  # the same per subtree
        # GPUs (slots) held by on-loan jobs per node: reclaim skips nodes that can never host
        # a worker even with all of them gone.
        self.loan_gpus: dict[str, dict[int, int]] = {f: {} for f in self.pools}
        self.loan_res: dict[str, dict[int, list[int]]] = {}  # the same for CPU, memory, disk
        self.queues: dict[tuple[int, int, str], SubQueue] = {}
        self.pending: dict[str, Pending] = {}
        self.shares: dict[int, float] = {}  # dominant share cache, dropped on usage change
        self.tentative: dict[tuple[str, int], int] = {}  # (flavor, project) promised on loan
        self.units: dict[str, Run] = {}  # every live unit (a worker added by the grow pass)
        self.elastic: dict[str, Run] = {}  # bases that may grow (grow_to above their workers)
        # Per-user caps (DESIGN §16): project index -> (GPU milli, running jobs); what each
        # capped (project, user) holds now, [milli, jobs], kept as jobs enter and leave ``running``.
        self.caps = {self.tree.index[t]: cap for t, cap in snap.user_caps.items()
                     if t in self.tree.index and cap != (None, None)}
        self.user_used: dict[tuple[int, str], list[int]] = {}
        # Consolidation (jobs/scheduler/engine/consolidate.py): the policy and the times of moves
        # (the snapshot's last hour, then the engine's own).
        self.consolidation = snap.consolidation
        self.moves: list[float] = sorted(t.timestamp() for t in snap.recent_moves)
        self._ingest([j for j in snap.running if not j.terminating])
        for job in sorted((j for j in snap.running if j.terminating), key=lambda j: j.id):
            since = job.terminating_since.timestamp() if job.terminating_since else self.now
            self.add_terminating(self.make_run(job), since)
        self.submit(snap.queued)
        # Rack power caps (DESIGN §18): None when no rack of the snapshot has one.
        self.power = Power(snap, self.pools) if snap.rack_caps else None
        # Fair share (DESIGN §16, jobs/scheduler/fairshare.py): per tree node index the usage given
        # (subtree sums) and shares; ``fair_u`` is that usage plus this cycle's entry charges.
        self.fair = False
        self.fair_entry = float(snap.fair_entry_s)
        self.set_fair(snap.fair_usage, snap.fair_shares)
        # The rule-1 split is computed when a cycle starts (Engine._settle).

    def _ingest(self, jobs: list[RunningJob]) -> None:
        """The snapshot's running jobs in bulk: one sort per index instead of an insort each."""
        for job in sorted(jobs, key=lambda j: j.id):
            if job.id in self.running:
                raise ValueError(f"running job {job.id!r} listed twice")
            for run in self.make_runs(job):
                pool = self.pools[run.flavor]
                pool.occupy_slots(run.slots, run.res)
                self.running[run.id] = run
                self.timelines[run.flavor].track(run.id, run.slots, run.end, run.res)
                self.by_proj.setdefault((run.proj, run.flavor), {})[run.id] = run
                self.order[run.flavor].append((run.key, run))
                if run.end < NEVER:
                    self.ends[run.flavor].append((run.end, run.id, run))
                self._count_user(run, 1)
        for f in self.pools:
            self.order[f].sort()
            self.ends[f].sort()

    # -- ingestion -----------------------------------------------------------------------
    def project(self, project_id: str) -> tuple[int, tuple[int, ...]]:
        try:
            proj = self.tree.index[project_id]
        except KeyError:
            raise ValueError(f"job of unknown project {project_id!r}") from None
        return proj, self.tree.path(proj)

    def make_run(self, job: RunningJob) -> Run:
        proj, path = self.project(job.project_id)
        pool = self.pools[job.flavor]
        slots = tuple((pool.index[n], g, m) for n, g, m in job.placement if n in pool.index)
        started = job.started_at.timestamp()
        rt = job.max_runtime_seconds
        end = NEVER if rt is None else started + rt
        r = sum(m for _, _, m in job.placement)
        run = Run(job.id, job.project_id, proj, path, job.flavor, r, job.priority,
                  job.preemptible and not job.pinned, started, end, job.placement, slots)
        run.pinned = job.pinned
        run.user = job.user
        if job.checkpointing:
            run.saved = None
        elif job.last_checkpoint_at is not None:
            run.saved = max(started, job.last_checkpoint_at.timestamp())
        if job.requests:
            run.res = self._res(pool, job.requests)
            run.req = job.requests[0][1:]
        else:
            run.res = pool.implied(slots)
        return run

    @staticmethod
    def _res(pool, requests) -> tuple:
        """``RunningJob.requests`` on the pool's healthy nodes: (node index, (cpu, mem, disk))."""
        if pool.res is None:
            return ()
        index = pool.index
        return tuple((index[n], (c, m, d)) for n, c, m, d in requests if n in index and (c or m or d))

    def make_runs(self, job: RunningJob) -> list[Run]:
        """A live job as its base Run plus one unit per grown worker (jobs/scheduler/engine/grow.py)."""
        wm = job.worker_milli
        if wm < FULL or wm % FULL or not (job.grown or job.grow_to):
            return [self.make_run(job)]
        g = wm // FULL
        placement = job.placement
        workers = len(placement) // g
        n_units = min(len(job.grown), workers - 1)
        cut = (workers - n_units) * g
        requests = job.requests
        base_workers = workers - n_units
        base = self.make_run(replace(job, placement=placement[:cut], requests=requests[:base_workers]))
        base.wmilli, base.grow_to, base.workers = wm, job.grow_to, workers
        if requests:
            base.req = requests[0][1:]
        base.submitted = (job.submitted_at or job.started_at).timestamp()
        if base.grow_to > workers:
            self.elastic[base.id] = base
        runs = [base]
        grown = job.grown[len(job.grown) - n_units:]
        for k, at in enumerate(grown):
            first = cut + k * g
            unit = self.make_unit(base, workers - n_units + k, placement[first:first + g], at.timestamp(),
                                  requests[base_workers + k:base_workers + k + 1])
            runs.append(unit)
        return runs

    def make_unit(self, base: Run, k: int, placement, started: float, requests=()) -> Run:
        """A grown worker of ``base``; ``requests``: its ``RunningJob.requests`` entry (a worker
        grown by this engine: none given, its request is its job's, on its node)."""
        pool = self.pools[base.flavor]
        slots = tuple((pool.index[n], g, m) for n, g, m in placement if n in pool.index)
        r = sum(m for _, _, m in placement)
        unit = Run(f"{base.id}/{k}", base.project_id, base.proj, base.path, base.flavor, r,
                   base.priority, base.preemptible, started, base.end, tuple(placement), slots)
        unit.job, unit.base = base.id, base
        unit.req = base.req
        unit.user = base.user
        unit.saved = None  # its job goes on without it: shrinking loses no work
        if requests:
            unit.res = self._res(pool, requests)
        elif base.req and slots and pool.res is not None:
            unit.res = ((slots[0][0], base.req),)
        else:
            unit.res = pool.implied(slots)
        if not base.units:
            base.units = []
        base.units.append(unit)
        self.units[unit.id] = unit
        return unit

    def detach_unit(self, unit: Run) -> None:
        """A unit left for good (reclaimed, or its job ended): its job has one worker less."""
        base = unit.base
        del self.units[unit.id]
        base.units.remove(unit)
        base.workers -= 1
        if base.grow_to > base.workers and not base.terminating and base.id in self.running:
            self.elastic[base.id] = base

    def retarget(self, base: Run, grow_to: int, wmilli: int, submitted: datetime | None) -> None:
        if wmilli < FULL or wmilli % FULL:
            grow_to = 0
        if not base.wmilli and wmilli:
            base.wmilli, base.workers = wmilli, base.r // wmilli
        base.grow_to = grow_to
        if submitted is not None:
            base.submitted = submitted.timestamp()
        if base.wmilli and grow_to > base.workers and not base.terminating:
            self.elastic[base.id] = base
        else:
            self.elastic.pop(base.id, None)

    def drop_job(self, run: Run) -> None:
        """A job ended: forget it and its units."""
        for unit in list(run.units):
            self.drop_run(unit)
            self.detach_unit(unit)
        self.elastic.pop(run.id, None)
        self.drop_run(run)

    def submit(self, jobs: Iterable[QueuedJob]) -> set[tuple[int, int, str]]:
        """Queue jobs; returns the keys of the sub-queues that changed."""
        touched = set()
        for job in jobs:
            if job.id in self.pending or job.id in self.running:
                raise ValueError(f"job {job.id!r} is already queued or running")
            proj, path = self.project(job.project_id)
            p = Pending(job, proj, path)
            for f in p.flavors or (p.flavor,):
                if f not in self.pools:
                    self._add_flavor(f)
                if p.req is not None:
                    pm = self.pools[f].demand(p.milli, p.req)
                    if pm != p.milli:
                        p.pms[f] = pm
            self.pending[p.id] = p
            key = (p.priority, proj, p.home)
            sq = self.queues.get(key)
            if sq is None:
                sq = self.queues[key] = SubQueue(p.priority, proj, p.home, len(self.queues))
            sq.add(p)
            touched.add(key)
        return touched

    def _add_flavor(self, flavor: str) -> None:
        # A flavor nobody has nodes or limits for: jobs wait with capacity 0.
        self.pools[flavor] = Pool(flavor, [])
        self.ledgers[flavor] = Ledger(self.tree, flavor, {}, 0)
        self.timelines[flavor] = Timeline(self.pools[flavor])
        self.order[flavor] = []
        self.ends[flavor] = []
        self.onloan[flavor] = {}
        self.loan_sorted[flavor] = []
        self.loan_gpus[flavor] = {}

    # -- running jobs --------------------------------------------------------------------
    def add_run(self, run: Run, in_quota: bool | None = None) -> None:
        """Count ``run`` (its GPUs and, when ``in_quota`` is given, its quota usage)."""
        pool = self.pools[run.flavor]
        pool.occupy_slots(run.slots, run.res)
        self.index(run)
        if in_quota is not None:
            self.count(run, in_quota)

    def index(self, run: Run) -> None:
        self.running[run.id] = run
        self.timelines[run.flavor].track(run.id, run.slots, run.end, run.res)
        insort(self.order[run.flavor], (run.key, run))
        if run.end < NEVER:
            insort(self.ends[run.flavor], (run.end, run.id, run))
        self.by_proj.setdefault((run.proj, run.flavor), {})[run.id] = run
        self._count_user(run, 1)

    def _count_user(self, run: Run, sign: int) -> None:
        """What ``run`` adds to (or, ``sign`` -1, takes from) its user's figures under a cap: its
        GPUs, and one job for a job's first Run (a grown worker is not a job of its own)."""
        if not self.caps or not run.user or run.proj not in self.caps:
            return
        used = self.user_used.setdefault((run.proj, run.user), [0, 0])
        used[0] += sign * run.r
        if run.base is None:
            used[1] += sign

    def reindex(self, run: Run) -> None:
        """Undo :meth:`forget` (the job is counted again by :meth:`unlift`)."""
        self.index(run)
        if not run.in_quota:
            self._loan_add(run)

    def count(self, run: Run, in_quota: bool) -> None:
        self.shares.pop(run.proj, None)
        run.in_quota = in_quota
        self.ledgers[run.flavor].add(run.path, run.r, in_quota, run.root_r)
        if not in_quota:
            self._loan_add(run)

    def _loan_add(self, run: Run) -> None:
        self.onloan[run.flavor][run.id] = run
        if run.pinned:  # on loan, but never reclaimed: kept out of the victim indexes
            return
        entry = (run.priority, -run.started, run.id, run)
        insort(self.loan_sorted[run.flavor], entry)
        for n in run.path:
            insort(self.loan_sub.setdefault((run.flavor, n), []), entry)
        counts = self.loan_gpus[run.flavor]
        for i, _, _ in run.slots:
            counts[i] = counts.get(i, 0) + 1
        self._loan_res(run, 1)

    def _loan_res(self, run: Run, sign: int) -> None:
        """CPU, memory and disk on-loan jobs hold per node: what reclaim could give back there."""
        if not run.res:
            return
        held = self.loan_res.get(run.flavor)
        if held is None:
            held = self.loan_res[run.flavor] = {}
        for i, req in run.res:
            if i in held:
                row = held[i]
            else:
                row = held[i] = [0, 0, 0]
            if sign > 0:
                row[0] += req[0]
                row[1] += req[1]
                row[2] += req[2]
            else:
                row[0] -= req[0]
                row[1] -= req[1]
                row[2] -= req[2]

    def drop_run(self, run: Run) -> None:
        """Forget a live job entirely: quota usage, GPUs and indexes."""
        self.lift(run)
        self.forget(run)

    def lift(self, run: Run) -> None:
        """Take a live job's usage off the ledger and its GPUs (with its CPU, memory and disk)
        off the pool (reversible)."""
        self.shares.pop(run.proj, None)
        self.ledgers[run.flavor].remove(run.path, run.r, run.in_quota, run.root_r)
        pool = self.pools[run.flavor]
        pool.release_slots(run.slots, run.res)

    def unlift(self, run: Run) -> None:
        self.shares.pop(run.proj, None)
        self.ledgers[run.flavor].add(run.path, run.r, run.in_quota, run.root_r)
        pool = self.pools[run.flavor]
        pool.occupy_slots(run.slots, run.res)

    def forget(self, run: Run) -> None:
        """Drop a lifted job from the indexes."""
        if self.onloan[run.flavor].pop(run.id, None) is not None and not run.pinned:
            key = (run.priority, -run.started, run.id)
            ls = self.loan_sorted[run.flavor]
            del ls[bisect_left(ls, key)]
            for n in run.path:
                ls = self.loan_sub[(run.flavor, n)]
                del ls[bisect_left(ls, key)]
            counts = self.loan_gpus[run.flavor]
            for i, _, _ in run.slots:
                counts[i] -= 1
            self._loan_res(run, -1)
        del self.running[run.id]
        self.timelines[run.flavor].untrack(run.id, run.slots)
        order = self.order[run.flavor]
        del order[bisect_left(order, (run.key,))]
        if run.end < NEVER:
            ends = self.ends[run.flavor]
            del ends[bisect_left(ends, (run.end, run.id))]
        del self.by_proj[(run.proj, run.flavor)][run.id]
        self._count_user(run, -1)

    def add_terminating(self, run: Run, since: float) -> None:
        """A victim in its grace period (from the snapshot): signalled at ``since``, it exits by
        ``since`` + grace — the same deadline the cycle that signalled it used."""
        self.retire(run, since + self.grace.get(run.priority, 0))
        run.terminating = True
        self.terminating[run.id] = run

    def retire(self, run: Run, until: float) -> None:
        """Keep a removed job's GPUs taken where nobody else took them, until ``until`` — and its
        CPU, memory and disk, as far as they are still free (its preemptor starts after it)."""
        pool = self.pools[run.flavor]
        used = pool.used
        run.ghost = []
        for i, g, m in run.slots:
            amount = min(m, FULL - used[i][g])
            if amount > 0:
                pool.occupy(i, g, amount)
                run.ghost.append((i, g, amount))
        run.ghost_res = []
        if run.res:
            free = pool.res
            for i, req in run.res:
                f = free[i]
                kept = (max(0, min(req[0], f[0])), max(0, min(req[1], f[1])), max(0, min(req[2], f[2])))
                if any(kept):
                    pool.take(i, kept)
                    run.ghost_res.append((i, kept))
        run.ghost_until = until
        self.timelines[run.flavor].track(("ghost", run.id), run.ghost, until, run.ghost_res)

    def release_ghost(self, run: Run) -> None:
        pool = self.pools[run.flavor]
        pool.release_slots(run.ghost, run.ghost_res)
        self.timelines[run.flavor].untrack(("ghost", run.id), run.ghost, run.ghost_res)
        run.ghost = []
        run.ghost_res = []

    def drop_terminating(self, run: Run) -> None:
        self.release_ghost(run)
        del self.terminating[run.id]

    def resplit(self) -> dict[str, bool]:
        """Rule 1 over every live job; returns job id -> on loan."""
        self.shares.clear()
        out: dict[str, bool] = {}
        for flavor, order in self.order.items():
            runs = [run for _, run in order]
            ledger = self.ledgers[flavor]
            flags = ledger.rebuild((r.path, r.r, r.root_r) for r in runs)
            for run, ok in zip(runs, flags, strict=True):
                run.in_quota = ok
            if self.units:
                self._units_follow_their_job(ledger, runs)
            loans = self.onloan[flavor] = {}
            for run in runs:
                ok = run.in_quota
                if run.base is None:
                    out[run.id] = not ok
                if not ok:
                    loans[run.id] = run
            entries = sorted((v.priority, -v.started, v.id, v) for v in loans.values() if not v.pinned)
            self.loan_sorted[flavor] = entries
            for key in [k for k in self.loan_sub if k[0] == flavor]:
                del self.loan_sub[key]
            counts = self.loan_gpus[flavor] = {}
            self.loan_res.pop(flavor, None)
            for e in entries:  # already in order: appending keeps every list sorted
                for n in e[3].path:
                    self.loan_sub.setdefault((flavor, n), []).append(e)
                for i, _, _ in e[3].slots:
                    counts[i] = counts.get(i, 0) + 1
                self._loan_res(e[3], 1)
        return out

    @staticmethod
    def _units_follow_their_job(ledger: Ledger, runs: list[Run]) -> None:
        """A grown worker is in quota only while its job's first workers are: rule 1 may find
        room for a small unit after passing over its larger job, but reclaiming that job must
        take the whole job, so such a unit is counted on loan with it."""
        for run in runs:
            base = run.base
            if base is not None and run.in_quota and not base.in_quota:
                ledger.remove(run.path, run.r, True, run.root_r)
                ledger.add(run.path, run.r, False, run.root_r)
                run.in_quota = False

    def exempt_until(self, run: Run) -> float:
        """When ``run`` may first be preempted: its job's start + its class's minimum runtime
        (a grown worker counts from its job's start: the job is what the minimum protects)."""
        minimum = self.min_runtime.get(run.priority)
        if not minimum:
            return 0.0
        job = run.base if run.base is not None else run
        return job.started + minimum

    def exempt(self, run: Run) -> bool:
        """Is ``run`` still within its class's minimum runtime (never a victim now)?"""
        return bool(self.min_runtime) and self.now < self.exempt_until(run)

    # -- fair share ----------------------------------------------------------------------
    def set_fair(self, usage: Mapping[str, float], shares: Mapping[str, float]) -> None:
        """New fair-share maps (projects' decayed usage, shares per node); both empty: off."""
        tree = self.tree
        n = len(tree.ids)
        base = [0.0] * n
        for pid, u in usage.items():
            i = tree.index.get(pid)
            if i is None or tree.kind[i] != "project" or not u:
                continue  # a department's usage is its projects'
            for a in tree.path(i):
                base[a] += float(u)
        self.fair_base = base
        self.fair_s = [float(shares.get(nid, 0.0)) for nid in tree.ids]
        self.fair = bool(usage or shares)
        self.fair_reset()

    def fair_reset(self) -> None:
        """A cycle starts from the given usage: entry charges last one cycle (the caller's next
        usage counts the admitted jobs' time)."""
        self.fair_u = list(self.fair_base)
        self.fair_keys: dict[int, tuple[float, ...]] = {}

    def fair_charge(self, proj: int, milli: int) -> None:
        """A job of ``proj`` was admitted, promised or grown by ``milli``: it counts at once, for
        ``fair_entry_s`` seconds of its cards (so a burst cannot pass on one stale factor)."""
        if not self.fair or milli <= 0:
            return
        amount = milli / FULL * self.fair_entry
        u = self.fair_u
        for a in self.tree.path(proj):
            u[a] += amount
        self.fair_keys.clear()  # the keys of its siblings' subtrees moved too

    def fair_key(self, proj: int) -> tuple[float, ...]:
        """Fair Tree key of a project: ``u/s`` of its ancestors, top down (smaller first; see
        jobs/scheduler/fairshare.py). It only grows during a cycle (usage is only charged)."""
        key = self.fair_keys.get(proj)
        if key is None:
            u, sh = self.fair_u, self.fair_s
            key = self.fair_keys[proj] = tuple([cost(u[a], sh[a]) for a in reversed(self.tree.path(proj))])
        return key

    def turn(self, proj: int):
        """A project's place in a priority level: its dominant share, led by its Fair Tree key
        when fair share is on."""
        if self.fair:
            return (self.fair_key(proj), self.share(proj))
        return self.share(proj)

    def share(self, proj: int) -> float:
        """Dominant share of a project: max over flavors of usage ÷ quota (§5.1)."""
        best = self.shares.get(proj)
        if best is not None:
            return best
        best = 0.0
        tentative = self.tentative
        for f, ledger in self.ledgers.items():
            used = ledger.u_q[proj] + ledger.u_l[proj]
            if tentative:
                used += tentative.get((f, proj), 0)
            if used:
                q = ledger.quota[proj]
                s = used / q if q > 0 else NEVER
                if s > best:
                    best = s
        self.shares[proj] = best
        return best

    def bound(self, proj: int) -> float | None:
        """The aging bound of a project, seconds (None: it never ages)."""
        return self.bounds.get(proj, self.default_bound)

    def held(self, p: Pending) -> bool:
        """Not considered at all now: held by a spent budget, or its user is at a cap. Either
        only tightens as the cycle admits jobs, so a held job blocks nobody and heads no level."""
        return self.queue_held(p) or self.budget_held(p) or (bool(self.caps) and self.capped(p) is not None)

    def queue_held(self, p: Pending) -> bool:
        """Its project's queue, or a department's above it, is on hold or draining."""
        return bool(self.on_hold) and any(n in self.on_hold for n in p.path)

    def placeable(self, p: Pending) -> Pool:
        """The pool of ``p``'s flavor as ``p`` may use it: without the nodes below its CUDA
        version (DESIGN §15) or barred to it by a window, and with the GPUs a reserved count
        holds for another project taken (jobs/scheduler/engine/windows.py). The live pool when
        nothing applies; otherwise a copy."""
        pool = self.pools[p.flavor]
        skip = self.skipped(p, pool)
        if skip:
            pool = pool.without(skip)
        if self.power is not None:  # and without the units no rack's power cap lets it take
            pool = self.power.limit(pool)
        return self.held_back(pool, p.project_id, p.runtime) if self.windows else pool

    def held_back(self, pool: Pool, project_id: str, runtime: float) -> Pool:
        """``pool`` less the GPUs reserved counts of other projects hold over ``runtime``."""
        f = pool.flavor
        held, _ = self.windows.held(project_id, runtime, f, self.now, lambda pid: self.used_by(pid, f))
        return hold_back(pool, held) if held else pool

    def growable(self, base: Run, pool: Pool) -> Pool:
        """The pool one more worker of running job ``base`` may take: it runs until the job's
        end, so the windows it would meet by then bar their room to it; nor may it take a unit no
        rack's power cap lets it (DESIGN §18)."""
        if self.power is not None:
            pool = self.power.limit(pool)
        if not self.windows:
            return pool
        runtime = base.end - self.now
        barred = [i for i, _ in self.windows.barred(base.project_id, runtime, pool, self.now)]
        if barred:
            pool = pool.without(barred)
        return self.held_back(pool, base.project_id, runtime)

    def skipped(self, p: Pending, pool: Pool) -> list[int]:
        """Nodes of ``pool`` never chosen for ``p`` now: below its CUDA version, or in a window."""
        skip = pool.below_cuda(p.min_cuda) if p.min_cuda else []
        if self.windows:
            barred = [i for i, _ in self.windows.barred(p.project_id, p.runtime, pool, self.now)]
            skip = sorted(set(skip) | set(barred)) if skip else barred
        return skip

    def used_by(self, project_id: str, flavor: str) -> int:
        """The milli the running jobs of a project hold of ``flavor``."""
        proj = self.tree.index.get(project_id)
        if proj is None:
            return 0
        return sum(run.r for run in self.by_proj.get((proj, flavor), {}).values())

    def budget_held(self, p: Pending) -> bool:
        """Budget hold (§3 rule 9): the tenant or an ancestor is over budget, not approved."""
        if p.approved or not self.over_budget or p.proj in self.budget_exempt:
            return False
        return any(n in self.over_budget for n in p.path)

    def capped(self, p: Pending) -> tuple[str, int, int] | None:
        """The per-user cap of its project that admitting ``p`` (at its minimum size) would
        break: ("gpus", cap milli, held milli) or ("jobs", cap, running jobs); None when none."""
        cap = self.caps.get(p.proj)
        if cap is None or not p.user:
            return None
        milli, jobs = self.user_used.get((p.proj, p.user), (0, 0))
        if cap[1] is not None and jobs + 1 > cap[1]:
            return "jobs", cap[1], jobs
        if cap[0] is not None and milli + p.min_workers * p.milli > cap[0]:
            return "gpus", cap[0], milli
        return None

    def user_room(self, p: Pending) -> int:
        """The GPU milli ``p``'s user may still take in its project (an elastic job's grant)."""
        cap = self.caps.get(p.proj)
        if cap is None or cap[0] is None or not p.user:
            return NEVER_MILLI
        return cap[0] - self.user_used.get((p.proj, p.user), (0, 0))[0]

    def grow_capped(self, base: Run, milli: int) -> bool:
        """Would ``milli`` more for running job ``base`` break its user's GPU cap?"""
        cap = self.caps.get(base.proj) if self.caps and base.user else None
        if cap is None or cap[0] is None:
            return False
        return self.user_used.get((base.proj, base.user), (0, 0))[0] + milli > cap[0]

    def held_ids(self) -> tuple[str, ...]:
        """The waiting jobs a spent budget holds, in id order."""
        if not self.over_budget:
            return ()
        return tuple(sorted((p.id for p in self.pending.values() if self.budget_held(p)),
                            key=lambda j: (len(j), j)))
