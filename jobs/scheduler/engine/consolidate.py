"""Consolidation (issue 36 item 2, docs/scheduling.md *Consolidation*): when a gang's only
obstacle is fragmentation — its quota rules pass and there are enough free GPUs of its flavor in
total, but no node set takes its workers — move the fewest small checkpointing jobs out of its
way. The moved jobs are preempted with reason ``"consolidate"`` (the grace period lets them save a
checkpoint), requeued by the service, and resume from that checkpoint.

A job may be moved only when all of these hold (:func:`movable`):

* it is preemptible, checkpointing (``RunningJob.checkpointing``), not pinned, not terminating,
  not admitted in this cycle, not elastic, and on one node;
* it is small: at most ``Consolidation.max_job_gpus`` GPUs;
* it has run its priority class's minimum runtime (:meth:`State.exempt`);
* its priority is not above the gang's;
* it sits on no GPU a reservation of this cycle counts on (``preempt._reserved``).

And the set as a whole: at most the moves left in the centre's hourly budget
(``Consolidation.max_moves_per_hour`` minus the moves of the last hour), no more GPUs moved than
the gang gets, and every moved job has a place of its own again once the gang is placed
(:func:`_replaced`). The last rule is what keeps a move within DESIGN §3: a move is not a
reclaim, so a job of another tenant — in-quota or not — is moved only when it can start again at
once on other GPUs; it loses its restart, never its place.

The search (:func:`_search`): per node, jobs are taken greedily (the one that frees the most
usable GPUs first) to get a curve "t jobs moved → k more workers fit here"; per cluster a small
knapsack picks the cheapest combination of nodes for the workers missing, and the cluster with
the fewest moves wins. The live state then confirms the fit and gives back every job the gang
turns out not to need (``minimal_victim_set``).
"""

from __future__ import annotations

from jobs.scheduler.engine import preempt
from jobs.scheduler.engine.pool import FULL
from jobs.scheduler.engine.state import Pending, Run
from jobs.scheduler.placement import commit, plan, plan_fits
from quotas.admission import minimal_victim_set

HOUR = 3600.0
REASON = "consolidate"


def budget_left(s) -> int:
    """Moves the hourly budget still allows now."""
    pol = s.consolidation
    if pol is None:
        return 0
    since = s.now - HOUR
    moves = s.moves  # in time order: the snapshot's, then the engine's own as they are made
    if moves and moves[0] <= since:  # a warm engine forgets what the hour no longer counts
        s.moves = moves = [t for t in moves if t > since]
    return max(0, pol.max_moves_per_hour - len(moves))


def applies(s, p: Pending) -> bool:
    """Is ``p`` a gang consolidation may help (cheap; the pass-over tests ask it)?"""
    pol = s.consolidation
    return pol is not None and p.milli >= FULL and p.pmilli >= FULL \
        and p.min_workers * p.milli >= pol.min_gang_gpus * FULL and budget_left(s) > 0


def _key(cycle, p: Pending, mode: str) -> tuple | None:
    """What a failed search depends on besides the state, when the pool ``p`` plans on is the
    live one (no window, no CUDA floor); None: not cached."""
    if cycle.s.windows or p.min_cuda:
        return None
    loan_path = p.path if mode == "loan" else None  # a borrower's room depends on its path
    return (p.flavor, p.pmilli, p.min_workers, p.priority, mode, p.runtime, loan_path)


def failed(cycle, p: Pending, mode: str) -> bool:
    """Did a search for the same shape fail earlier in this cycle? Within a cycle free GPUs,
    candidates, the budget and the room to re-place only shrink, except when a preemption gives
    quota back (``cycle.loosen``), so the answer stands until then (cycle.py's pass-over)."""
    key = _key(cycle, p, mode)
    return key is not None and cycle.no_consolidate.get(key) == cycle.loosen


def movable(cycle, v: Run, p: Pending, reserved: set) -> bool:
    s = cycle.s
    return (v.preemptible and not v.pinned and not v.terminating and not v.fresh
            and v.saved is None and v.base is None and not v.units and not v.workers
            and v.priority <= p.priority and v.root_r <= s.consolidation.max_job_gpus * FULL
            and len({i for i, _, _ in v.slots}) == 1 and not s.exempt(v)
            and not (reserved and preempt._on(v, reserved)))


def consolidate(cycle, p: Pending, mode: str) -> bool:
    """Admit ``p`` after moving jobs out of its way; False (state untouched) when it cannot."""
    if not applies(cycle.s, p) or failed(cycle, p, mode):
        return False
    if _consolidate(cycle, p, mode):
        return True
    key = _key(cycle, p, mode)
    if key is not None:
        cycle.no_consolidate[key] = cycle.loosen
    return False


