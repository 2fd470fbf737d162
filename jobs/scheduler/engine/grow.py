"""The grow pass: running elastic jobs scale up (DESIGN §4 "scaled between min and max", §5.4
"start at the largest worker count that fits … and scale up later").

It runs at the end of every cycle, after every priority level and the borrowing phase, so a
growth never takes capacity a queued job could use in this cycle. Beyond that:

* **reservations** of waiting head jobs keep their GPUs blocked on the pool until the cycle
  ends, so no growth lands on them;
* **the queue first**: in a flavor where a queued job of the same or a higher priority passes
  the quota rules but still waits for room, no job of that priority or lower grows — a job that
  already runs at its minimum grows with what nobody in front of it can use. Queued jobs held
  for budget, refused by quota, or larger than the flavor's whole capacity do not hold growth
  back: room would not let them in (nor does a gang larger than every cluster of its flavor:
  a gang runs inside one cluster).

Candidates are running jobs with fewer workers than ``grow_to`` (the target, see
:class:`~jobs.scheduler.engine.model.RunningJob`), not terminating, not admitted in this cycle. They take
turns in the queue's order — priority desc, dominant share (re-read after every growth, so
tenants alternate), submit time, id — and each turn adds ONE worker:

1. quota, the gate of an admission of one worker (§3): in quota when rule 3 holds on the path and
   the job's first workers are in quota; else on loan when borrowing is on and rules 2 and 4
   hold (a cap with ``borrow_limit``, the lend-limit hold-backs of sibling subtrees);
2. placement: one worker on nodes of the job's cluster, near the job (its leaves, then its
   spines) and best fit (:func:`jobs.scheduler.placement.plan_grow`).

A job that fails either step stops growing this cycle. The new worker is a *unit* of the job (a
Run of its own, ``"<job>/<k>"``): rule 1 places it by its grow time, so a unit grown on loan is
what reclaim takes first, and it is taken alone — the job shrinks, the rest of it runs on.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from jobs.scheduler.engine.model import Growth
from jobs.scheduler.engine.pool import FULL
from jobs.scheduler.engine.state import Run
from jobs.scheduler.placement import plan_grow

NONE = -(1 << 62)


def grow(cycle) -> list[Growth]:
    s = cycle.s
    cands = [b for b in s.elastic.values()
             if b.workers < b.grow_to and not b.terminating and not b.fresh]
    cands = [b for b in cands if s.pools[b.flavor].whole_capacity(_footprint(s, b) // FULL) >= 1]
    if not cands:
        return []
    blocked = _waiting_for_room(cycle, {b.flavor for b in cands}, min(b.priority for b in cands))
    heap = [(-b.priority, s.turn(b.proj), b.submitted, b.id, b) for b in cands
            if b.priority > blocked.get(b.flavor, NONE)]
    heapify(heap)
    added: dict[str, tuple[Run, list]] = {}
    while heap:
        prio, share, submitted, bid, b = heappop(heap)
        now = s.turn(b.proj)
        if now != share:  # its share grew since it was queued: a later turn
            heappush(heap, (prio, now, submitted, bid, b))
            continue
        worker = _one_more(cycle, b)
        if worker is None:
            continue
        added.setdefault(b.id, (b, []))[1].append(worker)
        if b.workers < b.grow_to:
            heappush(heap, (prio, s.turn(b.proj), submitted, bid, b))
        else:
            s.elastic.pop(b.id, None)
    return [Growth(b.id, b.workers, tuple(workers)) for b, workers in added.values()]


def _one_more(cycle, b: Run) -> tuple | None:
    """Add one worker to ``b`` if quota and placement allow; the worker's slots (node ids)."""
    s = cycle.s
    ledger, pool = s.ledgers[b.flavor], s.pools[b.flavor]
    d, path = b.wmilli, b.path
    cap = ledger.tree_cap_room(path)
    if d > cap or d > ledger.root_room() or s.grow_capped(b, d):
        return None
    if b.in_quota and d <= ledger.in_quota_room(path):
        in_quota = True
    elif cycle.borrowing and d + ledger.sibling_hold(path) <= ledger.root_room():
        in_quota = False
    else:
        return None
    near = {i for run in (b, *b.units) for i, _, _ in run.slots}
    if not near:
        return None  # every node it runs on is cordoned or down: its cluster is unknown here
    # A reservation or maintenance its new worker would meet bars its room (DESIGN §17).
    placement = plan_grow(s.growable(b, pool), _footprint(s, b) // FULL, near, pool.cluster[min(near)],
                          frag=cycle.frag)
    if placement is None:
        return None
    slots = placement[0][:d // FULL]  # beyond its own GPUs: what its request strands
    nodes = tuple((pool.ids[i], g, m) for i, g, m in slots)
    unit = s.make_unit(b, b.workers, nodes, s.now)
    s.add_run(unit, in_quota)
    s.fair_charge(b.proj, d)
    b.workers += 1
    return nodes


def _waiting_for_room(cycle, flavors: set[str], floor: int) -> dict[str, int]:
    """Per flavor, the highest priority (>= ``floor``) at which a queued job that passes the
    quota rules still waits after the cycle, i.e. waits for room. A job with alternative
    flavors waits for room on each of them."""
    s = cycle.s
    out: dict[str, int] = {}
    for (prio, proj, f), sq in s.queues.items():
        if sq.alt:
            if prio >= floor:
                _alternatives_waiting(cycle, sq, flavors, out)
            continue
        if f not in flavors or prio < floor or prio <= out.get(f, NONE):
            continue
        path = s.tree.path(proj)
        capacity = s.ledgers[f].capacity
        pool = s.pools[f]
        seen: set[int] = set()
        for _, jid, p in sq.jobs:
            if jid in cycle.admitted or jid not in s.pending or s.held(p) or cycle.invalid(p):
                continue
            r = p.min_workers * p.milli
            if r in seen or r > capacity:
                continue
            if pool.chist is not None and p.min_workers > 1 and \
                    pool.largest_cluster(p.pmilli // FULL) < p.min_workers:
                continue  # no one cluster could ever hold this gang
            seen.add(r)
            if cycle.gate(f, path, r)[0] is not None:
                out[f] = prio
                break
    return out


def _alternatives_waiting(cycle, sq, flavors: set[str], out: dict[str, int]) -> None:
    s = cycle.s
    path = s.tree.path(sq.proj)
    for _, jid, p in sq.jobs:
        if jid in cycle.admitted or jid not in s.pending or s.held(p):
            continue
        try:
            for f in p.flavors:
                if f in flavors and sq.priority > out.get(f, NONE):
                    p.flavor = f
                    if _waits_for_room(cycle, p, f, path):
                        out[f] = sq.priority
        finally:
            p.flavor = p.flavors[0]


def _waits_for_room(cycle, p, f: str, path) -> bool:
    if cycle.invalid(p):
        return False
    r = p.min_workers * p.milli
    if r > cycle.s.ledgers[f].capacity:
        return False
    pool = cycle.s.pools[f]
    if pool.chist is not None and p.min_workers > 1 and \
            pool.largest_cluster(p.pmilli // FULL) < p.min_workers:
        return False  # no one cluster could ever hold this gang
    return cycle.gate(f, path, r)[0] is not None


def _footprint(s, b: Run) -> int:
    """One more worker's milli on the nodes: its footprint where it asks more CPU, memory or
    disk than its GPUs' share (docs/resources.md)."""
    return s.pools[b.flavor].demand(b.wmilli, b.req)
