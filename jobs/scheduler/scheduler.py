"""The scheduling cycle of gpupool (DESIGN §5), pure: no Django, no I/O, no wall clock.

Public API::

    schedule(snapshot, *, fragmentation_aware=True, backfill=True, borrowing=True) -> CycleResult

    engine = Engine(snapshot, ...)        # the same cycle, keeping its state between cycles
    result = engine.cycle()               # == schedule(snapshot)
    engine.finish(ids); engine.submit(queued_jobs); engine.cancel(ids)
    engine.retarget(job_id, grow_to=…)    # a running job's growth target changed
    result = engine.cycle(now)            # incremental: only the deltas are applied

Inputs and outputs are the dataclasses of :mod:`jobs.scheduler.engine.model` (re-exported here); amounts
are integer milli-units. ``borrowing=False`` is the static policy (jobs run in-quota only);
``backfill=False`` stops every later job behind the first blocked head (strict order);
``fragmentation_aware=False`` switches placement to plain best-fit (see :mod:`jobs.scheduler.placement`).

How a cycle decides (details in :mod:`jobs.scheduler.engine.cycle` and the modules it names):

1. Rule 1 is recomputed over the running jobs (in-quota / on-loan split).
2. Priority levels, highest first; inside a level the (project, flavor) sub-queues are merged
   by the project's Fair Tree key when the snapshot carries fair-share maps (DESIGN §16,
   :mod:`jobs.scheduler.fairshare`; each admission charges its project at once), then the
   project's current dominant share (usage ÷ quota, max over flavors; both re-read after every
   admission so tenants take turns), then submit time, then id.
3. Each job at its turn: budget hold → quota rules (§3) → placement → preemption (rule 5
   reclaim when in-quota, else rule 6) → it waits. The first job of a level that waits for
   capacity or placement gets the level's reservation (EASY backfill; jobs behind it may only
   use GPUs it does not need, or the ones it needs if they end before it starts).
4. In-quota demand first: a job that can only run on loan is *promised* its room during the
   pass and placed in a borrowing phase after the last level, in promise order (see
   :mod:`jobs.scheduler.engine.borrow`). Rule 5 would reclaim such same-cycle loans anyway; this gets
   the same result without the churn, and running on-loan jobs are still reclaimed.
5. The grow pass: running elastic jobs below their target get one more worker at a time, in
   queue order, with what the queue cannot use (see :mod:`jobs.scheduler.engine.grow`).

Decisions of one cycle:

* ``admissions`` — in the order they were made. A job admitted by preemption lists the victims
  in ``preempts``: it takes their GPUs, and the backend starts it when they have exited.
* ``preemptions`` — victims keep running through their grace period. GPUs they free beyond what
  the preemptor takes are NOT handed to anyone else in the same cycle; the next snapshot lists
  the victims with ``terminating=True`` until they exit (see :mod:`jobs.scheduler.engine.model`). A
  preemption with ``worker`` set takes one grown worker of a job, which shrinks at once.
* ``growths`` — running jobs that got workers, with the slots added (placement order).
* ``reservations`` — one per priority level at most (EASY backfill).
* ``on_loan`` — rule 1 recomputed over all running jobs plus the new admissions.
* ``explanations`` — for every job still waiting, computed on demand from the end-of-cycle
  state (see :mod:`jobs.scheduler.engine.explain`); read them before the engine's next cycle.

Determinism: inputs are re-sorted by id wherever order could matter, and every tie is broken
by id, so the same snapshot gives the same decisions whatever the order of its tuples.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from datetime import datetime

from jobs.scheduler.engine.cycle import Cycle
from jobs.scheduler.engine.explain import Explanations
from jobs.scheduler.engine.model import (
    Admission,
    Consolidation,
    CycleResult,
    Explain,
    Growth,
    Holder,
    Limits,
    Node,
    NodePower,
    Preemption,
    PriorityClass,
    QueuedJob,
    Reservation,
    RunningJob,
    Snapshot,
    TreeNode,
    Window,
)
from jobs.scheduler.engine.state import State

__all__ = [
    "Admission", "Consolidation", "CycleResult", "Engine", "Explain", "Growth", "Holder", "Limits", "Node",
    "NodePower", "Preemption", "PriorityClass", "QueuedJob", "Reservation", "RunningJob", "Snapshot",
    "TreeNode", "Window",
    "schedule",
]


def schedule(snapshot: Snapshot, *, fragmentation_aware: bool = True, backfill: bool = True,
             borrowing: bool = True) -> CycleResult:
    """One cycle over ``snapshot``."""
    return Engine(snapshot, fragmentation_aware=fragmentation_aware, backfill=backfill,
                  borrowing=borrowing).cycle()


@contextmanager
def _no_cyclic_gc():
    """The cyclic collector would walk every queued and running job again and again while a
    cycle runs (≈20 % of a 50,000-job drain). The engine builds no reference cycles, so
    reference counting frees everything; collection resumes when the call returns."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Engine:
    """The cycle with its state kept between calls, for the service loop and replay.

    After a cycle the engine assumes its decisions were applied: admitted jobs run (from the
    cycle's ``now``), victims are terminating. ``finish`` (a job ended, or a victim exited),
    ``submit`` and ``cancel`` are recorded and applied when the next cycle starts.
    """

    def __init__(self, snapshot: Snapshot, *, fragmentation_aware: bool = True,
                 backfill: bool = True, borrowing: bool = True) -> None:
        with _no_cyclic_gc():
            self.state = State(snapshot)
        self._opts = {"frag": fragmentation_aware, "backfill": backfill, "borrowing": borrowing}
        self._last: Cycle | None = None
        self._last_explain: Explanations | None = None
        self._finished: list[str] = []
        self._submitted: list[QueuedJob] = []
        self._cancelled: list[str] = []
        self._targets: dict[str, tuple[int, int, datetime | None]] = {}

    def finish(self, job_ids: Iterable[str]) -> None:
        self._finished.extend(job_ids)

    def submit(self, jobs: Iterable[QueuedJob]) -> None:
        self._submitted.extend(jobs)

    def cancel(self, job_ids: Iterable[str]) -> None:
        self._cancelled.extend(job_ids)

    def retarget(self, job_id: str, *, grow_to: int, worker_milli: int,
                 submitted_at: datetime | None = None) -> None:
        """A running job's growth target changed (it became growable, its owner set a target,
        or it may no longer grow: ``grow_to=0``). Its worker count must be what the engine
        believes; a job that shrank outside the engine needs a fresh engine instead."""
        self._targets[job_id] = (grow_to, worker_milli, submitted_at)

    def set_fair(self, usage: Mapping[str, float], shares: Mapping[str, float]) -> None:
        """Fair-share maps for the next cycles (DESIGN §16; the Snapshot's ``fair_usage`` and
        ``fair_shares``): the caller refreshes them between cycles. Both empty: fair share off."""
        self.state.set_fair(usage, shares)

    def waiting_in_quota(self) -> list[str]:
        """Jobs still waiting after the last cycle, not held, whose request fits their quota on
        the whole path (rule 3): in-quota demand that waits for capacity or placement — what
        fair share must not delay (DESIGN §16: quota is a guarantee; bench/fairness.py)."""
        c = self._last
        if c is None:
            return []
        s = c.s
        return [p.id for p in s.pending.values() if p.id not in c.admitted and not s.held(p)
                and c.gate(p.flavor, p.path, p.min_workers * p.milli)[0] == "in"]

    def cycle(self, now: datetime | None = None) -> CycleResult:
        with _no_cyclic_gc():
            return self._cycle(now)

    def _cycle(self, now: datetime | None) -> CycleResult:
        self._settle(now)
        self.state.fair_reset()  # entry charges last one cycle, as in a cold engine
        c = Cycle(self.state, **self._opts)
        c.run()
        s = self.state
        on_loan = s.resplit()
        self._last = c
        self._last_explain = Explanations(c)
        return CycleResult(c.admissions(), tuple(c.preemptions),
                           tuple(r.public(s) for r in c.reservations), on_loan,
                           self._last_explain, tuple(c.growths), s.held_ids())

    def _settle(self, now: datetime | None) -> None:
        """Apply the previous cycle's decisions and the recorded deltas."""
        s = self.state
        gone: dict[str, tuple] = {}
        if self._last is not None:
            self._last_explain.expired = True
            self._close(self._last, gone)
        for jid in self._finished:
            if jid in s.running:
                s.drop_job(s.running[jid])
            elif jid in s.terminating:
                s.drop_terminating(s.terminating[jid])
        for jid, (grow_to, wm, submitted) in self._targets.items():
            run = s.running.get(jid)
            if run is not None and run.base is None:
                s.retarget(run, grow_to, wm, submitted)
        self._targets = {}
        for jid in self._cancelled:
            p = s.pending.pop(jid, None)
            if p is not None:
                gone[jid] = (p.priority, p.proj, p.home)
        self._finished, self._cancelled = [], []
        if now is not None:
            s.now_dt, s.now = now, now.timestamp()
        self._compact(gone)
        for key in s.submit(self._submitted):
            s.queues[key].compact(set())
        self._submitted = []
        s.resplit()

    def _close(self, c: Cycle, gone: dict[str, tuple]) -> None:
        s = self.state
        for res in c.reservations:
            res.lift(s.pools[res.flavor])
            s.timelines[res.flavor].untrack(("res", res.job_id), res.slots, tuple(res.applied_res.items()))
        for v in c.fresh_ghosts:
            s.release_ghost(v)
        # A victim signalled in this cycle took as ghost only what its preemptor left; when that
        # preemptor was itself reclaimed (a fresh ghost, just released) the victim still runs
        # on those GPUs: it takes them again, as a cold engine's ``add_terminating`` would.
        for pre in c.preemptions:
            v = s.terminating.get(pre.victim_id) if pre.worker is None else None
            if v is not None:
                until = v.ghost_until
                s.release_ghost(v)
                s.retire(v, until)
        for p, run, _, _ in c.admitted.values():
            run.fresh = False
            s.pending.pop(p.id, None)
            gone[p.id] = (p.priority, p.proj, p.home)

    def _compact(self, gone: dict[str, tuple]) -> None:
        s = self.state
        by_queue: dict[tuple, set[str]] = {}
        for jid, key in gone.items():
            by_queue.setdefault(key, set()).add(jid)
        for sq in s.queues.values():
            sq.pos = 0
            if sq.dirty:  # new jobs since the minima were computed
                sq.compact(set())
        for key, ids in by_queue.items():
            sq = s.queues.get(key)
            if sq is not None:
                sq.compact(ids)
                if not sq.jobs:
                    del s.queues[key]
