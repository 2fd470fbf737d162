"""Topology- and fragmentation-aware placement (DESIGN §5.3), pure.

Placement works on a :class:`~jobs.scheduler.engine.pool.Pool` (the schedulable nodes of ONE flavor, so
MIG slice flavors only ever land on nodes of that flavor) and returns a *plan*: one tuple of
slots ``(node index, GPU index, milli)`` per worker, or ``None``. Planning never mutates the
pool; :func:`commit` / :func:`uncommit` apply or undo a plan.

Rules:

* a worker's GPUs are all on one node; a gang is all-or-nothing (``None`` when any worker
  cannot be placed) and all its workers are on nodes of ONE cluster (a backend runs a job on
  one cluster: capacity split over two clusters does not host a gang —
  :meth:`~jobs.scheduler.engine.pool.Pool.gang_capacity`, not ``whole_capacity``, says what fits);
* whole-GPU workers only take GPUs with nothing on them; shared requests (``gpu_milli`` < 1000)
  take part of one GPU, and several pack onto one physical GPU;
* ``frag=True`` (fragmentation-aware, the default): gangs go to the fewest leaves, then the
  fewest spines, and inside a leaf onto the fullest nodes that fit; a single worker best-fits
  into the node with the fewest whole free GPUs that still fit, in the leaf with the fewest free
  GPUs, so whole nodes and whole leaves stay free for big gangs; shared requests best-fit onto
  the partly used GPU with the least free milli before breaking a whole GPU;
* ``frag=False`` (plain best-fit, for replay comparisons): every worker independently best-fits
  into the node with the fewest free GPUs (ties: topology order), no leaf or spine awareness;
  shared requests go to the node with the least free milli in total, first GPU that fits; a
  gang's first worker picks the cluster (the best fit among clusters that host the whole gang);
* ``typical=…`` (fragmentation gradient descent, FGD — Weng et al., "Beware of Fragmentation",
  USENIX ATC'23): each worker goes to the node (and GPUs on it) that least increases the node's
  *fragmentation* — the expected free GPU milli the target workload cannot use. ``typical`` is
  that workload: ``(probability, gpus, milli, tag)`` pod shapes (see :func:`frag_amount`,
  :func:`plan_fgd`); a gang is tried in each cluster that can host it and goes where the
  increase is least. Not the scheduler's default (it ignores leaves and spines); packing replays
  and callers that know their pod-size distribution select it. With ``req`` (a worker's CPU,
  memory and disk) on a pool with resources it is resource-aware: GPUs a node's free CPU, memory
  or disk can no longer feed (*stranded*, :func:`usable_after`) count as fragment too;
* stranding in the default placement: a single whole-GPU worker with ``req`` best-fits among the
  nodes it strands no other GPU on (issue 36, docs/scheduling.md "Packing").
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort

from jobs.scheduler.engine.pool import FULL, Pool

__all__ = ["FULL", "Pool", "commit", "fgd_score", "frag_amount", "plan", "plan_at", "plan_fgd", "plan_fits",
           "plan_grow", "uncommit"]

Plan = list[tuple[tuple[int, int, int], ...]]


def plan(pool: Pool, workers: int, milli: int, *, frag: bool = True, typical=None, req=None) -> Plan | None:
    """Place ``workers`` workers of ``milli`` each (a multiple of 1000, or < 1000 shared).
    ``typical`` given: FGD placement (:func:`plan_fgd`) instead of ``frag``. ``req``: a shared
    worker's CPU, memory and disk, which its node must have free (None: its part's share of
    the node's; a whole-GPU worker's are in ``milli``, its footprint: :meth:`Pool.demand`). A single
    whole-GPU worker with ``req`` (``frag``) best-fits among the nodes its request strands no
    other GPU on (:func:`_best_unstranding_node`)."""
    if workers <= 0 or milli <= 0:
        return None
    if typical is not None:
        found = plan_fgd(pool, workers, milli, typical=typical)
        return None if found is None else found[1]
    if milli < FULL:
        if workers != 1:
            return None
        if pool.res is not None:
            return _plan_shared_res(pool, milli, req)
        return _plan_shared(pool, milli, frag)
    if milli % FULL:
        return None
    g = milli // FULL
    if pool.whole_capacity(g) < workers:
        return None
    if workers > 1 and pool.chist is not None and pool.gang_capacity(g) < workers:
        return None  # enough only split across clusters
    if workers == 1:
        i = _best_node(pool, g, frag)
        if frag and req is not None and pool.whole is not None and not _keeps_usable(pool, i, g, req):
            i = _best_unstranding_node(pool, g, req, i)
        return [tuple((i, x, FULL) for x in pool.free_gpus(i, g))]
    if frag:
        return _plan_topology(pool, workers, g)
    return _plan_best_fit(pool, workers, g)


def plan_at(pool: Pool, node_caps: dict[int, int], gpus_of, workers: int, g: int, *,
            frag: bool = True) -> Plan | None:
    """Place a gang on a *future* state given as workers-per-node (``node_caps``) and the GPUs
    free then (``gpus_of(node)``): the same cluster/leaf/spine choice as :func:`plan`, for
    reservations (``None`` when no one cluster hosts the gang then).
    """
    if sum(node_caps.values()) < workers:
        return None
    if pool.chist is not None and not frag:
        kept = _one_cluster_plain(pool, sorted((c, i) for i, c in node_caps.items()), workers)
        if kept is None:
            return None
        node_caps = {i: c for c, i in kept}
    if frag:
        caps: dict[int, int] = {}
        for i, c in node_caps.items():
            caps[pool.leaf_of[i]] = caps.get(pool.leaf_of[i], 0) + c
        fitting = [li for li, c in caps.items() if c >= workers]
        if fitting:
            chosen = [(min(fitting, key=lambda li: (caps[li], pool.leaf_rank[li])), workers)]
        else:
            chosen = _choose_leaves(pool, caps, workers)
            if chosen is None:
                return None
        groups = [(sorted((node_caps[i], i) for i in pool.leaf_nodes[li] if i in node_caps),
                   count) for li, count in chosen]
    else:
        groups = [(sorted((c, i) for i, c in node_caps.items()), workers)]
    placement: Plan = []
    for nodes, count in groups:
        for c, i in nodes:
            if count <= 0:
                break
            k = min(c, count)
            count -= k
            gpus = gpus_of(i)
            for w in range(k):
                placement.append(tuple((i, x, FULL) for x in gpus[w * g:(w + 1) * g]))
    return placement


def plan_fits(pool: Pool, workers: int, milli: int) -> bool:
    """Cheap necessary-and-sufficient test for whole GPUs (any nodes of one cluster will do for
    a gang)."""
    if milli < FULL:
        return workers == 1 and pool.max_shared_free() >= milli
    return pool.gang_capacity(milli // FULL) >= workers


def plan_grow(pool: Pool, g: int, near: set[int], cluster: str, *, frag: bool = True) -> Plan | None:
    """One more worker of ``g`` whole GPUs for a running job whose workers sit on nodes ``near``
    (pool indices), only on nodes of ``cluster``. ``frag=True``: in the job's own leaves first,
    then its spines, then anywhere (the gang stays close), each tier best fit (fewest whole free
    GPUs that fit, then the fullest leaf); ``frag=False``: best fit anywhere."""
    if pool.whole_capacity(g) < 1:
        return None
    i = None
    if frag:
        leaves = {pool.leaf_of[x] for x in near}
        spines = {pool.leaf_spine[li] for li in leaves}
        i = _grow_fit(pool, g, cluster, leaves)
        if i is None:
            i = _grow_fit(pool, g, cluster, {li for s in spines for li in pool.spine_leaves[s]} - leaves)
    if i is None:
        i = _grow_anywhere(pool, g, cluster, frag)
    if i is None:
        return None
    return [tuple((i, x, FULL) for x in pool.free_gpus(i, g))]


def _grow_fit(pool: Pool, g: int, cluster: str, leaves: set[int]) -> int | None:
    best = None
    for li in leaves:
        rank = pool.leaf_rank[li]
        for i in pool.leaf_nodes[li]:
            free = pool.free[i]
            if free >= g and pool.cluster[i] == cluster and (best is None or (free, rank, i) < best):
                best = (free, rank, i)
    return None if best is None else best[2]


def _grow_anywhere(pool: Pool, g: int, cluster: str, frag: bool) -> int | None:
    """Best fit over the whole pool through the free-GPU buckets: the fewest free GPUs first."""
    for k in range(g, pool.maxg + 1):
        leaves = pool.bucket[k]
        if not leaves:
            continue
        best = None
        for li in leaves:
            rank = pool.leaf_rank[li] if frag else 0
            for i in pool.leaf_nodes[li]:
                if pool.free[i] == k and pool.cluster[i] == cluster and (best is None or (rank, i) < best):
                    best = (rank, i)
        if best is not None:
            return best[1]
    return None


def commit(pool: Pool, placement: Plan) -> None:
    for worker in placement:
        pool.occupy_slots(worker)


def uncommit(pool: Pool, placement: Plan) -> None:
    for worker in placement:
        pool.release_slots(worker)


# -- single worker ---------------------------------------------------------------------
def _best_node(pool: Pool, g: int, frag: bool) -> int:
    """Best fit: the node with the fewest whole free GPUs >= g (caller checked one exists)."""
    for k in range(g, pool.maxg + 1):
        leaves = pool.bucket[k]
        if leaves:
            li = min(leaves, key=pool.leaf_rank.__getitem__) if frag else min(leaves)
            free = pool.free
            for i in pool.leaf_nodes[li]:
                if free[i] == k:
                    return i
    raise AssertionError("whole_capacity said a node fits")


def _keeps_usable(pool: Pool, i: int, g: int, req) -> bool:
    """Does a worker of footprint ``g`` asking ``req`` leave node ``i``'s other usable GPUs usable
    (its CPU, memory and disk strand none of them)?"""
    return usable_after(pool, i, g, req) >= pool.free[i] - g


def _best_unstranding_node(pool: Pool, g: int, req, fallback: int) -> int:
    """Best fit among the nodes a worker strands no GPU on (issue 36, docs/scheduling.md "Packing"):
    the fewest usable free GPUs first, fullest leaf first, as :func:`_best_node`; ``fallback``
    (the plain best fit) when every node that fits would strand one."""
    for k in range(g, pool.maxg + 1):
        for li in sorted(pool.bucket[k], key=pool.leaf_rank.__getitem__):
            for i in pool.leaf_nodes[li]:
                if pool.free[i] == k and _keeps_usable(pool, i, g, req):
                    return i
    return fallback


def _plan_shared(pool: Pool, milli: int, frag: bool) -> Plan | None:
    if not frag:
        return _plan_shared_plain(pool, milli)
    pos = bisect_left(pool.pkeys, milli)
    if pos < len(pool.pkeys):
        i, g = min(pool.part[pool.pkeys[pos]])
        return [((i, g, milli),)]
    if pool.whole_capacity(1) < 1:
        return None
    i = _best_node(pool, 1, frag)
    return [((i, pool.free_gpus(i, 1)[0], milli),)]


def _plan_shared_res(pool: Pool, milli: int, req) -> Plan | None:
    """A shared worker on a node with its CPU, memory and disk free (``req``, or its part's
    share of the node's): the partly used GPU with the least free milli that fits first (as
    ``_plan_shared``), else a whole GPU of the node with the fewest usable GPUs."""
    def fits(i):
        return pool.fits_res(i, req if req is not None else pool.share_of(i, milli))

    # First pass: only where its request strands no usable GPU (issue 36); then anywhere it fits.
    for strict in ((True, False) if req is not None else (False,)):
        found = _shared_res_pass(pool, milli, req, fits, strict)
        if found is not None:
            return found
    return None


def _shared_res_pass(pool: Pool, milli: int, req, fits, strict: bool) -> Plan | None:
    for key in pool.pkeys[bisect_left(pool.pkeys, milli):]:
        for i, g in sorted(pool.part[key]):
            if fits(i) and (not strict or _keeps_usable(pool, i, 0, req)):
                return [((i, g, milli),)]
    best = None
    for i, usable in enumerate(pool.free):
        if usable and fits(i) and (best is None or (usable, i) < best) and (
                not strict or _keeps_usable(pool, i, 1, req)):
            best = (usable, i)
    if best is None:
        return None
    i = best[1]
    return [((i, pool.free_gpus(i, 1)[0], milli),)]


def _plan_shared_plain(pool: Pool, milli: int) -> Plan | None:
    best = None
    for i, row in enumerate(pool.used):
        total = len(row) * FULL - sum(row)
        if total < milli or (best is not None and total >= best[0]):
            continue
        for g, u in enumerate(row):
            if FULL - u >= milli:
                best = (total, i, g)
                break
    if best is None:
        return None
    return [((best[1], best[2], milli),)]


# -- gangs -----------------------------------------------------------------------------
def _plan_best_fit(pool: Pool, workers: int, g: int) -> Plan:
    """Plain mode: each worker best-fits independently, as if placed one after another (in
    the cluster of the first)."""
    free = pool.free
    avail = sorted((free[i], i) for i in range(len(free)) if free[i] >= g)
    if pool.chist is not None:
        avail = _one_cluster_plain(pool, avail, workers, pool.cluster_capacities(g))
    taken: dict[int, int] = {}
    for _ in range(workers):
        f, i = avail.pop(0)
        taken[i] = taken.get(i, 0) + 1
        if f - g >= g:
            insort(avail, (f - g, i))
    return _workers_on_nodes(pool, sorted(taken.items()), g)


def _plan_topology(pool: Pool, workers: int, g: int) -> Plan:
    if g == pool.maxg:
        li = _best_full_leaf(pool, workers)
        if li is not None:
            return _fill_leaf(pool, li, workers, g)
    caps = _leaf_caps(pool, g)
    fitting = [li for li, c in caps.items() if c >= workers]
    if fitting:
        li = min(fitting, key=lambda leaf: (caps[leaf], pool.leaf_rank[leaf]))
        chosen = [(li, workers)]
    else:
        chosen = _choose_leaves(pool, caps, workers)  # not None: gang_capacity said it fits
    placement: Plan = []
    for li, count in chosen:
        placement.extend(_fill_leaf(pool, li, count, g))
    return placement


def _best_full_leaf(pool: Pool, workers: int) -> int | None:
    """Whole-node workers: the leaf with the fewest fully free nodes that still hosts them."""
    for c in range(workers, len(pool.full_leaves)):
        leaves = pool.full_leaves[c]
        if leaves:
            return min(leaves, key=pool.leaf_rank.__getitem__)
    return None


def _leaf_caps(pool: Pool, g: int) -> dict[int, int]:
    """Workers of ``g`` GPUs each leaf can host (only leaves with a node that fits one)."""
    top = pool.maxg
    leaves: set[int] = set()
    for k in range(g, top + 1):
        leaves |= pool.bucket[k]
    hist = pool.leaf_hist
    if 2 * g > top:  # at most one worker per node: count nodes
        return {li: sum(hist[li][g:]) for li in leaves}
    return {li: sum(hist[li][k] * (k // g) for k in range(g, top + 1)) for li in leaves}


def _one_cluster_plain(pool: Pool, avail: list[tuple[int, int]], workers: int,
                       caps: list[int] | None = None) -> list[tuple[int, int]] | None:
    """Plain best fit of a gang: ``avail`` (sorted ``(room, node)``, room in workers or GPUs)
    cut to the cluster of its first node among the clusters that host all ``workers``
    (``caps``: workers per cluster; default: the sums of ``avail``'s rooms). None: no cluster."""
    of = pool.cluster_of
    if caps is None:
        caps = [0] * len(pool.clusters)
        for c, i in avail:
            caps[of[i]] += c
    first = next((i for _, i in avail if caps[of[i]] >= workers), None)
    if first is None:
        return None
    c = of[first]
    return [(f, i) for f, i in avail if of[i] == c]


def _one_cluster_leaves(pool: Pool, caps: dict[int, int], workers: int) -> dict[int, int] | None:
    """``caps`` (workers per leaf) cut to the leaves of the one cluster that hosts the gang in
    the fewest leaves (then the least room, a best fit; then cluster order). None: none can."""
    per: dict[int, list[int]] = {}
    for li, c in caps.items():
        per.setdefault(pool.leaf_cluster[li], []).append(c)
    best = None
    for cl, lst in per.items():
        total = sum(lst)
        if total < workers:
            continue
        key = (_leaves_needed(sorted(lst, reverse=True), workers), total, cl)
        if best is None or key < best:
            best = key
    if best is None:
        return None
    cl = best[2]
    return {li: c for li, c in caps.items() if pool.leaf_cluster[li] == cl}


def _choose_leaves(pool: Pool, caps: dict[int, int], workers: int) -> list[tuple[int, int]] | None:
    """Inside one cluster: fewest leaves (largest first), then fewest spines; the last leaf is
    a best fit. None when no one cluster has room for ``workers``."""
    if pool.chist is not None:
        caps = _one_cluster_leaves(pool, caps, workers)
        if caps is None:
            return None
    elif sum(caps.values()) < workers:
        return None
    rank = pool.leaf_rank
    by_spine: dict[int, list[int]] = {}
    for li in caps:
        by_spine.setdefault(pool.leaf_spine[li], []).append(li)
    spine_cap = {s: sum(caps[li] for li in lst) for s, lst in by_spine.items()}
    order = sorted(caps, key=lambda li: (-caps[li], -spine_cap[pool.leaf_spine[li]], rank[li]))
    need = _leaves_needed([caps[li] for li in order], workers)
    best = None
    for s, lst in by_spine.items():
        if spine_cap[s] < workers:
            continue
        lst.sort(key=lambda li: (-caps[li], rank[li]))
        n = _leaves_needed([caps[li] for li in lst], workers)
        key = (n, spine_cap[s], s)
        if best is None or key < best[0]:
            best = (key, lst)
    if best is not None and best[0][0] == need:
        order = best[1]
    return _take_leaves(order, caps, need, workers, rank)


def _leaves_needed(sorted_caps: list[int], workers: int) -> int:
    acc = 0
    for n, c in enumerate(sorted_caps, 1):
        acc += c
        if acc >= workers:
            return n
    return len(sorted_caps) + 1


def _take_leaves(order: list[int], caps: dict[int, int], need: int, workers: int,
                 rank: list[int]) -> list[tuple[int, int]]:
    head = order[: need - 1]
    rest = workers - sum(caps[li] for li in head)
    last = min((li for li in order[need - 1:] if caps[li] >= rest),
               key=lambda li: (caps[li], rank[li]))
    return [(li, caps[li]) for li in head] + [(last, rest)]


def _fill_leaf(pool: Pool, li: int, count: int, g: int) -> Plan:
    """``count`` workers in leaf ``li``: fullest fitting nodes first (keeps whole nodes free)."""
    free = pool.free
    nodes = sorted((free[i], i) for i in pool.leaf_nodes[li] if free[i] >= g)
    taken = []
    for f, i in nodes:
        if count <= 0:
            break
        k = min(f // g, count)
        taken.append((i, k))
        count -= k
    return _workers_on_nodes(pool, taken, g)


def _workers_on_nodes(pool: Pool, taken, g: int) -> Plan:
    placement: Plan = []
    for i, k in taken:
        gpus = pool.free_gpus(i, k * g)
        for w in range(k):
            placement.append(tuple((i, x, FULL) for x in gpus[w * g:(w + 1) * g]))
    return placement


# -- fragmentation gradient descent (FGD) ------------------------------------------------
def frag_amount(free, typical, side=None, host_ok=None, usable=None) -> float:
    """A node's fragmentation for a workload (FGD, ATC'23 §4): the expected free GPU milli that
    a pod drawn from ``typical`` cannot use. ``free`` lists the free milli of each GPU;
    ``typical`` is ``[(probability, gpus, milli, tag), ...]`` (``milli`` per GPU, < 1000 only
    for one shared GPU). Per pod shape: when the node cannot host it (fewer than ``gpus`` GPUs
    with ``milli`` free, or ``host_ok(side, tag)`` is False — e.g. CPU or GPU model), every
    free milli is fragment; otherwise the free milli of the GPUs with less than ``milli`` free.
    A CPU-only shape (``gpus == 0``) that fits counts all free GPU milli too, as in the paper's
    simulator (its free GPUs are of no use to it).

    ``usable`` (resource-aware FGD, issue 36): how many of the node's whole free GPUs its free CPU,
    memory and disk can still feed (``Pool.free``); the others are *stranded* — no pod shape can
    take them, so they count as fragment for every shape, and a shape fits only on usable ones."""
    total = sum(free)
    if total == 0:
        return 0.0
    dead = 0
    if usable is not None:
        whole = sum(1 for f in free if f >= FULL)
        dead = max(whole - usable, 0)
    out = 0.0
    for p, g, m, tag in typical:
        if host_ok is not None and not host_ok(side, tag):
            out += p * total
            continue
        if g == 0:
            out += p * total
            continue
        fits = -dead
        short = dead * FULL
        for f in free:
            if f >= m:
                fits += 1
            else:
                short += f
        out += p * (short if fits >= g else total)
    return out


def plan_fgd(pool: Pool, workers: int, milli: int, *, typical, side=None, host_ok=None,
             cache: dict | None = None, rng=None, rank=None, req=None) -> tuple[float, Plan] | None:
    """FGD placement: ``(fragmentation increase, plan)`` or ``None`` when nothing fits.

    Each worker in turn goes to the node and GPUs whose fragmentation (:func:`frag_amount`)
    grows least; a shared request tries every distinct free level of the
    node's GPUs; ties go to the node left with the least free milli, then pool order.
    ``side(i)`` -> ``(before, after)`` hashable non-GPU state of node ``i``
    before / after hosting one worker (e.g. CPU left), or ``None`` when the node cannot host
    it; ``host_ok(state, tag)`` says whether a typical shape fits that state. ``cache`` (a
    dict the caller keeps for one ``typical``) memoises fragmentation per node state.

    ``rng`` given (a ``random.Random``): the paper simulator's rule instead (its ``fgd_score.go``):
    each node scores ``int(100 * sigmoid(-increase / 1000))`` (:func:`fgd_score`), the node goes
    uniformly at random among the best-scoring nodes (kube-scheduler's ``selectHost``), and a
    shared request takes the first GPU (by index) with the node's best score. The result is then
    ``(-score, plan)`` and ``plan_fgd.ties`` holds how many nodes tied (to merge several pools).
    With ``rank`` (a number per node of the pool, lower first) the best-scoring node of lowest
    rank wins instead of a random one: the simulator names every node with a random-permutation
    prefix per run, and its results match a fixed order of that kind (docs/replay.md).

    ``req`` given ((cpu, memory, disk) of one worker) on a pool with resources: resource-aware FGD
    (issue 36, docs/scheduling.md "Packing"): a node's fragmentation also counts its *stranded*
    GPUs — whole free GPUs its free CPU, memory or disk can no longer feed (:func:`usable_after`)
    — so a worker goes where it strands the fewest GPUs as well as where it fragments least.
    """
    if workers <= 0 or milli <= 0 or (milli < FULL and workers != 1) or (milli > FULL and milli % FULL):
        return None
    if cache is None:
        cache = {}
    g = max(1, milli // FULL)
    m = min(milli, FULL)
    plan_fgd.ties = 0
    if workers == 1 or pool.chist is None:
        return _fgd_gang(pool, workers, g, m, typical, side, host_ok, cache, rng, rank, None, req)
    # A gang stays in one cluster: try each that has room, keep the least increase.
    best = None
    for c, cap in enumerate(pool.cluster_capacities(g)):
        if cap >= workers:
            found = _fgd_gang(pool, workers, g, m, typical, side, host_ok, cache, rng, rank, c, req)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
    return best


def _fgd_gang(pool: Pool, workers: int, g: int, m: int, typical, side, host_ok, cache, rng, rank,
              cluster: int | None, req=None) -> tuple[float, Plan] | None:
    """FGD for ``workers`` workers in turn, on nodes of ``cluster`` (a number; None: any)."""
    placement: Plan = []
    total = 0.0
    for _ in range(workers):
        best = _fgd_worker(pool, g, m, typical, side, host_ok, cache, rng, rank, cluster, req)
        if best is None:
            _undo(pool, placement, req)
            return None
        total += best[0]
        placement.append(best[1])
        pool.occupy_slots(best[1])
        if req is not None:  # the next worker sees this one's CPU and memory taken
            pool.take(best[1][0][0], req)
    _undo(pool, placement, req)
    return total, placement


def frag_cached(free, state, typical, host_ok, cache, usable=None) -> float:
    key = (tuple(sorted(free)), state, usable)
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = frag_amount(key[0], typical, state, host_ok, usable)
    return hit


def usable_after(pool: Pool, i: int, broken: int, req) -> int | None:
    """Node ``i``'s usable whole GPUs (``Pool.free``) once a worker breaks ``broken`` whole free
    GPUs and takes ``req`` ((cpu, memory, disk) or None) of its resources; None when the pool has no
    resources (then every whole free GPU is usable). The same rule as ``Pool._usable``."""
    if pool.whole is None:
        return None
    usable = pool.whole[i] - broken
    free = pool.res[i]
    for d, s in pool.rdims[i]:
        q = (free[d] - (req[d] if req else 0)) // s if s else 0
        if q < usable:
            usable = q
    return usable if usable > 0 else 0


def free_share(pool: Pool) -> float:
    """The share of a pool's GPUs that are usable whole free GPUs (``Pool.free``). Resource-aware
    FGD (issue 36) breaks a tie of equal scores between GPU models toward the larger share: a pod
    that may run on several models goes to the emptier one, which keeps the fuller model's last
    whole GPUs for the pods that can run only there."""
    gpus = sum(len(row) for row in pool.used)
    return sum(pool.free) / gpus if gpus else 0.0


def fgd_score(increase: float) -> int:
    """The paper simulator's FGD node score (0-100): ``int(100 * sigmoid(-increase / 1000))``
    with ``increase`` in milli-GPU; 50 when fragmentation does not change, so increases that
    differ by less than ~40 milli often score the same."""
    return int(100.0 / (1.0 + math.exp(increase / 1000.0)))


def _fgd_nodes(pool: Pool, g: int, m: int, side, cluster: int | None = None):
    """The nodes one worker of ``g`` × ``m`` milli could go on: (index, free milli per GPU,
    side state before, side state after); ``side(i)`` None hides a node (e.g. short of CPU);
    ``cluster`` given: only nodes of that cluster (number)."""
    of = pool.cluster_of
    for i, row in enumerate(pool.used):
        if cluster is not None and of[i] != cluster:
            continue
        if m == FULL:
            if pool.free[i] < g:
                continue
        elif not pool.free[i] and not any(0 < u <= FULL - m for u in row):
            continue  # no usable whole GPU (Pool.free) and no partly used one with room
        states = side(i) if side is not None else (None, None)
        if states is None:
            continue
        yield i, [FULL - u for u in row], states[0], states[1]


def _undo(pool: Pool, placement: Plan, req) -> None:
    for worker in placement:
        pool.release_slots(worker)
        if req is not None:
            pool.take(worker[0][0], req, -1)


def _usable_pair(pool: Pool, i: int, free, gpus, req):
    """(usable whole GPUs now, after the worker takes ``gpus`` of ``free`` and ``req``), or
    (None, None) when scoring ignores resources (no ``req``, or a pool without them)."""
    if req is None or pool.whole is None:
        return None, None
    broken = sum(1 for x in gpus if free[x] >= FULL)
    return pool.free[i], usable_after(pool, i, broken, req)


def _fgd_worker(pool: Pool, g: int, m: int, typical, side, host_ok, cache, rng=None, rank=None,
                cluster: int | None = None, req=None):
    if rng is not None:
        return _fgd_worker_sim(pool, g, m, typical, side, host_ok, cache, rng, rank, cluster, req)
    best = None
    for i, free, before_state, after_state in _fgd_nodes(pool, g, m, side, cluster):
        if m == FULL:
            gpus = [x for x, f in enumerate(free) if f == FULL][:g]
            choices = [gpus]
        else:
            seen = set()
            choices = []
            for x, f in enumerate(free):
                # a whole GPU only where the node can use it (its CPU / memory: Pool.free)
                if f >= m and f not in seen and (f < FULL or pool.free[i]):
                    seen.add(f)
                    choices.append([x])
        for gpus in choices:
            now, then = _usable_pair(pool, i, free, gpus, req)
            before = frag_cached(free, before_state, typical, host_ok, cache, now)
            after = free[:]
            for x in gpus:
                after[x] -= m
            delta = frag_cached(after, after_state, typical, host_ok, cache, then) - before
            key = (round(delta, 6), sum(after))  # ties: the fuller node (best fit), then pool order
            if best is None or key < best[2]:
                best = (delta, tuple((i, x, m) for x in gpus), key)
    return None if best is None else best[:2]


def _fgd_worker_sim(pool: Pool, g: int, m: int, typical, side, host_ok, cache, rng, rank=None,
                    cluster: int | None = None, req=None):
    """As the paper's simulator: integer scores, the first best GPU on a node, and among the
    best nodes the one of lowest ``rank``, or without ranks a uniformly random one (reservoir
    sampling, one ``rng.random()`` per tied node)."""
    best = None
    ties = 0
    for i, free, before_state, after_state in _fgd_nodes(pool, g, m, side, cluster):
        node_best = None
        if m == FULL:
            candidates = [[x for x, f in enumerate(free) if f == FULL][:g]]
        else:
            candidates = [[x] for x, f in enumerate(free) if f >= m and (f < FULL or pool.free[i])]
        for gpus in candidates:
            now, then = _usable_pair(pool, i, free, gpus, req)
            before = frag_cached(free, before_state, typical, host_ok, cache, now)
            after = free[:]
            for x in gpus:
                after[x] -= m
            score = fgd_score(frag_cached(after, after_state, typical, host_ok, cache, then) - before)
            if node_best is None or score > node_best[0]:  # strict: the first GPU wins ties
                node_best = (score, gpus)
        score, gpus = node_best
        if best is None or score > best[0]:
            best, ties = (score, gpus, i), 1
        elif score == best[0]:
            ties += 1
            if rank[i] < rank[best[2]] if rank is not None else rng.random() * ties < 1:
                best = (score, gpus, i)
    if best is None:
        return None
    plan_fgd.ties = ties
    return -best[0], tuple((best[2], x, m) for x in best[1])

