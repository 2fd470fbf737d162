"""Resource-aware FGD (issue 36 item 1, docs/scheduling.md "Packing"): a node's fragmentation
also counts the whole free GPUs its free CPU, memory or disk can no longer feed. Pure: no Django."""

from __future__ import annotations

import random

import pytest

from jobs.scheduler.engine.model import Node
from jobs.scheduler.engine.pool import Pool
from jobs.scheduler.placement import frag_amount, free_share, plan, plan_fgd, usable_after
from jobs.whatif.replay import packing
from jobs.whatif.replay.alibaba import NodeRow, PodRow

TYPICAL = [(0.8, 1, 1000, None), (0.2, 1, 500, None)]


def _pool() -> Pool:
    """Two 2-GPU nodes: "a" with 2 cores per GPU, "b" with 4 (memory not reported)."""
    return Pool("A", [Node("a", "A", 2, cpu_millicores=4000), Node("b", "A", 2, cpu_millicores=8000)])


def test_stranded_gpus_are_fragment_for_every_shape():
    free = [1000, 1000, 1000]
    assert frag_amount(free, TYPICAL) == 0  # GPUs only: every shape fits, nothing is fragment
    # one usable of three whole free GPUs: the two stranded ones (2,000 milli) are fragment for
    # both shapes, which still fit on the usable one
    assert frag_amount(free, TYPICAL, usable=1) == pytest.approx(2000)
    # none usable: no shape fits, all 3,000 milli is fragment
    assert frag_amount(free, TYPICAL, usable=0) == pytest.approx(3000)
    # a partly used GPU stays usable to the slice shape when its node's whole GPUs are stranded
    assert frag_amount([1000, 600], TYPICAL, usable=0) == pytest.approx(0.8 * 1600 + 0.2 * 1000)
    assert frag_amount(free, TYPICAL, usable=3) == frag_amount(free, TYPICAL)


def test_usable_after_follows_the_pools_own_rule():
    pool = _pool()
    assert pool.free == [2, 2]
    # 3 cores off "a" (2 per GPU) leave 1 core: no GPU fed, whatever GPUs are broken
    assert usable_after(pool, 0, 0, (3000, 0, 0)) == 0
    assert usable_after(pool, 0, 1, (1000, 0, 0)) == 1
    assert usable_after(pool, 1, 1, (3000, 0, 0)) == 1  # "b": 5 cores left feed its last GPU
    assert usable_after(pool, 0, 0, None) == pool.free[0]
    pool.take(0, (3000, 0, 0))  # the engine's own update agrees with the prediction
    assert pool.free[0] == usable_after(pool, 0, 0, None) == 0
    assert usable_after(Pool("A", [Node("x", "A", 2)]), 0, 1, (3000, 0, 0)) is None  # no resources


def test_a_worker_goes_where_it_strands_no_gpu():
    """A 1-GPU worker asking 3 cores: on "a" it leaves 1 core, which feeds neither free GPU (one
    stranded); on "b" 5 cores feed the last GPU. Plain FGD sees the same GPUs on both (a tie, pool
    order: "a"); resource-aware FGD takes "b", in both scoring rules."""
    pool = _pool()
    req = (3000, 0, 0)
    _, plain = plan_fgd(pool, 1, 1000, typical=TYPICAL)
    assert plain[0][0][0] == 0
    delta, aware = plan_fgd(pool, 1, 1000, typical=TYPICAL, req=req)
    assert aware[0][0][0] == 1 and delta == pytest.approx(0)
    score, sim = plan_fgd(pool, 1, 1000, typical=TYPICAL, req=req, rng=random.Random(0), rank=[0, 1])
    assert sim[0][0][0] == 1 and score == -50  # "a" would score 26 (+1,000 milli stranded)
    assert pool.used == [[0, 0], [0, 0]] and pool.res[0][0] == 4000 and pool.res[1][0] == 8000


def test_a_gang_sees_its_own_workers_resources_and_leaves_the_pool_as_it_was():
    pool = _pool()
    found = plan_fgd(pool, 2, 1000, typical=TYPICAL, req=(3000, 0, 0))
    assert found is not None
    # "b" feeds both workers (8 cores, 6 asked); one on "a" would strand its other GPU
    assert sorted(w[0][0] for w in found[1]) == [1, 1]
    assert pool.used == [[0, 0], [0, 0]] and [r[0] for r in pool.res] == [4000, 8000]
    assert pool.free == [2, 2]


