"""Packing mode of ``replay`` (DESIGN §9): the published FGD fragmentation experiment, pure.

Contract (the ``replay --mode packing`` command calls this)::

    run(pods_csv, nodes_csv, *, policy="fgd", seeds=tuple(range(42, 52)), progress=None,
        upto=1.0, resources=None, published_csv=None) -> dict

    policy    "fgd"     fragmentation gradient descent (jobs.scheduler.placement.plan_fgd) as the paper's
                        simulator runs it: its target workload, integer scores, ties by one
                        random node order per run, CPU-only pods scored too
              "fgd-res" resource-aware FGD (issue 36): the same, with ``plan_fgd(req=...)`` — a
                        node's fragmentation also counts the GPUs its free CPU or memory can no
                        longer feed, and a tie between GPU models goes to the one with the
                        larger free share (``free_share``) (engine modes; elsewhere the
                        fragmentation is the same as "fgd")
              "bestfit" the production plain best fit  (jobs.scheduler.placement.plan, frag=False)
              "ours"    the production default         (jobs.scheduler.placement.plan, frag=True)
              "random"  a uniformly random node that fits
    seeds     pod orders: each seed shuffles the pod list (random.Random(seed)); None = trace order
    progress  optional callable(str) told after each seed
    upto      stop when the arrived GPU demand reaches this share of capacity (the paper: 1.3)
    resources "engine"  nodes' CPU / memory in the engine pools, pods placed as the live engine
                        places a request (issue 33 item 7; the default when the node list has them)
              "engine-by-size"  the same with one pool (flavor) per node size, not per GPU model
              "fit"     the paper simulator's own fit beside the pools (a pod fits where its CPU and
                        memory are free): the protocol comparable with the published figures
              "none"    GPUs only (the default when the node list has no CPU / memory)

Result keys: ``mode, policy, workload, nodes, gpus, pods, gpu_pods, seeds, runs`` (per seed:
``seed, allocation_at_100pct, stranded_gpus_at_100pct, stranded_gpus_mean, placed, failed,
arrived, curve, stranded_curve``), ``allocation_at_100pct``
(mean over seeds, %), ``allocation_min``, ``allocation_max``, ``allocation_std``, ``published``
(per published policy: mean/min/max at 100 % from ``analysis_allo_discrete.csv`` for this
workload), ``resources``, ``stranded_gpus_at_100pct`` / ``stranded_gpus_mean`` (means over seeds),
``wall_seconds``. Allocations are percentages of the cluster's GPUs; stranded GPUs are whole free
GPUs their node's free CPU or memory cannot feed at its share (``Pool.whole`` − ``Pool.free``,
engine mode; 0 otherwise), at the 100 % arrival and averaged over the 1 % steps.

The experiment (README of the trace, "How FGD used it"): every node of the node list is one
server of its GPU model (one :class:`~jobs.scheduler.engine.pool.Pool` per model); pods arrive one by one,
never leave, and the list is extended by pods sampled again (same seed) until the arrived GPU
demand reaches ``upto``. One pod = one worker of ``num_gpu`` whole GPUs, or one shared slice of
``gpu_milli`` on one GPU; ``gpu_spec`` restricts the pools. With resources (``engine`` or ``fit``,
as the paper's simulator) each node also has ``cpu_milli`` / ``memory_mib`` and a pod needs its own,
so CPU-only pods take no GPU but do take CPU and memory on the GPU nodes and can block them (in
engine mode through ``Pool.take``, so the GPUs they leave unfed are stranded). A pod
that fits nowhere is skipped (failed) and the next one tries. ``allocation_at_100pct`` is the
share of GPUs (milli summed) allocated at the first arrival where the arrived GPU demand
reaches 100 % of capacity.

FGD's target workload (``typical``) is the pod-shape distribution of the GPU pods of the list,
keyed by (GPUs, milli, CPU, GPU models), all shapes kept (the simulator's 95 % popularity cut
with CPU-only shapes measured worse; ``typical_of(..., popularity=0.95, cpu_pods=True)``). GPU
pods are placed by the simulator's rule (``sim_rule=True``): integer score
``int(100 * sigmoid(-increase / 1000))``, a uniformly random node among the best, the first
best GPU on it; ``sim_rule=False`` = least increase, ties to the fullest node. Placement always
goes through :mod:`jobs.scheduler.placement` on engine pools — never a second implementation: bestfit /
ours call ``plan`` and FGD calls ``plan_fgd``.
"""

