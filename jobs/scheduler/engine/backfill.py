"""EASY backfill (DESIGN §5.2): one reservation per priority level, honoured by later jobs.

The head job of a level (the first one there that waits for capacity or placement) gets the
earliest time ``T`` at which it fits, from the per-GPU busy-until index
(:mod:`jobs.scheduler.engine.timeline`): running jobs end at ``started + max_runtime`` (no max runtime =
never), terminating victims at ``now + grace``, earlier reservations hold their GPUs until they
end. Its GPUs at ``T`` that are free now are *blocked* now: exactly what a job outlasting ``T``
must leave alone (GPUs still busy now are freed by ``T`` by definition).
A later job that ends by ``T`` (``now + max_runtime <= T``) may use the blocked GPUs — it is
gone before the reservation starts; a job without ``max_runtime`` never may. Reservations are
physical only (quota is re-checked when the head's turn comes) and last one cycle.

A head that could run only on loan (a borrower, DESIGN §3 rule 4) holds a reservation against
other borrowers and jobs of lower priority, but never against an in-quota job (``Res.loan``):
that job could reclaim the borrower the moment it started (rule 5), so holding it back only
makes the owner of the quota wait for the borrower's sake. That was the lend-limit anomaly of
issue 34: with a lend limit, the lender's idle GPUs stayed free, a borrowing head reserved them,
and the lender's own in-quota jobs queued behind that reservation (docs/scheduling.md).
"""

from __future__ import annotations

from datetime import timedelta

from jobs.scheduler.engine.model import Reservation
from jobs.scheduler.engine.pool import FULL, Pool
from jobs.scheduler.engine.state import Pending
from jobs.scheduler.placement import plan_at


class Res:
    __slots__ = ("job_id", "flavor", "start", "end", "slots", "need", "applied", "nodes",
                 "need_res", "applied_res", "loan")

    def __init__(self, job_id, flavor, start, end, slots, need, applied, nodes):
        self.job_id = job_id
        self.flavor = flavor
        self.start = start
        self.end = end
        self.slots = slots
        self.need = need  # (node, gpu) -> milli that must stay free from now until start
        self.applied = applied  # (node, gpu) -> milli blocked on the pool right now
        self.nodes = nodes
        # The same for CPU, memory and disk (DESIGN §15): node -> (cpu, memory, disk). A job
        # running past ``start`` on the node's other GPUs must not take what the head will need.
        self.need_res: dict[int, list[int]] = {}
        self.applied_res: dict[int, tuple[int, int, int]] = {}
        self.loan = False  # its head could run only on loan: in-quota jobs pass it (module doc)

    def lift(self, pool: Pool) -> None:
        for (i, g), amount in self.applied.items():
            if amount:
                pool.release(i, g, amount)
        for i, held in self.applied_res.items():
            pool.take(i, held, -1)

    def reapply(self, pool: Pool, taken: dict[tuple[int, int], int], taken_res=None) -> None:
        """Block again; GPUs (and CPU, memory, disk) a short job took are given back by
        ``start``, so need less now."""
        used = pool.used
        for key, need in self.need.items():
            if taken and key in taken:
                need -= taken[key]
                if need < 0:
                    need = 0
                self.need[key] = need
            i, g = key
            room = FULL - used[i][g]
            amount = need if need < room else room
            self.applied[key] = amount
            if amount:
                pool.occupy(i, g, amount)
        self.apply_res(pool, taken_res)

    def apply_res(self, pool: Pool, taken_res=None) -> None:
        """Block the CPU, memory and disk the head needs that are free now (less what a short
        job that ends before ``start`` took: it gives them back by then)."""
        for i, need in self.need_res.items():
            got = (taken_res or {}).get(i)
            if got:
                for d in range(3):
                    need[d] = max(0, need[d] - got[d])
            free = pool.res[i]
            held = tuple([(n if n < f else f) if n > 0 and f > 0 else 0
                          for n, f in zip(need, free, strict=True)])
            self.applied_res[i] = held
            pool.take(i, held)

    def held_res(self) -> tuple:
        return tuple((i, held) for i, held in self.applied_res.items() if any(held))

    def public(self, state) -> Reservation:
        at = state.now_dt + timedelta(seconds=self.start - state.now)
        return Reservation(self.job_id, self.flavor, self.nodes, at)


