"""A job's workers all run inside ONE cluster (issue 18, item 3).

A pool holds the schedulable nodes of one flavor across every cluster; a backend runs a job on
one cluster only, so a placement that spans two fails at dispatch. Every path that chooses GPUs
for a multi-worker job — planning (fragmentation-aware, plain best fit, FGD), reservations,
reclaim and priority preemption, elastic sizing, explain — keeps the gang in one cluster.

The two clusters below name their topology alike (zone z1, spine s0, leaf l0): names are per
cluster, so a leaf or spine must never span two of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest
from coresnap import F, queued, running, snapshot, tree

from jobs.scheduler.engine.model import Node
from jobs.scheduler.placement import FULL, Pool, plan, plan_fits
from jobs.scheduler.scheduler import Engine, schedule

EIGHT = 8 * FULL
TYPICAL = ((1.0, 8, FULL, None),)  # FGD's target workload: whole 8-GPU pods


def two_clusters(a: int, b: int, per_node: int = 8) -> tuple[Node, ...]:
    """Cluster cA with ``a`` nodes (``cA-0`` …), cB with ``b``; same topology names in both."""
    return tuple(Node(f"{c}-{i}", F, per_node, "z1", "s0", "l0", cluster=c)
                 for c, n in (("cA", a), ("cB", b)) for i in range(n))


def clusters_of(placement: Iterable) -> set[str]:
    """Cluster names of an admission's placement (node ids carry them)."""
    return {node.split("-")[0] for worker in placement for node, _, _ in worker}


def pool_clusters(pool: Pool, placement) -> set[str]:
    return {pool.cluster[i] for worker in placement for i, _, _ in worker}


# -- the pool and planning -----------------------------------------------------------------
def test_item3_a_leaf_or_spine_never_spans_two_clusters():
    pool = Pool(F, two_clusters(1, 1))
    assert pool.leaf_of[0] != pool.leaf_of[1]
    assert pool.leaf_spine[pool.leaf_of[0]] != pool.leaf_spine[pool.leaf_of[1]]


@pytest.mark.parametrize("mode", ["frag", "plain", "fgd"])
def test_item3_a_gang_is_planned_inside_one_cluster_or_not_at_all(mode):
    kw = {"frag": mode == "frag"} if mode != "fgd" else {"typical": TYPICAL}
    split = Pool(F, two_clusters(1, 1))  # 16 GPUs free, 8 per cluster
    assert plan(split, 2, EIGHT, **kw) is None
    assert not plan_fits(split, 2, EIGHT)
    assert split.gang_capacity(8) == 1 and split.whole_capacity(8) == 2
    room = Pool(F, two_clusters(1, 2))  # cB has the two nodes
    placed = plan(room, 2, EIGHT, **kw)
    assert placed is not None and pool_clusters(room, placed) == {"cB"}
    assert len({i for worker in placed for i, _, _ in worker}) == 2


@pytest.mark.parametrize("frag", [True, False])
def test_item3_workers_of_a_smaller_shape_also_stay_in_one_cluster(frag):
    # 4-GPU workers: cA-0 has 4 free, cB has 8 + 4 free; three workers fit only in cB.
    pool = Pool(F, two_clusters(2, 2))
    for g in range(4):
        pool.occupy(0, g, FULL)  # cA-0 half used
    for g in range(8):
        pool.occupy(1, g, FULL)  # cA-1 full
    for g in range(4):
        pool.occupy(3, g, FULL)  # cB-1 half used
    placed = plan(pool, 3, 4 * FULL, frag=frag)
    assert placed is not None and pool_clusters(pool, placed) == {"cB"}
    assert plan(pool, 4, 4 * FULL, frag=frag) is None  # 4 workers fit only split