from __future__ import annotations

import csv
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from jobs.scheduler.engine.model import Node
from jobs.scheduler.engine.pool import FULL, Pool
from jobs.scheduler.placement import commit, fgd_score, frag_cached, free_share, plan, plan_fgd, usable_after
from jobs.whatif.replay.alibaba import NodeRow, PodRow, read_node_rows, read_pod_rows
from jobs.whatif.replay.paths import published_fgd_csv

__all__ = ["POLICIES", "RESOURCES", "has_resources", "published", "run", "simulate", "typical_of"]

POLICIES = ("fgd", "fgd-res", "bestfit", "ours", "random")
RESOURCES = ("engine", "engine-by-size", "fit", "none")
NODES_PER_LEAF, LEAVES_PER_SPINE = 16, 8


def typical_of(pods: list[PodRow], popularity: float | None = None, cpu_pods: bool = False,
               ) -> list[tuple[float, int, int, tuple]]:
    """The FGD target workload: ``(probability, gpus, milli, (cpu_milli, gpu_types))`` shapes.

    Default: every shape of the GPU pods. The paper's simulator (``GetTypicalPods`` in its
    ``pkg/utils/frag.go``, run with ``isInvolvedCpuPods: true, podPopularityThreshold: 95,
    podIncreaseStep: 1``) = ``cpu_pods=True, popularity=0.95``: CPU-only pods are shapes too and
    shapes are taken most popular first until they cover ``popularity`` of the pods, then
    renormalised (``simulator_typical``: what the fgd policy runs with, see docs/replay.md)."""
    counts = Counter((p.num_gpu, p.gpu_milli if p.num_gpu else 0, p.cpu_milli, p.gpu_types)
                     for p in pods if cpu_pods or p.num_gpu > 0)
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    if popularity is not None:
        kept, cum = [], 0
        for kv in ranked:
            if cum >= popularity * total:
                break
            kept.append(kv)
            cum += kv[1]
        ranked, total = kept, cum
    return [(c / total, g, m, (cpu, types)) for (g, m, cpu, types), c in ranked]


def _host_ok(state, tag) -> bool:
    model, cpu = state
    need_cpu, types = tag
    return need_cpu <= cpu and (not types or model in types)