def _consolidate(cycle, p: Pending, mode: str) -> bool:
    s = cycle.s
    ledger = s.ledgers[p.flavor]
    need = p.min_workers * p.milli
    root = ledger.root_room()
    if mode == "loan":
        root -= cycle.tent.root_taken(p.flavor) + ledger.sibling_hold(p.path)
    if need > root:
        return False  # not enough free GPUs in total: not a fragmentation problem
    reserved = preempt._reserved(cycle, p, in_quota=mode == "in")
    cands = [v for runs in _runs_of(s, p.flavor) for v in runs if movable(cycle, v, p, reserved)]
    if not cands:
        return False
    chosen = _search(s.placeable(p), p, cands, budget_left(s))
    if not chosen:
        return False

    def fits() -> bool:
        return plan_fits(s.placeable(p), p.min_workers, p.pmilli)
    victims = minimal_victim_set(chosen, s.lift, s.unlift, fits)
    if not victims:  # None: the paper search was wrong; []: it fits with nobody moved
        return False
    if sum(v.root_r for v in victims) > need or not _replaced(cycle, p, victims):
        for v in victims:
            s.unlift(v)
        return False
    if not preempt._admit_over(cycle, p, victims, REASON):
        return False
    s.moves.extend([s.now] * len(victims))
    cycle.moved[p.id] = tuple(v.id for v in victims)
    return True


def _runs_of(s, flavor: str):
    return (runs.values() for (_, f), runs in s.by_proj.items() if f == flavor)


def _search(pool, p: Pending, cands: list[Run], budget: int) -> list[Run]:
    """The fewest ``cands`` (at most ``budget``) whose GPUs, given back, let ``p``'s gang fit in
    one cluster; [] when none does. Ordered node by node."""
    g = p.pmilli // FULL
    w = p.min_workers
    by_node: dict[int, list[Run]] = {}
    for v in cands:
        by_node.setdefault(v.slots[0][0], []).append(v)
    caps = list(pool.cluster_capacities(g))
    best: list[Run] = []
    for c in range(len(caps)):
        missing = w - caps[c]
        if missing <= 0:
            continue  # a plain plan would have fitted (not fragmentation in this cluster)
        curves = [(i, _curve(pool, i, vs, g, missing)) for i, vs in by_node.items()
                  if pool.cluster_of[i] == c]
        picked = _knapsack(curves, missing, budget if not best else min(budget, len(best) - 1))
        if picked is not None:
            best = picked
    return best


def _curve(pool, i: int, vs: list[Run], g: int, cap: int) -> list[tuple[int, Run]]:
    """Greedy on node ``i``: the job that frees the most usable GPUs next (then the smallest,
    then the id). Returns (workers gained so far, job) per step, stopping at ``cap`` workers or
    when nothing is left."""
    room = preempt._Room(pool, g * FULL)
    base = pool.free[i] // g
    left = sorted(vs, key=lambda v: (v.root_r, v.id))
    out: list[tuple[int, Run]] = []
    gained = 0
    while left and gained < cap:
        top, pick = -1, None
        for v in left:
            room.free_slots(v.slots, v.res)
            got = room.free.get(i, pool.free[i])
            room.refill(v.slots, v.res)
            if got > top:
                top, pick = got, v
        left.remove(pick)
        room.free_slots(pick.slots, pick.res)
        gained = min(cap, room.free.get(i, pool.free[i]) // g - base)
        out.append((gained, pick))
    return out


def _knapsack(curves, missing: int, budget: int) -> list[Run] | None:
    """Fewest jobs over the nodes' curves gaining ``missing`` workers (exact over the curves),
    within ``budget`` jobs; None when no combination does."""
    if budget <= 0:
        return None
    inf = budget + 1
    cost = [0] + [inf] * missing  # cost[k]: fewest jobs for k workers gained
    pick: list[tuple] = [()] + [()] * missing  # (node, steps) choices behind cost[k]
    for i, curve in curves:
        new_cost, new_pick = cost[:], pick[:]
        for k in range(missing + 1):
            if cost[k] >= inf:
                continue
            for t, (gained, _) in enumerate(curve, start=1):
                if not gained:
                    continue
                k2 = min(missing, k + gained)
                if cost[k] + t < new_cost[k2]:
                    new_cost[k2] = cost[k] + t
                    new_pick[k2] = pick[k] + ((i, t),)
        cost, pick = new_cost, new_pick
    if cost[missing] > budget:
        return None
    steps = dict(pick[missing])
    return [v for i, curve in curves if i in steps for _, v in curve[:steps[i]]]


def _replaced(cycle, p: Pending, victims: list[Run]) -> bool:
    """With ``victims`` lifted: once ``p`` is placed, has every victim a place again (on GPUs
    ``p`` does not take)? On a copy of the pool; the live state is untouched."""
    s = cycle.s
    pool = s.placeable(p)
    gang = plan(pool, p.min_workers, p.pmilli, frag=cycle.frag)
    if gang is None:
        return False
    twin = s.pools[p.flavor].clone()
    commit(twin, gang)
    for v in sorted(victims, key=lambda v: (-v.root_r, v.id)):
        milli = v.root_r
        spot = plan(twin, 1, milli, frag=cycle.frag, req=v.req if milli < FULL else None)
        if spot is None:
            return False
        commit(twin, spot)
    return True