# -- through the cycle ---------------------------------------------------------------------
@pytest.mark.parametrize("frag", [True, False])
def test_item3_a_gang_waits_rather_than_span_clusters_then_runs_whole_in_one(frag):
    tl = tree({"D": (24, {"a": 24})})
    job = queued("g", "a", 8, workers=2)
    result = schedule(snapshot(two_clusters(1, 1), tl, [], [job]), fragmentation_aware=frag)
    assert result.admissions == ()
    why = result.explanations["g"]
    assert why.reason == "capacity" and "one cluster" in why.message
    assert dict(why.numbers)["largest_cluster"] == EIGHT
    assert result.reservations == ()  # no time at which one cluster holds it
    result = schedule(snapshot(two_clusters(1, 2), tl, [], [job]), fragmentation_aware=frag)
    [adm] = result.admissions
    assert adm.workers == 2 and clusters_of(adm.placement) == {"cB"}


def test_item3_explain_does_not_claim_that_room_split_across_clusters_fits():
    # cA-0 and cB-0 busy (b, in quota, no end): one free node per cluster.
    tl = tree({"D": (32, {"a": 16, "b": 16})})
    run = [running("ra", "b", "cA-0", 8), running("rb", "b", "cB-0", 8)]
    result = schedule(snapshot(two_clusters(2, 2), tl, run, [queued("g", "a", 8, workers=2)]))
    assert result.admissions == () and result.preemptions == ()
    why = result.explanations["g"]
    assert why.reason == "placement" and "split across clusters" in why.message
    assert dict(why.numbers)["largest_free_cluster"] == EIGHT


def test_item3_an_elastic_job_starts_at_the_largest_count_one_cluster_takes():
    tl = tree({"D": (24, {"a": 24})})
    job = queued("e", "a", 8, workers=3, min_workers=1)
    [adm] = schedule(snapshot(two_clusters(1, 2), tl, [], [job])).admissions
    assert adm.workers == 2 and clusters_of(adm.placement) == {"cB"}


@pytest.mark.parametrize("frag", [True, False])
def test_item3_a_reservation_is_planned_inside_one_cluster(frag):
    """cA-0 frees at +1 h, cB-0 at +2 h, cB-1 at +3 h: the gang can start at +3 h on cB,
    never at +2 h on cA-0 + cB-0."""
    tl = tree({"D": (40, {"a": 16, "b": 24})})  # b in quota: nothing to reclaim
    run = [running("r1", "b", "cA-0", 8, age_s=0, runtime=3600),
           running("r2", "b", "cB-0", 8, age_s=0, runtime=7200),
           running("r3", "b", "cB-1", 8, age_s=0, runtime=10800)]
    result = schedule(snapshot(two_clusters(1, 2), tl, run, [queued("g", "a", 8, workers=2)]),
                      fragmentation_aware=frag)
    [res] = result.reservations
    assert res.nodes == ("cB-0", "cB-1")
    assert (res.earliest_start - run[2].started_at).total_seconds() == 10800


def test_item3_no_reservation_when_no_cluster_can_ever_hold_the_gang():
    tl = tree({"D": (32, {"a": 16, "b": 16})})
    run = [running("r1", "b", "cA-0", 8, age_s=0, runtime=3600),
           running("r2", "b", "cB-0", 8, age_s=0, runtime=3600)]
    result = schedule(snapshot(two_clusters(1, 1), tl, run, [queued("g", "a", 8, workers=2)]))
    assert result.admissions == () and result.reservations == ()


# -- preemption ----------------------------------------------------------------------------
def test_item3_reclaim_never_takes_victims_in_two_clusters():
    """a is owed 16 GPUs; b borrows both nodes, one per cluster. Freeing both would give a
    16 GPUs split over two clusters: nobody is reclaimed, the gang waits."""
    tl = tree({"D": (16, {"a": 16, "b": 0})})
    run = [running("l1", "b", "cA-0", 8), running("l2", "b", "cB-0", 8)]
    result = schedule(snapshot(two_clusters(1, 1), tl, run, [queued("g", "a", 8, workers=2)]))
    assert result.preemptions == () and result.admissions == ()
    assert result.explanations["g"].reason == "capacity"


