"""DESIGN §5.3 placement: topology- and fragmentation-aware, per-node flavors, shared GPUs."""

from __future__ import annotations

import pytest
from coresnap import cluster

from jobs.scheduler.engine.model import Node
from jobs.scheduler.placement import FULL, Pool, commit, plan


def pool_of(nodes, used=()):
    """``used``: (node index, gpu, milli) occupied before planning."""
    pool = Pool(nodes[0].flavor, nodes)
    for i, g, m in used:
        pool.occupy(i, g, m)
    return pool


def nodes_of(placement, pool):
    return [pool.ids[w[0][0]] for w in placement]


def leaves_of(placement, pool):
    return {pool.leaf_of[w[0][0]] for w in placement}


def test_worker_gpus_are_on_one_node():
    pool = pool_of(cluster(4))
    for w in plan(pool, 3, 4 * FULL):
        assert len({i for i, _, _ in w}) == 1 and len(w) == 4


def test_gang_is_all_or_nothing():
    pool = pool_of(cluster(2), [(0, g, FULL) for g in range(5)])  # 3 + 8 free
    assert plan(pool, 3, 4 * FULL) is None  # two workers fit (both on n001), not three
    assert len(plan(pool, 2, 4 * FULL)) == 2
    assert pool.used[1] == [0] * 8  # planning never touches the pool


def test_gang_goes_to_the_fewest_leaves_then_spines():
    # 4 leaves of 4 nodes, 2 leaves per spine; leaf 0 has 3 free nodes, leaf 1 all 4.
    pool = pool_of(cluster(16), [(0, g, FULL) for g in range(8)])
    placed = plan(pool, 4, 8 * FULL)
    assert leaves_of(placed, pool) == {1}  # one leaf that fits, best fit among them
    placed = plan(pool, 3, 8 * FULL)
    assert leaves_of(placed, pool) == {0}  # the leaf with exactly 3 free nodes
    placed = plan(pool, 7, 8 * FULL)
    assert len(leaves_of(placed, pool)) == 2
    assert {pool.leaf_spine[li] for li in leaves_of(placed, pool)} == {0}


def test_gang_spanning_spines_only_when_one_spine_is_too_small():
    pool = pool_of(cluster(16))
    placed = plan(pool, 9, 8 * FULL)
    spines = {pool.leaf_spine[li] for li in leaves_of(placed, pool)}
    assert len(leaves_of(placed, pool)) == 3 and len(spines) == 2


def test_small_jobs_best_fit_into_partly_used_nodes():
    pool = pool_of(cluster(4), [(2, g, FULL) for g in range(5)])  # node 2 has 3 free
    assert nodes_of(plan(pool, 1, 2 * FULL), pool) == ["n002"]
    assert nodes_of(plan(pool, 1, 4 * FULL), pool) != ["n002"]


def test_single_workers_keep_whole_leaves_free():
    pool = pool_of(cluster(8), [(5, 0, FULL)])  # leaf 1 (nodes 4-7) is broken already
    assert nodes_of(plan(pool, 1, 8 * FULL), pool)[0] in {"n004", "n006", "n007"}
    plain = plan(pool, 1, 8 * FULL, frag=False)
    assert nodes_of(plain, pool) == ["n000"]  # plain best fit ignores leaves


def test_mig_slice_flavor_only_on_nodes_of_that_flavor():
    mig = [Node(f"m{i}", "A100-1g.10gb", 56, "z1", "s0", "l9") for i in range(2)]
    pool = Pool("A100-1g.10gb", mig)
    placed = plan(pool, 1, 3 * FULL)
    assert nodes_of(placed, pool)[0].startswith("m")
    assert Pool("A100", [n for n in mig if n.flavor == "A100"]).capacity == 0


def test_shared_requests_pack_onto_one_gpu_by_milli():
    pool = pool_of(cluster(1))
    first = plan(pool, 1, 300)
    commit(pool, first)
    second = plan(pool, 1, 600)
    assert second[0][0][:2] == first[0][0][:2]  # same physical GPU: 300 + 600 <= 1000
    commit(pool, second)
    third = plan(pool, 1, 200)
    assert third[0][0][:2] != first[0][0][:2]  # 100 left there is too little
    assert pool.used[0][first[0][0][1]] == 900


@pytest.mark.parametrize(("frag", "breaks_whole_gpu"), [(True, False), (False, True)])
def test_fragmentation_aware_keeps_whole_gpus_plain_best_fit_does_not(frag, breaks_whole_gpu):
    # node 0: 6 whole GPUs used, 2 free; node 1: one GPU with 700 used, 7 free.
    nodes = cluster(2)
    pool = pool_of(nodes, [(0, g, FULL) for g in range(6)] + [(1, 0, 700)])
    placed = plan(pool, 1, 300, frag=frag)
    i, g, _ = placed[0][0]
    assert (pool.used[i][g] == 0) is breaks_whole_gpu


def test_external_usage_and_unschedulable_nodes_are_respected():
    nodes = [Node("a", "A100", 8, external_milli=(1000,) * 8), Node("b", "A100", 8)]
    pool = Pool("A100", nodes)
    assert nodes_of(plan(pool, 1, 8 * FULL), pool) == ["b"]
    assert plan(pool, 2, 8 * FULL) is None
