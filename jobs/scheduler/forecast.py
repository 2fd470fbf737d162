"""When will a waiting job start (issue 24): the production engine run forward, like ``squeue --start``.

Pure: no Django. Fed the same frozen :class:`~jobs.scheduler.engine.model.Snapshot` a cycle uses; every
decision is :class:`jobs.scheduler.scheduler.Engine`'s — this module only moves a virtual clock::

    found = forecast(snapshot, horizon_seconds=7 * 86400, max_cycles=400)
    found.starts["42"]    # datetime: the virtual time the engine admits job 42
    found.unknown["43"]   # why there is no estimate: one of UNKNOWN

What it assumes (and says on the pages):

* running jobs end at ``started_at + max_runtime_seconds`` (their limit; a job usually ends
  earlier, so estimates are late rather than early); a job without a limit never ends as far
  as the estimate knows. A job whose limit has passed ends at ``now`` (the expiry is due).
* jobs admitted in the forecast run to their own limit too; no new job arrives, nobody cancels,
  quotas, loans and nodes stay as they are now.
* a preemption victim exits at the end of its grace period (the engine's own deadline) and is
  queued again, as the service requeues it (same submission time, shape and limit: it keeps
  its place in the order); its estimated restart is reported in ``restarts``. A running job is
  requeued in the form the caller gives (``requeue``), a job the forecast admitted as it was
  queued.
* the first cycle runs at ``now`` (what the next real cycle would decide); then one cycle at
  every virtual time something ends, as the service runs one on every finish.

A job admitted by preemption starts when its victims have exited: its estimate is that time.
Cost: one engine cycle per distinct end time on a flavor some waiting job accepts (an end
elsewhere can admit nothing), at most ``max_cycles`` (then the rest are ``beyond_horizon``),
so the caller bounds it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from jobs.scheduler.scheduler import Engine, QueuedJob, Snapshot

DEFAULT_HORIZON_SECONDS = 7 * 86400
DEFAULT_MAX_CYCLES = 400

UNKNOWN = (
    "unlimited",       # it waits for jobs without a max runtime (or for capacity that never frees)
    "beyond_horizon",  # not admitted within the horizon (or the cycle bound) of the forecast
    "budget",          # held by a spent budget (DESIGN §3 rule 9) until someone approves it
    "approval",        # pending approval: not in the queue yet (the service says so)
)


@dataclass(frozen=True)
class Forecast:
    now: datetime
    starts: dict[str, datetime] = field(default_factory=dict)
    unknown: dict[str, str] = field(default_factory=dict)  # job id -> reason (UNKNOWN)
    cycles: int = 0
    horizon: datetime | None = None
    # Preemption victims of the forecast, requeued as the service requeues them: when each is
    # estimated to start again (a victim not restarted within the forecast is left out).
    restarts: dict[str, datetime] = field(default_factory=dict)


def forecast(snapshot: Snapshot, *, horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
             max_cycles: int = DEFAULT_MAX_CYCLES, extra: Iterable[QueuedJob] = (),
             requeue: Mapping[str, QueuedJob] | None = None,
             fragmentation_aware: bool = True, backfill: bool = True, borrowing: bool = True) -> Forecast:
    """Estimated start of every queued job of ``snapshot`` (and of ``extra``, hypothetical jobs
    added to the queue — the submission form's "if you submitted this now").

    ``requeue``: the running jobs of the snapshot as the queue would list them again after a
    preemption (``jobs.scheduling.snapshot.build_forecast_input``); a victim without one is not requeued.
    A job the forecast itself admitted is requeued as it was queued."""
    extra = tuple(extra)
    if extra:
        snapshot = replace(snapshot, queued=snapshot.queued + extra)  # every other field as it is
    engine = Engine(snapshot, fragmentation_aware=fragmentation_aware, backfill=backfill, borrowing=borrowing)
    run = _Run(snapshot, horizon_seconds, requeue or {}, engine)
    while True:
        run.cycle()
        if run.waiting <= run.held or run.cycles >= max_cycles:
            break
        if not run.advance():
            break
    return run.result(max_cycles)


class _Run:
    """One forecast: the engine, the virtual clock and the events still to come.

    An event is ``(virtual time, job id, run)``: a job reaching its limit, or a victim exiting
    its grace period. ``run`` counts a job's admissions: a victim requeued and started again
    has a later run, so the end of its first run (still in the heap) is stale and skipped."""

    def __init__(self, snapshot: Snapshot, horizon_seconds: float, requeue: Mapping[str, QueuedJob],
                 engine: Engine):
        self.now, self.t0 = snapshot.now, snapshot.now.timestamp()
        self.t = self.t0
        self.horizon = self.t0 + horizon_seconds
        self.engine = engine
        self.queued_as = {**requeue, **{q.id: q for q in snapshot.queued}}
        self.estimated = {q.id for q in snapshot.queued}  # whose first start the forecast is for
        self.limits = {q.id: q.max_runtime_seconds for q in snapshot.queued}
        self.accepts = {q.id: q.flavors or (q.flavor,) for q in snapshot.queued}
        self.waiting = set(self.limits)  # queued now, or requeued victims
        self.flavor_of = {r.id: r.flavor for r in snapshot.running}
        self.starts: dict[str, float] = {}
        self.restarts: dict[str, float] = {}
        self.runs: dict[str, int] = {}
        self.exiting: set[str] = set()  # victims whose next event is their exit
        self.events: list[tuple[float, str, int]] = []
        self.held: set[str] = set()
        self.cycles = 0
        for r in snapshot.running:
            if not r.terminating and r.max_runtime_seconds is not None:
                self.events.append((max(self.t0, r.started_at.timestamp() + r.max_runtime_seconds), r.id, 0))
        for r in engine.state.terminating.values():
            self.events.append((max(self.t0, r.ghost_until), r.id, 0))
            self.exiting.add(r.id)
        heapq.heapify(self.events)

    def cycle(self) -> None:
        result = self.engine.cycle(_at(self.now, self.t0, self.t))
        self.cycles += 1
        self.held = set(result.held)
        exits = {}
        for vid, victim in self.engine.state.terminating.items():
            if vid not in self.exiting:
                self.exiting.add(vid)
                self.runs[vid] = self.runs.get(vid, 0) + 1  # its end as planned will not come
                exits[vid] = max(self.t, victim.ghost_until)
                heapq.heappush(self.events, (exits[vid], vid, self.runs[vid]))
        for a in result.admissions:
            begin = max([self.t] + [exits.get(v, self.t) for v in a.preempts])
            if a.job_id in self.estimated and a.job_id not in self.starts:
                self.starts[a.job_id] = begin
            else:
                self.restarts[a.job_id] = begin  # a victim started again
            self.waiting.discard(a.job_id)
            self.flavor_of[a.job_id] = a.flavor
            self.runs[a.job_id] = run = self.runs.get(a.job_id, 0) + 1
            if self.limits.get(a.job_id) is not None:
                heapq.heappush(self.events, (begin + self.limits[a.job_id], a.job_id, run))

    def advance(self) -> bool:
        """Move the clock to the next event that can change a decision (ends on a flavor no
        waiting job accepts admit nothing: they are finished with it, without a cycle of their
        own — same decisions, fewer cycles). False: nothing more happens within the horizon."""
        wanted = {f for jid in self.waiting for f in self.accepts[jid]}
        ended, requeued, matters = [], [], False
        while self.events and self.events[0][0] <= self.horizon and not matters:
            self.t = self.events[0][0]
            while self.events and self.events[0][0] <= self.t:
                _, jid, run = heapq.heappop(self.events)
                if run != self.runs.get(jid, 0):
                    continue  # the end of a run that was preempted
                ended.append(jid)
                matters = matters or self.flavor_of.get(jid) in wanted
                if jid in self.exiting:
                    self.exiting.discard(jid)
                    again = self.queued_as.get(jid)
                    if again is not None:  # the service requeues a victim once it has exited
                        requeued.append(again)
                        matters = True
        self.engine.finish(ended)
        self.engine.submit(requeued)
        for q in requeued:
            self.waiting.add(q.id)
            self.limits[q.id] = q.max_runtime_seconds
            self.accepts[q.id] = q.flavors or (q.flavor,)
        return matters

    def result(self, max_cycles: int) -> Forecast:
        # Flavors on which something still ends (the end of a preempted run does not count).
        ending = {self.flavor_of.get(e) for _, e, run in self.events if run == self.runs.get(e, 0)}
        unknown = {}
        for jid in self.waiting & self.estimated:
            if jid in self.starts:
                continue  # started, then preempted: its start is the first one
            if jid in self.held:
                unknown[jid] = "budget"
            elif self.cycles >= max_cycles or any(f in ending for f in self.accepts[jid]):
                unknown[jid] = "beyond_horizon"  # something it may wait for ends, but later
            else:
                unknown[jid] = "unlimited"  # nothing it may wait for ever ends

        def at(t: float) -> datetime:
            return _at(self.now, self.t0, t)

        return Forecast(self.now, {jid: at(s) for jid, s in self.starts.items()}, unknown, self.cycles,
                        at(self.horizon), {jid: at(s) for jid, s in self.restarts.items()})


def _at(now: datetime, t0: float, t: float) -> datetime:
    return now + timedelta(seconds=t - t0)