def test_item3_reclaim_frees_room_inside_one_cluster():
    """Rule 5 takes the most recent on-loan job first (l3 on cB), but that frees one node of
    cB only; the gang reclaims the two jobs on cA and l3 keeps running."""
    tl = tree({"D": (24, {"a": 16, "b": 0})})
    run = [running("l1", "b", "cA-0", 8, age_s=3000), running("l2", "b", "cA-1", 8, age_s=2000),
           running("l3", "b", "cB-0", 8, age_s=1000)]
    result = schedule(snapshot(two_clusters(2, 1), tl, run, [queued("g", "a", 8, workers=2)]))
    assert sorted(p.victim_id for p in result.preemptions) == ["l1", "l2"]
    [adm] = result.admissions
    assert clusters_of(adm.placement) == {"cA"} and sorted(adm.preempts) == ["l1", "l2"]


def test_a_shared_request_reclaims_in_a_pool_of_two_clusters():
    """The per-cluster paper room also serves one-GPU-share requests (found by the property
    tests: its counts were indexed by cluster for a shared request too)."""
    tl = tree({"D": (16, {"a": 1, "b": 0})})
    run = [running("l1", "b", "cA-0", 8, age_s=3000), running("l2", "b", "cB-0", 8, age_s=1000)]
    result = schedule(snapshot(two_clusters(1, 1), tl, run, [queued("s", "a", milli=500)]))
    assert [p.victim_id for p in result.preemptions] == ["l2"]  # the most recent on-loan job
    [adm] = result.admissions
    assert adm.placement == ((("cB-0", 0, 500),),)


def test_item3_priority_preemption_never_takes_victims_in_two_clusters():
    tl = tree({"D": (16, {"a": 16})})
    run = [running("lo1", "a", "cA-0", 8, priority=10), running("lo2", "a", "cB-0", 8, priority=10)]
    job = queued("hi", "a", 8, workers=2, priority=500)
    result = schedule(snapshot(two_clusters(1, 1), tl, run, [job]))
    assert result.preemptions == () and result.admissions == ()
    # With both victims in one cluster the same gang preempts them.
    nodes = two_clusters(0, 2)
    run = [running("lo1", "a", "cB-0", 8, priority=10), running("lo2", "a", "cB-1", 8, priority=10)]
    result = schedule(snapshot(nodes, tl, run, [job]))
    assert sorted(p.victim_id for p in result.preemptions) == ["lo1", "lo2"]


def test_item3_a_warm_engine_keeps_gangs_in_one_cluster_as_a_cold_one():
    tl = tree({"D": (40, {"a": 24, "b": 16})})
    nodes = two_clusters(2, 3)
    eng = Engine(snapshot(nodes, tl, [running("r", "b", "cB-0", 8, runtime=600, age_s=0)], []))
    eng.cycle()
    jobs = [queued("g3", "a", 8, workers=3, age_s=30), queued("g2", "b", 8, workers=2, age_s=20)]
    eng.submit(jobs)
    warm = eng.cycle()
    cold = schedule(snapshot(nodes, tl, [running("r", "b", "cB-0", 8, runtime=600, age_s=0)], jobs))
    assert warm.admissions == cold.admissions and warm.reservations == cold.reservations
    for adm in warm.admissions:
        assert len(clusters_of(adm.placement)) == 1


def test_item3_a_gang_no_cluster_can_hold_does_not_hold_growth_back():
    """Queued jobs that room would not let in do not stop running elastic jobs from growing;
    a gang larger than every cluster is one of them."""
    tl = tree({"D": (16, {"a": 16, "b": 16})})
    e = replace(running("e", "b", "cB-0", 4), worker_milli=1000, grow_to=8)
    result = schedule(snapshot(two_clusters(1, 1), tl, [e], [queued("g", "a", 8, workers=2)]))
    assert result.admissions == ()
    assert [(x.job_id, x.workers) for x in result.growths] == [("e", 8)]