class _Cluster:
    """Pools per GPU model and the CPU and memory of each node: in the engine pools themselves
    (``resources="engine"``: ``Node.cpu_millicores`` / ``memory_mib``, ``Pool.res``), or beside
    them (``"fit"``: the simulator's own fit, ``cpu`` / ``mem``), or nowhere (``"none"``).
    ``"engine-by-size"``: as ``engine`` with one pool (flavor) per node size — GPU model, GPUs,
    CPU and memory — so each pool's share is its own nodes' (``models`` are then pool keys and
    ``model_of`` their GPU model)."""

    def __init__(self, nodes: list[NodeRow], resources: str = "engine") -> None:
        if resources not in RESOURCES:
            raise ValueError(f"unknown resources mode {resources!r} (one of {', '.join(RESOURCES)})")
        self.engine = resources.startswith("engine")
        by_size = resources == "engine-by-size"
        by_model: dict[str, list[NodeRow]] = {}
        self.model_of: dict[str, str] = {}
        for n in nodes:
            if n.gpus > 0:
                key = f"{n.model}:{n.gpus}x{n.cpu_milli}x{n.memory_mib}" if by_size else n.model
                by_model.setdefault(key, []).append(n)
                self.model_of[key] = n.model
        self.models = sorted(by_model)
        self.pools: dict[str, Pool] = {}
        self.cpu: dict[str, list[int]] = {}
        self.mem: dict[str, list[int]] = {}
        big = 1 << 60
        for model in self.models:
            rows = by_model[model]
            engine_nodes = [Node(id=f"{k:06d}:{n.name}", flavor=model, gpus=n.gpus,
                                 spine=f"{k // (NODES_PER_LEAF * LEAVES_PER_SPINE):05d}",
                                 leaf=f"{k // NODES_PER_LEAF:05d}",
                                 cpu_millicores=(n.cpu_milli or None) if self.engine else None,
                                 memory_mib=(n.memory_mib or None) if self.engine else None)
                            for k, n in enumerate(rows)]
            pool = self.pools[model] = Pool(model, engine_nodes)
            # Pool orders nodes by topology path; the zero-padded ids keep file order.
            ordered = [rows[int(nid.split(":")[0])] for nid in pool.ids]
            fit = resources == "fit"
            self.cpu[model] = [n.cpu_milli if fit else big for n in ordered]
            self.mem[model] = [n.memory_mib if fit else big for n in ordered]
        self.capacity = sum(p.capacity for p in self.pools.values())
        self.used = 0
        self.frag_cache: dict = {}
        self.rank: dict[str, list[int]] | None = None

    def shuffle_ranks(self, rng: random.Random) -> None:
        """A random order of all the nodes, fixed for the run: the simulator prefixes every
        node's name with a random permutation per run, and ties go by it (docs/replay.md)."""
        nodes = [(m, i) for m in self.models for i in range(len(self.pools[m].ids))]
        order = list(range(len(nodes)))
        rng.shuffle(order)
        self.rank = {m: [0] * len(self.pools[m].ids) for m in self.models}
        for (m, i), r in zip(nodes, order, strict=True):
            self.rank[m][i] = r

    def candidates(self, pod: PodRow) -> list[str]:
        return [m for m in self.models if not pod.gpu_types or self.model_of[m] in pod.gpu_types]

    def cpu_left(self, model: str, i: int) -> int:
        """Node ``i``'s free CPU (millicores): the engine pool's own figure in engine mode."""
        res = self.pools[model].res if self.engine else None
        return res[i][0] if res is not None else self.cpu[model][i]

    def fits_side(self, model: str, i: int, pod: PodRow) -> bool:
        if self.engine:
            return self.pools[model].fits_res(i, _req(pod))
        return self.cpu[model][i] >= pod.cpu_milli and self.mem[model][i] >= pod.memory_mib

    def take_side(self, model: str, i: int, pod: PodRow) -> None:
        """Node ``i`` gives the pod its CPU and memory (in engine mode ``Pool.take``, the call the
        engine makes for a running job's request, which updates the node's usable GPUs)."""
        if self.engine:
            self.pools[model].take(i, _req(pod))
            return
        self.cpu[model][i] -= pod.cpu_milli
        self.mem[model][i] -= pod.memory_mib

    def take(self, model: str, placement, pod: PodRow) -> None:
        commit(self.pools[model], placement)
        self.take_side(model, placement[0][0][0], pod)
        self.used += sum(s[2] for w in placement for s in w)

    def stranded(self) -> int:
        """Whole free GPUs their node's free CPU or memory cannot feed at its share (engine mode;
        ``Pool.whole`` − ``Pool.free``); 0 without resources in the pools."""
        return sum(sum(p.whole) - sum(p.free) for p in self.pools.values() if p.whole is not None)


def _req(pod: PodRow) -> tuple[int, int, int]:
    """A pod's request as the engine pool takes it: (CPU millicores, memory MiB, disk GiB)."""
    return (pod.cpu_milli, pod.memory_mib, 0)


