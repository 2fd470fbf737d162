"""When each GPU of a flavor becomes free: the index EASY backfill plans reservations with.

It knows everything occupying a GPU and until when (live jobs until ``started +
max_runtime``, terminating victims until ``now + grace``, reservations until their end) and
keeps per node the sorted busy-until times, rebuilt lazily for the nodes that changed. A GPU
with usage but nothing tracked on it (``Node.external_milli``) is busy forever.

Earliest start of ``w`` workers of ``g`` whole GPUs: node ``i`` hosts ``k`` workers from its
``(k·g)``-th smallest busy-until time on, so the start is the ``w``-th smallest of those times
over the nodes of one cluster (a gang runs inside one), the earliest over the clusters —
O(nodes), no replay of every job ending.

With CPU, memory and disk (DESIGN §15; ``pool.res``), a node's row holds instead when each of its
*usable* units comes free: an occupant gives back its CPU, memory and disk at its end too, and a
unit counts once the node has a free GPU and its share of each dimension for it — the same rule
as the pool's indexes (:mod:`jobs.scheduler.engine.pool`), so a reservation is planned on GPUs its
job can feed.
"""

from __future__ import annotations

from bisect import bisect_right
from heapq import nsmallest

NEVER = float("inf")


class Timeline:
    """Occupants (jobs, victims in grace, reservations) are registered per node they touch, so
    an admission costs one dict insert per node, and a node's busy-until times are rebuilt
    only when a reservation is planned after it changed."""

    __slots__ = ("pool", "occ", "times", "dirty")

    def __init__(self, pool) -> None:
        self.pool = pool
        self.occ: list[dict] = [{} for _ in pool.ids]
        self.times: list[list[float] | None] = [None] * len(pool.ids)
        self.dirty: set[int] = set(range(len(pool.ids)))

    def track(self, key, slots, until: float, res=()) -> None:
        """``res``: (node index, (cpu, memory, disk)) the occupant holds until ``until`` too."""
        occ, dirty, last = self.occ, self.dirty, -1
        per = _per_node(res) if res else None
        for i, _, _ in slots:
            if i != last:  # slots come grouped by node; a repeat only rewrites the same entry
                occ[i][key] = (slots, until, per[i] if per and i in per else None)
                dirty.add(i)
                last = i
        if per:
            for i in per:
                if key not in occ[i]:  # CPU, memory or disk on a node where it holds no GPU
                    occ[i][key] = ((), until, per[i])
                    dirty.add(i)

    def untrack(self, key, slots, res=()) -> None:
        occ, dirty, last = self.occ, self.dirty, -1
        for i, _, _ in slots:
            if i != last:
                occ[i].pop(key, None)
                dirty.add(i)
                last = i
        for i, _ in res:
            occ[i].pop(key, None)
            dirty.add(i)

    def _busy(self, i: int) -> list[float]:
        """Busy-until per GPU of node ``i``: 0.0 when free (so the cache survives the clock
        moving on), NEVER when used by something not tracked (external usage)."""
        row = [0.0] * len(self.pool.used[i])
        for slots, until, _ in self.occ[i].values():
            for j, x, _ in slots:
                if j == i and until > row[x]:
                    row[x] = until
        for x, u in enumerate(self.pool.used[i]):
            if u and not row[x]:
                row[x] = NEVER
        return row

    def _refresh(self) -> list[list[float] | None]:
        usable = self.pool.res is not None
        for i in self.dirty:
            self.times[i] = self._usable_row(i) if usable else sorted(self._busy(i))
        self.dirty.clear()
        return self.times

    def _usable_row(self, i: int) -> list[float]:
        """When each usable unit of node ``i`` comes free (see the module docstring): free GPUs
        count as they come free, and the node's CPU, memory and disk grow by what each occupant
        holds at its end.

        Both counts only grow with time (occupants hold nothing negative), so the ``j``-th unit
        is usable at the later of when its GPU comes free (``gpus[j]``) and when the node's CPU,
        memory and disk first feed ``j + 1`` units: one pass over the leavers in time order,
        none when what is free now already feeds every GPU. No calls in the loop: this runs
        for every changed node before a reservation is planned."""
        pool = self.pool
        occ = self.occ[i].values()
        used = pool.used[i]
        units = len(used)
        gpus = [0.0] * units  # _busy(i), inlined
        for slots, until, _ in occ:
            for j, x, _ in slots:
                if j == i and until > gpus[x]:
                    gpus[x] = until
        for x in range(units):
            if used[x] and not gpus[x]:
                gpus[x] = NEVER
        gpus.sort()
        dims = pool.rdims[i]
        free = pool.res[i]
        j = units
        for d, s in dims:  # units what is free now feeds (as Pool._usable)
            q = free[d] // s if s else 0
            if q < j:
                j = q
        if j >= units:
            return gpus
        if j < 0:
            j = 0
        free = free[:]
        leaving = [(until, held) for _, until, held in occ if held]
        leaving.sort()
        for until, held in leaving:
            free[0] += held[0]
            free[1] += held[1]
            free[2] += held[2]
            fed = units
            for d, s in dims:
                q = free[d] // s if s else 0
                if q < fed:
                    fed = q
            while j < fed:
                if gpus[j] < until:
                    gpus[j] = until
                j += 1
            if j >= units:
                return gpus
        gpus[j:] = [NEVER] * (units - j)
        return gpus

    def earliest(self, workers: int, g: int, now: float, skip: frozenset = frozenset()) -> float | None:
        """Earliest time ``workers`` × ``g`` whole GPUs are free (None: never), on nodes not in
        ``skip`` (those a job must never use: below its CUDA version)."""
        times = self._refresh()
        if skip:
            times = [[] if i in skip else row for i, row in enumerate(times)]
        pool = self.pool
        if pool.chist is None:
            t = _wth(workers, g, pool.maxg, times)
        else:  # per cluster: a gang never spans two
            per: list[list] = [[] for _ in pool.clusters]
            for i, row in enumerate(times):
                per[pool.cluster_of[i]].append(row)
            t = min(_wth(workers, g, pool.maxg, rows) for rows in per)
        return None if t == NEVER else max(t, now)

    def caps_at(self, t: float, g: int, skip: frozenset = frozenset()) -> dict[int, int]:
        """Workers of ``g`` GPUs each node (not in ``skip``) can host at time ``t``."""
        k = g - 1
        caps = {i: bisect_right(row, t) // g for i, row in enumerate(self.times)
                if len(row) > k and row[k] <= t}
        for i in skip:
            caps.pop(i, None)
        return caps

    def gpus_at(self, i: int, t: float) -> list[int]:
        """GPU indices of node ``i`` free at time ``t``, lowest first."""
        return [x for x, busy in enumerate(self._busy(i)) if busy <= t]


def _wth(workers: int, g: int, maxg: int, times) -> float:
    """When ``workers`` × ``g`` GPUs are free on the nodes of ``times`` (NEVER: not at all)."""
    if 2 * g > maxg:  # one worker per node at most
        vals = [row[g - 1] for row in times if len(row) >= g]
    else:
        vals = [row[k] for row in times for k in range(g - 1, len(row), g)]
    if len(vals) < workers:
        return NEVER
    return nsmallest(workers, vals)[-1]


def _per_node(res) -> dict[int, tuple[int, int, int]]:
    """What ``res`` holds per node (one worker's request as it is; several on a node summed)."""
    per: dict[int, tuple[int, int, int]] = {}
    for i, req in res:
        if i in per:
            row = per[i]
            per[i] = (row[0] + req[0], row[1] + req[1], row[2] + req[2])
        else:
            per[i] = req
    return per
