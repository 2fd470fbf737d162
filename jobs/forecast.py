"""When will a waiting job start (issue 24): the production engine run forward, like ``squeue --start``.

Pure: no Django. Fed the same frozen :class:`~jobs.engine.model.Snapshot` a cycle uses; every
decision is :class:`jobs.scheduler.Engine`'s — this module only moves a virtual clock::

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
  not queued again (it would only wait behind the jobs estimated here).
* the first cycle runs at ``now`` (what the next real cycle would decide); then one cycle at
  every virtual time something ends, as the service runs one on every finish.

A job admitted by preemption starts when its victims have exited: its estimate is that time.
Cost: one engine cycle per distinct end time on a flavor some waiting job accepts (an end
elsewhere can admit nothing), at most ``max_cycles`` (then the rest are ``beyond_horizon``),
so the caller bounds it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from jobs.scheduler import Engine, QueuedJob, Snapshot

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


def forecast(snapshot: Snapshot, *, horizon_seconds: float = DEFAULT_HORIZON_SECONDS,
             max_cycles: int = DEFAULT_MAX_CYCLES, extra: Iterable[QueuedJob] = (),
             fragmentation_aware: bool = True, backfill: bool = True, borrowing: bool = True) -> Forecast:
    """Estimated start of every queued job of ``snapshot`` (and of ``extra``, hypothetical jobs
    added to the queue — the submission form's "if you submitted this now")."""
    extra = tuple(extra)
    if extra:
        snapshot = replace(snapshot, queued=snapshot.queued + extra)  # every other field as it is
    now = snapshot.now
    t0 = now.timestamp()
    horizon = t0 + horizon_seconds
    engine = Engine(snapshot, fragmentation_aware=fragmentation_aware, backfill=backfill, borrowing=borrowing)
    limits = {q.id: q.max_runtime_seconds for q in snapshot.queued}
    accepts = {q.id: q.flavors or (q.flavor,) for q in snapshot.queued}
    waiting = set(limits)
    flavor_of = {r.id: r.flavor for r in snapshot.running}
    starts: dict[str, float] = {}
    events: list[tuple[float, str]] = []  # (virtual time a job ends or a victim exits, id)
    for r in snapshot.running:
        if not r.terminating and r.max_runtime_seconds is not None:
            events.append((max(t0, r.started_at.timestamp() + r.max_runtime_seconds), r.id))
    seen_victims = set()
    for r in engine.state.terminating.values():
        events.append((max(t0, r.ghost_until), r.id))
        seen_victims.add(r.id)
    heapq.heapify(events)

    held: tuple[str, ...] = ()
    cycles = 0
    t = t0
    while True:
        result = engine.cycle(_at(now, t0, t))
        cycles += 1
        held = result.held
        exits = {}
        for vid, run in engine.state.terminating.items():
            if vid not in seen_victims:
                seen_victims.add(vid)
                exits[vid] = max(t, run.ghost_until)
                heapq.heappush(events, (exits[vid], vid))
        for a in result.admissions:
            begin = max([t] + [exits.get(v, t) for v in a.preempts])
            starts[a.job_id] = begin
            waiting.discard(a.job_id)
            flavor_of[a.job_id] = a.flavor
            if limits.get(a.job_id) is not None:
                heapq.heappush(events, (begin + limits[a.job_id], a.job_id))
        if waiting <= set(held) or cycles >= max_cycles:
            break
        # What ends on a flavor no waiting job accepts can admit nothing: it is finished with the
        # next end that matters, without a cycle of its own (same decisions, fewer cycles).
        wanted = {f for jid in waiting for f in accepts[jid]}
        ended, matters = [], False
        while events and events[0][0] <= horizon and not matters:
            t = events[0][0]
            while events and events[0][0] <= t:
                jid = heapq.heappop(events)[1]
                ended.append(jid)
                matters = matters or flavor_of.get(jid) in wanted
        engine.finish(ended)
        if not matters:
            break

    held_set = set(held)
    ending = {flavor_of.get(e) for _, e in events}  # flavors on which something still ends
    unknown = {}
    for jid in waiting:
        if jid in held_set:
            unknown[jid] = "budget"
        elif cycles >= max_cycles or any(f in ending for f in accepts[jid]):
            unknown[jid] = "beyond_horizon"  # something it may wait for ends, but later
        else:
            unknown[jid] = "unlimited"  # nothing it may wait for ever ends
    return Forecast(now, {jid: _at(now, t0, s) for jid, s in starts.items()}, unknown, cycles,
                    _at(now, t0, horizon))


def _at(now: datetime, t0: float, t: float) -> datetime:
    return now + timedelta(seconds=t - t0)