def passes(r: Res, limit: float, in_quota: bool) -> bool:
    """May a job that ends at ``limit`` (in quota or not) use the GPUs ``r`` blocks?"""
    return limit <= r.start or (in_quota and r.loan)


def short_within(cycle, flavor: str, runtime: float, in_quota: bool = False) -> bool:
    """Would a job of ``runtime`` seconds end before some reservation of ``flavor`` starts (or,
    in quota, is some reservation a borrower's)?"""
    limit = cycle.s.now + runtime
    return any(passes(r, limit, in_quota) for r in cycle.res_by_flavor.get(flavor, ()))


def lifted_fits(cycle, flavor: str, runtime: float, workers: int, milli: float,
                in_quota: bool = False) -> bool:
    """Cheap necessary test: could ``workers`` × ``milli`` be placed once the reservations that
    a job of ``runtime`` (in quota or not) may pass no longer are blocked?"""
    limit = cycle.s.now + runtime
    which = tuple(k for k, r in enumerate(cycle.res_by_flavor.get(flavor, ())) if passes(r, limit, in_quota))
    if not which:
        return False
    pool = cycle.s.pools[flavor]
    key = (flavor, which, workers, milli)
    hit = cycle.lift_cache.get(key)
    if hit is not None and hit[0] == pool.version:
        return hit[1]
    ok = _lifted_fits(cycle.res_by_flavor[flavor], which, pool, workers, milli)
    cycle.lift_cache[key] = (pool.version, ok)
    return ok