def test_fgd_res_strands_no_gpu_where_fgd_does_in_the_engine_packing():
    """Two 2-GPU nodes, "a" with 2,000 MiB per GPU and "b" with 8,000. The first pod asks 3,000 MiB:
    on "a" it leaves 1,000 MiB, which feeds no GPU (one stranded). FGD's target workload does not
    carry memory, so plain FGD sees a tie and, by this run's node order, strands a GPU on "a" (the
    last small pod fails); resource-aware FGD puts it on "b" and every pod fits. Either node order."""
    pods = [PodRow("big", 100, 3000, 1, 1000, (), "LS", "", None, None)] + [
        PodRow(f"p{k}", 100, 100, 1, 1000, (), "LS", "", None, None) for k in range(3)]
    nodes = [NodeRow("a", 64000, 4000, 2, "A"), NodeRow("b", 64000, 16000, 2, "A")]
    plain = packing.simulate(nodes, pods, policy="fgd", seed=None)
    assert (plain["allocation_at_100pct"], plain["stranded_gpus_at_100pct"], plain["failed"]) == (75.0, 1, 1)
    for order in (nodes, nodes[::-1]):
        res = packing.simulate(order, pods, policy="fgd-res", seed=None)
        assert (res["allocation_at_100pct"], res["stranded_gpus_at_100pct"], res["failed"]) == (100.0, 0, 0)


def test_the_engines_best_fit_skips_a_node_it_would_strand():
    """``plan`` (the live engine's placement): a 1-GPU worker asking 3 cores. Both nodes have two
    usable GPUs (a best-fit tie, pool order: "a"), but on "a" it would strand the other GPU; it goes
    to "b". Without a request (a default job takes its GPUs' share) or in plain best fit: "a"."""
    pool = _pool()
    assert plan(pool, 1, 1000, req=(3000, 0, 0)) == [((1, 0, 1000),)]
    assert plan(pool, 1, 1000) == [((0, 0, 1000),)]
    assert plan(pool, 1, 1000, frag=False, req=(3000, 0, 0)) == [((0, 0, 1000),)]
    # every node would strand one: the plain best fit stands
    pool.take(1, (5000, 0, 0))  # "b": 3 cores left, usable 0 -> it no longer fits at all
    assert pool.free == [2, 0]
    assert plan(pool, 1, 1000, req=(3000, 0, 0)) == [((0, 0, 1000),)]


def test_a_shared_worker_breaks_a_gpu_only_where_its_request_strands_none():
    """A 500-milli worker asking 3 cores breaks a whole GPU: on "a" (first in pool order, the same
    usable GPUs as "b") its CPU would leave 1 core and strand "a"'s other GPU, so it goes to "b".
    When no node keeps its GPUs usable, the first fit stands."""
    pool = _pool()
    assert plan(pool, 1, 500, req=(3000, 0, 0)) == [((1, 0, 500),)]
    assert plan(pool, 1, 500, req=(1000, 0, 0)) == [((0, 0, 500),)]  # nothing stranded: pool order
    pool.take(1, (5000, 0, 0))  # "b": 3 cores, usable 0: no whole GPU of "b" may be broken
    assert plan(pool, 1, 500, req=(3000, 0, 0)) == [((0, 0, 500),)]


def test_free_share_counts_usable_whole_gpus():
    pool = _pool()
    assert free_share(pool) == 1.0
    pool.take(0, (3000, 0, 0))  # "a" keeps 1 core: its two free GPUs are stranded, not usable
    assert free_share(pool) == 0.5
    pool.occupy_slots([(1, 0, 1000)])
    assert free_share(pool) == 0.25
    assert free_share(Pool("A", [])) == 0.0


def test_fgd_res_breaks_a_tie_between_models_toward_the_emptier_one():
    """A 1-GPU pod allowed on A or B: each model has one 2-GPU node with the same free GPUs, so
    both score alike. Model A's other node is full; fgd-res picks B (the larger free share),
    even where A's node ranks first."""
    nodes = [NodeRow(f"{m}{k}", 64000, 262144, 2, m) for m, k in (("A", 0), ("A", 1), ("B", 0))]
    cl = packing._Cluster(nodes, "engine")
    cl.pools["A"].occupy_slots([(1, 0, 1000), (1, 1, 1000)])
    cl.rank = {"A": [0, 1], "B": [2]}
    pod = PodRow("p", 1000, 1024, 1, 1000, ("A", "B"), "", "Running", None, None)
    typical = [(1.0, 1, 1000, (0, ()))]
    assert packing._place_fgd(cl, pod, 1000, typical, random.Random(0), res_aware=True)[0] == "B"
    assert packing._place_fgd(cl, pod, 1000, typical, random.Random(0))[0] == "A"  # rank