def _engine_plan(pool: Pool, milli: int, req, frag: bool):
    """One worker as the engine's ``Cycle.place`` places it: on a node with room for its
    footprint (``Pool.demand``: more GPUs when it asks more CPU or memory than its share), keeping
    only its own GPUs; a shared worker on a node with its request free (``plan(req=...)``)."""
    pm = pool.demand(milli, req)
    found = plan(pool, 1, pm, frag=frag, req=req)
    if found is None or pm == milli:
        return found
    return [worker[: milli // FULL] for worker in found]


def _hide(pool: Pool, i: int) -> list[tuple[int, int, int]]:
    """Fill node ``i`` so placement skips it (CPU or memory short); undo with ``_unhide``."""
    slots = [(i, g, FULL - u) for g, u in enumerate(pool.used[i]) if u < FULL]
    pool.occupy_slots(slots)
    return slots


def _place_production(cl: _Cluster, pod: PodRow, milli: int, frag: bool):
    best = None
    for model in cl.candidates(pod):
        pool = cl.pools[model]
        if cl.engine:
            found = _engine_plan(pool, milli, _req(pod), frag)
            if found is not None:
                best = _better(best, pool, model, found, milli)
            continue
        hidden: list = []
        try:
            while True:
                found = plan(pool, 1, milli, frag=frag)
                if found is None:
                    break
                i = found[0][0][0]
                if cl.fits_side(model, i, pod):
                    break
                hidden.extend(_hide(pool, i))
        finally:
            if hidden:
                pool.release_slots(hidden)
        if found is not None:
            best = _better(best, pool, model, found, milli)
    return None if best is None else best[1:]


def _better(best, pool: Pool, model: str, found, milli: int):
    """Across models, the same best-fit rule: the node left with the fewest free GPUs/milli."""
    i = found[0][0][0]
    key = (pool.free[i], sum(FULL - u for u in pool.used[i])) if milli >= FULL else \
        (sum(FULL - u for u in pool.used[i]),)
    return (key, model, found) if best is None or key < best[0] else best


def _place_fgd(cl: _Cluster, pod: PodRow, milli: int, typical, rng: random.Random | None = None,
               res_aware: bool = False):
    """FGD over the pools of the pod's models. ``rng`` given: the simulator's rule (integer
    scores; among the best of all pools the node of lowest rank when the cluster has ranks,
    else a uniformly random one); else the least increase, ties to the fullest node."""
    best = None
    ties = 0
    for model in cl.candidates(pod):
        pool = cl.pools[model]
        # engine mode: a node with room for the pod's footprint (whole GPUs) and its request free
        units = pool.demand(milli, _req(pod)) // FULL if cl.engine and milli >= FULL else 0

        def side(i, model=model, pool=pool, units=units):
            if not cl.fits_side(model, i, pod) or pool.free[i] < units:
                return None
            cpu = cl.cpu_left(model, i)
            gpu_model = cl.model_of[model]
            return (gpu_model, cpu), (gpu_model, cpu - pod.cpu_milli)

        rank = None if cl.rank is None else cl.rank[model]
        found = plan_fgd(cl.pools[model], 1, milli, typical=typical, side=side, host_ok=_host_ok,
                         cache=cl.frag_cache, rng=rng, rank=rank,
                         req=_req(pod) if res_aware and cl.engine else None)
        if found is None:
            continue
        if rank is not None:  # across pools too: the best score, (fgd-res) the emptier model, the rank
            key = (found[0], -free_share(pool) if res_aware else 0, rank[found[1][0][0][0]])
            if best is None or key < best[0]:
                best = (key, model, found[1])
            continue
        if rng is None:
            if best is None or found[0] < best[0]:
                best = (found[0], model, found[1])
            continue
        n = plan_fgd.ties
        if best is None or found[0] < best[0]:
            best, ties = (found[0], model, found[1]), n
        elif found[0] == best[0]:
            ties += n
            if rng.random() * ties < n:
                best = (found[0], model, found[1])
    return None if best is None else best[1:]


def _place_random(cl: _Cluster, pod: PodRow, milli: int, rng: random.Random):
    g, m = max(1, milli // FULL), min(milli, FULL)
    options = []
    for model in cl.candidates(pod):
        pool = cl.pools[model]
        units = pool.demand(milli, _req(pod)) // FULL if cl.engine and m == FULL else 0
        for i, row in enumerate(pool.used):
            if not cl.fits_side(model, i, pod) or pool.free[i] < units:
                continue
            gpus = [x for x, u in enumerate(row) if FULL - u >= m]
            if m == FULL:
                gpus = [x for x in gpus if row[x] == 0]
            elif not pool.free[i]:  # a shared pod breaks a whole GPU only where it is usable
                gpus = [x for x in gpus if row[x] > 0]
            if len(gpus) >= g:
                options.append((model, i, gpus))
    if not options:
        return None
    model, i, gpus = rng.choice(options)
    chosen = sorted(rng.sample(gpus, g))
    return model, [tuple((i, x, m) for x in chosen)]


def _place_cpu_only(cl: _Cluster, pod: PodRow, policy: str, typical, rng: random.Random):
    """A CPU-only pod: no GPU, but CPU and memory on a GPU node. Random: any node that fits;
    else the node with the fewest free GPU milli (then the least CPU left), so CPU-only pods
    do not block free GPUs; FGD ranks by the fragmentation increase first (less CPU can strand
    GPUs), with the same tie-break; with node ranks (the simulator's rule) FGD's integer score of
    that increase, ties to the lowest rank."""
    options = [(m, i) for m in cl.models for i in range(len(cl.pools[m].ids)) if cl.fits_side(m, i, pod)]
    if not options:
        return None
    if policy == "random":
        return rng.choice(options)

    def fit(opt):
        m, i = opt
        return sum(FULL - u for u in cl.pools[m].used[i]), cl.cpu_left(m, i)

    res_aware = policy == "fgd-res"
    if policy.startswith("fgd") and cl.rank is not None:
        rank = cl.rank
        return min(options, key=lambda o: (-fgd_score(_cpu_pod_increase(cl, pod, typical, *o, res_aware)),
                                           rank[o[0]][o[1]]))
    if policy.startswith("fgd"):
        return min(options, key=lambda o: (round(_cpu_pod_increase(cl, pod, typical, *o, res_aware), 6),
                                           *fit(o)))
    return min(options, key=fit)


def _cpu_pod_increase(cl: _Cluster, pod: PodRow, typical, m: str, i: int, res_aware: bool = False) -> float:
    """How much node ``i`` of pool ``m`` fragments when a CPU-only pod takes its CPU (``res_aware``
    and engine mode: the GPUs it strands count too)."""
    pool = cl.pools[m]
    free = tuple(sorted(FULL - u for u in pool.used[i]))
    cpu = cl.cpu_left(m, i)
    gpu_model = cl.model_of[m]
    now = then = None
    if res_aware and cl.engine:
        now, then = pool.free[i], usable_after(pool, i, 0, _req(pod))
    before = frag_cached(free, (gpu_model, cpu), typical, _host_ok, cl.frag_cache, now)
    after = frag_cached(free, (gpu_model, cpu - pod.cpu_milli), typical, _host_ok, cl.frag_cache, then)
    return after - before


def simulator_typical(pods: list[PodRow]) -> list[tuple[float, int, int, tuple]]:
    """The target workload of the paper simulator's FGD runs (see ``typical_of``)."""
    return typical_of(pods, popularity=0.95, cpu_pods=True)


def simulate(nodes: list[NodeRow], pods: list[PodRow], *, policy: str = "fgd", seed: int | None = 42,
             upto: float = 1.0, resources: str = "engine", typical=None, sim_rule: bool = True) -> dict:
    """One run: the pods (shuffled by ``seed``, trace order when None) arrive until the GPU
    demand reaches ``upto`` × capacity; returns allocation figures (percent of GPUs) and the
    stranded GPUs (engine mode)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown packing policy {policy!r} (one of {', '.join(POLICIES)})")
    cl = _Cluster(nodes, resources)
    fgd_sim = policy.startswith("fgd") and sim_rule
    if fgd_sim:
        cl.shuffle_ranks(random.Random((seed or 0) * 7919 + 13))  # noqa: S311 (simulation)
    if typical is None:
        typical = simulator_typical(pods) if fgd_sim else typical_of(pods)
    order_rng = random.Random(seed if seed is not None else 0)  # noqa: S311 (simulation)
    order = list(pods)
    if seed is not None:
        order_rng.shuffle(order)
    place_rng = random.Random((seed or 0) + 1_000_003)  # noqa: S311
    cap = cl.capacity
    arrived = placed = failed = 0
    at_100 = stranded_100 = None
    curve: dict[int, float] = {}
    stranded: dict[int, int] = {}  # per arrived-demand percent, as curve
    next_pct = 1
    k = 0
    gpu_pods = [p for p in pods if p.num_gpu > 0]
    while cap and arrived < upto * cap and gpu_pods:
        if k < len(order):
            pod = order[k]
        else:  # inflate: sample the list again
            pod = order_rng.choice(pods)
        k += 1
        milli = pod.num_gpu * FULL if pod.gpu_milli >= FULL else pod.gpu_milli
        if pod.num_gpu == 0:
            spot = _place_cpu_only(cl, pod, policy, typical, place_rng) if resources != "none" else None
            if spot is not None:
                cl.take_side(*spot, pod)
            continue
        if policy.startswith("fgd"):
            got = _place_fgd(cl, pod, milli, typical, place_rng if sim_rule else None, policy == "fgd-res")
        elif policy == "random":
            got = _place_random(cl, pod, milli, place_rng)
        else:
            got = _place_production(cl, pod, milli, frag=(policy == "ours"))
        if got is None:
            failed += 1
        else:
            cl.take(got[0], got[1], pod)
            placed += 1
        arrived += milli
        while next_pct <= int(upto * 100) and arrived >= next_pct * cap / 100:
            curve[next_pct] = round(100 * cl.used / cap, 3)
            stranded[next_pct] = cl.stranded()
            next_pct += 1
        if at_100 is None and arrived >= cap:
            at_100 = 100 * cl.used / cap
            stranded_100 = cl.stranded()
    return {"seed": seed, "allocation_at_100pct": None if at_100 is None else round(at_100, 3),
            "stranded_gpus_at_100pct": stranded_100,
            "stranded_gpus_mean": round(statistics.fmean(stranded.values()), 3) if stranded else 0.0,
            "placed": placed, "failed": failed, "arrived_pct": round(100 * arrived / cap, 3) if cap else 0,
            "allocated_gpus": round(cl.used / FULL, 3), "curve": curve, "stranded_curve": stranded}


def has_resources(nodes: list[NodeRow]) -> bool:
    """Does the node list carry CPU and memory (then ``run`` places them by default)?"""
    return any(n.cpu_milli or n.memory_mib for n in nodes if n.gpus > 0)


def _mean_of(runs: list[dict], key: str) -> float | None:
    vals = [r[key] for r in runs if r[key] is not None]
    return round(statistics.fmean(vals), 3) if vals else None


def published(path: str | Path | None = None, workload: str = "openb_pod_list_default",
              column: str = "100") -> dict[str, dict]:
    """Per policy of the FGD paper's ``analysis_allo_discrete.csv``: mean/min/max (%) at
    ``column`` (arrived demand in %) over the seeds of ``workload``."""
    vals: dict[str, list[float]] = {}
    try:
        with open(published_fgd_csv() if path is None else path, newline="") as fh:
            for r in csv.DictReader(fh):
                if r["workload"] == workload and r.get(column):
                    name = r["sc_policy"].split("-", 1)[-1]
                    vals.setdefault(name, []).append(float(r[column]))
    except FileNotFoundError:
        return {}
    return {k: {"mean": round(statistics.fmean(v), 2), "min": min(v), "max": max(v), "seeds": len(v)}
            for k, v in sorted(vals.items(), key=lambda kv: -statistics.fmean(kv[1]))}


def run(pods_csv, nodes_csv, *, policy: str = "fgd", seeds=tuple(range(42, 52)), progress=None,
        upto: float = 1.0, resources: str | None = None, published_csv=None) -> dict:
    """The experiment over ``seeds`` (see the module docstring for the result keys)."""
    t0 = time.perf_counter()
    nodes = [n for n in read_node_rows(nodes_csv) if n.gpus > 0]
    pods = read_pod_rows(pods_csv)
    if resources is None:  # with resources when the trace has them
        resources = "engine" if has_resources(nodes) else "none"
    typical = simulator_typical(pods) if policy.startswith("fgd") else typical_of(pods)
    runs = []
    for seed in ([None] if seeds is None else list(seeds)):
        runs.append(simulate(nodes, pods, policy=policy, seed=seed, upto=upto, resources=resources,
                             typical=typical))
        if progress is not None:
            last = runs[-1]
            progress(f"packing {policy} ({resources}) seed={seed}: {last['allocation_at_100pct']}% at 100%, "
                     f"{last['stranded_gpus_at_100pct']} GPUs stranded")
    vals = [r["allocation_at_100pct"] for r in runs if r["allocation_at_100pct"] is not None]
    workload = Path(pods_csv).stem
    return {
        "mode": "packing", "policy": policy, "workload": workload,
        "nodes": len(nodes), "gpus": sum(n.gpus for n in nodes), "pods": len(pods),
        "gpu_pods": sum(1 for p in pods if p.num_gpu > 0), "resources": resources,
        "seeds": None if seeds is None else list(seeds), "runs": runs,
        "allocation_at_100pct": round(statistics.fmean(vals), 3) if vals else None,
        "allocation_min": min(vals, default=None), "allocation_max": max(vals, default=None),
        "allocation_std": round(statistics.pstdev(vals), 3) if len(vals) > 1 else 0.0,
        "stranded_gpus_at_100pct": _mean_of(runs, "stranded_gpus_at_100pct"),
        "stranded_gpus_mean": _mean_of(runs, "stranded_gpus_mean"),
        "published": published(published_csv, workload),
        "wall_seconds": round(time.perf_counter() - t0, 3),
    }