def _lifted_fits(reservations, which, pool: Pool, workers: int, milli: float) -> bool:
    lifted: dict[tuple[int, int], int] = {}
    lifted_res: dict[int, list[int]] = {}
    for k in which:
        for key, amount in reservations[k].applied.items():
            if amount:
                lifted[key] = lifted.get(key, 0) + amount
        for i, held in reservations[k].applied_res.items():
            if i in lifted_res:
                row = lifted_res[i]
            else:
                row = lifted_res[i] = [0, 0, 0]
            row[0] += held[0]
            row[1] += held[1]
            row[2] += held[2]
    used = pool.used
    if milli < FULL:
        return pool.max_shared_free() >= milli or any(
            FULL - used[i][g] + a >= milli for (i, g), a in lifted.items())
    g = int(milli) // FULL
    gain: dict[int, int] = {}
    for (i, x), a in lifted.items():
        if used[i][x] == a:  # only the blocks sit on this GPU: it is whole once lifted
            gain[i] = gain.get(i, 0) + 1
    for i in lifted_res:
        gain.setdefault(i, 0)
    free = pool.free
    after = {i: pool.usable_if(i, k, lifted_res.get(i)) for i, k in gain.items()}
    if pool.chist is None:
        extra = sum(after[i] // g - free[i] // g for i in gain)
        return pool.whole_capacity(g) + extra >= workers
    caps = list(pool.cluster_capacities(g))  # a gang runs inside one cluster
    for i in gain:
        caps[pool.cluster_of[i]] += after[i] // g - free[i] // g
    return max(caps) >= workers


def short_for(cycle, p: Pending, in_quota: bool = False) -> bool:
    """Might ``p`` backfill onto blocked GPUs of reservations it may pass (:func:`passes`)?"""
    return lifted_fits(cycle, p.flavor, p.runtime, p.min_workers, p.pmilli, in_quota)


def admit_short(cycle, p: Pending, in_quota: bool = False) -> bool:
    """Backfill a job onto the blocked GPUs of the reservations it may pass: those it ends
    before, and, ``in_quota``, borrowers' (in the in-quota pass a borrower is promised its
    room, as in ``Cycle.admit_now``)."""
    if not short_for(cycle, p, in_quota):
        return False
    limit = cycle.s.now + p.runtime
    lifted = [r for r in cycle.res_by_flavor.get(p.flavor, ()) if passes(r, limit, in_quota)]
    pool = cycle.s.pools[p.flavor]
    for r in lifted:
        r.lift(pool)
    w_in, w_all = cycle.grant(p)
    promised = cycle.lending and w_all > w_in and w_all >= p.min_workers
    w = w_in if cycle.lending else max(w_in, w_all)
    placement = None
    if promised:
        cycle.tent.promise(p, w_all * p.milli)
    elif w >= p.min_workers:
        placement = cycle.place(p, w)
    taken: dict[tuple[int, int], int] = {}
    taken_res: dict[int, list[int]] = {}
    if placement is not None:
        run = cycle.admit(p, w, placement, ())
        for i, g, m in run.slots:
            taken[(i, g)] = taken.get((i, g), 0) + m
        for i, req in run.res:
            row = taken_res.get(i)
            if row is None:
                row = taken_res[i] = [0, 0, 0]
            row[0] += req[0]
            row[1] += req[1]
            row[2] += req[2]
    for r in lifted:
        r.reapply(pool, taken, taken_res)
    return promised or placement is not None


def reserve(cycle, p: Pending) -> None:
    """Give the level head ``p`` its reservation (if it can ever fit) and block its GPUs.

    A shared-GPU head is planned as if it needed its GPU whole (conservative: it may start
    earlier on a partly used GPU, never later)."""
    s = cycle.s
    pool, timeline = s.pools[p.flavor], s.timelines[p.flavor]
    g = max(1, p.pmilli // FULL)  # its footprint on the nodes (its GPUs, or more: docs/resources.md)
    # Nodes below its CUDA version are never its (DESIGN §15): reserving them would block GPUs
    # it cannot use, and start it no earlier.
    # So are nodes a reservation or maintenance bars to it over its runtime (DESIGN §17).
    skip = frozenset(s.skipped(p, pool))
    # The timeline does not know what a reserved count of another project holds: a head that
    # such a count holds back is planned from the end of that window (conservative: it may
    # start earlier, never later), so its reservation never takes the owner's GPUs now.
    after = s.windows.held_until(p.project_id, p.runtime, p.flavor, s.now,
                                 lambda pid: s.used_by(pid, p.flavor)) if s.windows else None
    start = timeline.earliest(p.min_workers, g, max(s.now, after or s.now), skip)
    if start is None:
        return
    placement = plan_at(pool, timeline.caps_at(start, g, skip), lambda i: timeline.gpus_at(i, start),
                        p.min_workers, g, frag=cycle.frag)
    if placement is None:
        return
    milli = min(p.milli, FULL)
    need: dict[tuple[int, int], int] = {}
    applied: dict[tuple[int, int], int] = {}
    for worker in placement:
        for i, x, _ in worker:
            # Free at ``start``: what is used now is released by then, the rest must stay free.
            used = pool.used[i][x]
            need[(i, x)] = n = max(0, milli - used)
            applied[(i, x)] = a = min(n, FULL - used)
            if a:
                pool.occupy(i, x, a)
    slots = tuple((i, x, milli) for worker in placement for i, x, _ in worker)
    nodes = tuple(sorted({pool.ids[i] for i, _, _ in slots}))
    res = Res(p.id, p.flavor, start, start + p.runtime, slots, need, applied, nodes)
    res.loan = cycle.gate(p.flavor, p.path, p.min_workers * p.milli)[0] == "loan"
    if p.req is not None and pool.res is not None:
        for worker in placement:
            i = worker[0][0]
            row = res.need_res.setdefault(i, [0, 0, 0])
            for d in range(3):
                row[d] += p.req[d]
        res.apply_res(pool)  # the GPUs are blocked above
    timeline.track(("res", res.job_id), slots, res.end, res.held_res())
    cycle.reservations.append(res)
    cycle.res_by_flavor.setdefault(p.flavor, []).append(res)
