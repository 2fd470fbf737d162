"""Packing mode: FGD scoring by hand, FGD vs best fit, and that packing runs the production
placement code (jobs.scheduler.placement) on engine pools."""

from __future__ import annotations

import random

import pytest

import jobs.scheduler.placement as placement
from jobs.scheduler.engine.model import Node
from jobs.scheduler.engine.pool import Pool
from jobs.scheduler.placement import fgd_score, frag_amount, plan, plan_fgd
from jobs.whatif.replay import packing
from jobs.whatif.replay.alibaba import NodeRow, PodRow
from jobs.whatif.replay.paths import alibaba_dir

TRACE = alibaba_dir()


def _pod(k: int, g: int, m: int, cpu: int = 1000) -> PodRow:
    return PodRow(f"p{k}", cpu, 1000, g, m, (), "LS", "Running", 0.0, 1.0)


def _nodes(*gpus: int, cpu: int = 64000) -> list[NodeRow]:
    return [NodeRow(f"n{i}", cpu, 1 << 20, g, "A") for i, g in enumerate(gpus)]


TYPICAL = [(0.8, 1, 1000, None), (0.2, 1, 500, None)]


def test_frag_amount_by_hand():
    # whole-GPU shape: the 600 left on GPU 1 is unusable (0.8 * 600); the 500 shape fits both
    assert frag_amount([1000, 600], TYPICAL) == pytest.approx(480)
    assert frag_amount([1000, 1000], TYPICAL) == 0
    # no whole GPU left: all 1100 is fragment for the whole shape; the 500 shape fits
    assert frag_amount([500, 600], TYPICAL) == pytest.approx(880)
    assert frag_amount([1000, 100], TYPICAL) == pytest.approx(0.8 * 100 + 0.2 * 100)
    # a side resource that blocks a shape makes all free milli fragment for it
    assert frag_amount([1000, 1000], TYPICAL, side=0, host_ok=lambda s, t: False) == pytest.approx(2000)


def test_plan_fgd_two_nodes_by_hand():
    pool = Pool("A", [Node("a", "A", 2), Node("b", "A", 2)])
    pool.occupy(0, 1, 400)  # node a: [1000, 600] free, frag 480; node b: [1000, 1000], frag 0
    # 500 milli: a/GPU0 -> [500, 600] = 880 (+400); a/GPU1 -> [1000, 100] = 100 (-380);
    # b/GPU0 -> [500, 1000] = 400 (+400). FGD takes a/GPU1.
    delta, chosen = plan_fgd(pool, 1, 500, typical=TYPICAL)
    assert delta == pytest.approx(-380)
    assert chosen == [((0, 1, 500),)]
    assert plan(pool, 1, 500, typical=TYPICAL) == chosen
    # a whole GPU: a -> [0, 600] = 0.8*600 + 0 = 480 (+0); b -> [0, 1000] = 0 (+0): a tie, pool order
    delta, chosen = plan_fgd(pool, 1, 1000, typical=TYPICAL)
    assert delta == pytest.approx(0) and chosen == [((0, 0, 1000),)]
    # a 700 shape cannot use a's 600 either: 0.5 * 600 for each shape
    assert frag_amount([1000, 600], [(0.5, 1, 1000, None), (0.5, 1, 700, None)]) == pytest.approx(600)
    assert pool.used == [[0, 400], [0, 0]]  # planning never mutates the pool
    assert plan_fgd(pool, 1, 1000, typical=TYPICAL, side=lambda i: None) is None


def test_plan_fgd_gang_is_all_or_nothing():
    pool = Pool("A", [Node("a", "A", 2), Node("b", "A", 2)])
    found = plan_fgd(pool, 2, 2000, typical=[(1.0, 2, 1000, None)])
    assert found is not None and {w[0][0] for w in found[1]} == {0, 1}
    assert plan_fgd(pool, 3, 2000, typical=[(1.0, 2, 1000, None)]) is None
    assert pool.used == [[0, 0], [0, 0]]


def test_fgd_score_is_the_simulators_integer_sigmoid():
    # int(100 * sigmoid(-increase / 1000)): 50 when unchanged, 73 for -1000, 26 for +1000
    assert fgd_score(0) == 50 and fgd_score(-1000) == 73 and fgd_score(1000) == 26
    assert fgd_score(-380) == 59 and fgd_score(400) == 40
    assert fgd_score(-30) == fgd_score(0) == 50  # small differences tie


def test_plan_fgd_simulator_rule_by_hand():
    pool = Pool("A", [Node("a", "A", 2), Node("b", "A", 2)])
    pool.occupy(0, 1, 400)  # as above: a/GPU1 -380 -> 59, a/GPU0 and b/GPU0 +400 -> 40
    score, chosen = plan_fgd(pool, 1, 500, typical=TYPICAL, rng=random.Random(0))
    assert (score, chosen, plan_fgd.ties) == (-59, [((0, 1, 500),)], 1)
    # a whole GPU: both nodes +0 -> 50, a tie: a uniformly random node (not the fullest)
    picked = set()
    for seed in range(20):
        score, chosen = plan_fgd(pool, 1, 1000, typical=TYPICAL, rng=random.Random(seed))
        assert score == -50 and plan_fgd.ties == 2
        picked.add(chosen[0][0][0])
    assert picked == {0, 1}
    # with node ranks (the simulator's per-run name order) the tie goes to the lowest rank
    for rank in ([0, 1], [1, 0]):
        score, chosen = plan_fgd(pool, 1, 1000, typical=TYPICAL, rng=random.Random(7), rank=rank)
        assert score == -50 and chosen[0][0][0] == rank.index(0)
    # on one node, equal scores go to the first GPU: b's two free GPUs tie for a 500 slice
    pool.occupy(0, 0, 1000)
    pool.occupy(0, 1, 600)
    score, chosen = plan_fgd(pool, 1, 500, typical=TYPICAL, rng=random.Random(1))
    assert chosen == [((1, 0, 500),)]
    assert pool.used == [[1000, 1000], [0, 0]]


def test_typical_of_popularity_cut_and_cpu_pods():
    pods = ([_pod(k, 1, 1000) for k in range(3)] + [_pod(k, 1, 500) for k in range(3, 5)]
            + [_pod(5, 2, 1000), _pod(6, 0, 0)])
    assert typical_of_shapes(packing.typical_of(pods)) == [(0.5, 1, 1000), (2 / 6, 1, 500), (1 / 6, 2, 1000)]
    # the simulator's GetTypicalPods: CPU pods count; take shapes until >= 60 % of 7 (4.2): 3 + 2
    assert typical_of_shapes(packing.typical_of(pods, popularity=0.6, cpu_pods=True)) == [
        (0.6, 1, 1000), (0.4, 1, 500)]
    assert (1 / 7, 0, 0) in typical_of_shapes(packing.typical_of(pods, cpu_pods=True))


def typical_of_shapes(typical):
    return [(pytest.approx(p), g, m) for p, g, m, _ in typical]


def test_fgd_beats_best_fit_on_a_small_cluster():
    """The exact rule (least increase): the simulator's integer score ties such small increases."""
    nodes = _nodes(2, 4)
    pods = [_pod(0, 1, 300), _pod(1, 1, 500), _pod(2, 1, 700)]
    res = {p: packing.simulate(nodes, pods, policy=p, seed=None, sim_rule=False)["allocation_at_100pct"]
           for p in ("fgd", "bestfit", "ours")}
    assert res["fgd"] == 100.0
    assert res["fgd"] > res["bestfit"] and res["fgd"] > res["ours"]


def test_the_simulator_rule_breaks_ties_by_one_node_order_per_run():
    """Every whole-GPU pod ties (score 50) on empty nodes: a run fills the nodes in its own random
    order, the same order for every pod of the run, and another seed draws another order."""
    nodes = _nodes(*[2] * 6)
    pods = [_pod(k, 1, 1000) for k in range(6)]

    def fill_order(seed):
        cl = packing._Cluster(nodes)
        cl.shuffle_ranks(random.Random(seed))
        typical = packing.typical_of(pods)
        taken = []
        for pod in pods:
            model, placement_ = packing._place_fgd(cl, pod, 1000, typical, random.Random(0))
            cl.take(model, placement_, pod)
            taken.append(placement_[0][0][0])
        by_rank = sorted(range(6), key=cl.rank["A"].__getitem__)
        return taken, by_rank

    taken, by_rank = fill_order(1)
    # each node's two GPUs fill before the next node in rank order (the fuller node scores as well)
    assert taken == [by_rank[0], by_rank[0], by_rank[1], by_rank[1], by_rank[2], by_rank[2]]
    assert fill_order(2)[1] != by_rank


def test_cpu_only_pods_by_the_simulators_score_then_rank():
    nodes = [NodeRow("a", 8000, 1 << 20, 2, "A"), NodeRow("b", 8000, 1 << 20, 2, "A")]
    cl = packing._Cluster(nodes, "fit")  # the simulator's fit: its CPU figures beside the pools
    cl.rank = {"A": [1, 0]}
    typical = [(1.0, 1, 1000, (4000, ()))]  # whole GPUs that need 4 cores each
    cpu_pod = _pod(9, 0, 0, cpu=3000)
    assert packing._place_cpu_only(cl, cpu_pod, "fgd", typical, random.Random(0)) == ("A", 1)  # a tie: rank
    cl.cpu["A"][1] = 6000  # b would drop below 4 cores and strand its 2 GPUs; a keeps 5 of 8
    assert packing._place_cpu_only(cl, cpu_pod, "fgd", typical, random.Random(0)) == ("A", 0)


def test_placement_flag_changes_packing():
    """GPUs only: the fragmentation flag of the production placement changes where pods go (with
    resources the engine places a shared worker where its request fits, whatever the flag)."""
    nodes = _nodes(4, 4, 4)
    pods = [_pod(0, 2, 1000), _pod(1, 2, 1000), _pod(2, 1, 300), _pod(3, 1, 700), _pod(4, 1, 500),
            _pod(5, 1, 700)]
    plain = packing.simulate(nodes, pods, policy="bestfit", seed=None, resources="none")
    aware = packing.simulate(nodes, pods, policy="ours", seed=None, resources="none")
    assert plain["allocation_at_100pct"] != aware["allocation_at_100pct"]


@pytest.mark.parametrize(("resources", "planner", "refuse"), [
    ("engine", "_plan_shared_res", lambda pool, milli, req: None),
    ("none", "_plan_shared", lambda pool, milli, frag: None),
])
def test_packing_calls_the_production_placement(monkeypatch, resources, planner, refuse):
    nodes = _nodes(2, 2)
    pods = [_pod(0, 1, 500), _pod(1, 1, 1000)]
    before = packing.simulate(nodes, pods, policy="ours", seed=None, resources=resources)
    assert before["allocation_at_100pct"] == 100.0
    monkeypatch.setattr(placement, planner, refuse)
    after = packing.simulate(nodes, pods, policy="ours", seed=None, resources=resources)
    assert after["allocation_at_100pct"] < 100.0 and after["failed"] > 0


def test_cpu_blocks_a_node_under_the_simulators_fit():
    nodes = [NodeRow("small", 2000, 1 << 20, 2, "A"), NodeRow("big", 64000, 1 << 20, 2, "A")]
    pods = [_pod(0, 1, 1000, cpu=4000), _pod(1, 1, 1000, cpu=4000), _pod(2, 1, 1000, cpu=4000)]
    for policy in packing.POLICIES:
        res = packing.simulate(nodes, pods, policy=policy, seed=None, resources="fit")
        assert res["allocation_at_100pct"] == 50.0, policy  # only "big" can host them
    free = packing.simulate(nodes, pods, policy="bestfit", seed=None, resources="none")
    assert free["allocation_at_100pct"] == 100.0


def test_the_engine_places_by_the_flavors_share_so_a_small_node_refuses_everywhere():
    """Engine mode: a flavor's share is its smallest node's (1 core per GPU on "small"), so a worker
    asking 4 cores takes a footprint of 4 GPUs — more than any node of the flavor has: it fits
    nowhere, as a portal job of that flavor would not (docs/resources.md). With a flavor per node
    size it fits on "big"."""
    nodes = [NodeRow("small", 2000, 1 << 20, 2, "A"), NodeRow("big", 64000, 1 << 20, 2, "A")]
    pods = [_pod(0, 1, 1000, cpu=4000), _pod(1, 1, 1000, cpu=4000)]
    for policy in packing.POLICIES:
        res = packing.simulate(nodes, pods, policy=policy, seed=None)
        assert (res["allocation_at_100pct"], res["placed"]) == (0.0, 0), policy
        # one flavor per node size: "big" has its own share (32 cores per GPU) and takes both
        sized = packing.simulate(nodes, pods, policy=policy, seed=None, resources="engine-by-size")
        assert (sized["allocation_at_100pct"], sized["placed"]) == (50.0, 2), policy


def test_memory_strands_gpus_the_simulators_fit_would_still_use():
    """One node of 4 GPUs and 4,000 MiB (1,000 MiB per GPU). A pod asking 3,000 MiB takes one GPU
    and leaves 1,000 MiB: at the share that feeds one GPU, so two free GPUs are stranded; the
    next pod takes the last usable GPU and the two after it fail. The simulator's fit (a pod fits
    where its own request is free) places all four."""
    nodes = [NodeRow("n", 64000, 4000, 4, "A")]
    pods = [PodRow("big", 1000, 3000, 1, 1000, (), "LS", "", None, None)] + [
        PodRow(f"p{k}", 1000, 100, 1, 1000, (), "LS", "", None, None) for k in range(3)]
    for policy in packing.POLICIES:
        res = packing.simulate(nodes, pods, policy=policy, seed=None)
        got = (res["allocation_at_100pct"], res["stranded_gpus_at_100pct"], res["failed"])
        assert got == (50.0, 2, 2), policy
        assert res["stranded_curve"][100] == 2 and res["stranded_gpus_mean"] > 0
        fit = packing.simulate(nodes, pods, policy=policy, seed=None, resources="fit")
        assert (fit["allocation_at_100pct"], fit["stranded_gpus_at_100pct"]) == (100.0, 0), policy


def test_a_cpu_only_pod_takes_its_cpu_from_the_engine_pool():
    """A CPU-only pod holds no GPU, but its CPU is taken from the engine's node (Pool.take), so
    the GPUs its CPU leaves unfed are stranded and the next GPU pod fails."""
    nodes = [NodeRow("n", 4000, 1 << 20, 2, "A")]  # 2,000 millicores per GPU
    pods = [PodRow("cpu", 3000, 100, 0, 0, (), "LS", "", None, None),
            PodRow("g0", 500, 100, 1, 1000, (), "LS", "", None, None),
            PodRow("g1", 500, 100, 1, 1000, (), "LS", "", None, None)]
    res = packing.simulate(nodes, pods, policy="bestfit", seed=None)
    assert (res["allocation_at_100pct"], res["stranded_gpus_at_100pct"], res["placed"]) == (0.0, 2, 0)
    none = packing.simulate(nodes, pods, policy="bestfit", seed=None, resources="none")
    assert none["allocation_at_100pct"] == 100.0


def test_unknown_resources_mode():
    with pytest.raises(ValueError):
        packing.simulate(_nodes(2), [_pod(0, 1, 1000)], resources="nope")


def test_gpu_spec_restricts_models():
    nodes = [NodeRow("a", 64000, 1 << 20, 2, "T4"), NodeRow("b", 64000, 1 << 20, 2, "V100")]
    pods = [PodRow(f"p{k}", 1000, 1000, 1, 1000, ("V100",), "LS", "", None, None) for k in range(4)]
    for policy in packing.POLICIES:
        res = packing.simulate(nodes, pods, policy=policy, seed=None)
        assert res["allocation_at_100pct"] == 50.0, policy


def test_unknown_policy():
    with pytest.raises(ValueError):
        packing.simulate(_nodes(2), [_pod(0, 1, 1000)], policy="nope")


@pytest.mark.usefixtures("openb")
def test_published_table_and_random_policy_on_the_real_trace():
    pub = packing.published()
    assert pub["FGD"]["mean"] == 95.23 and pub["BestFit"]["mean"] == 92.86 and pub["Random"]["mean"] == 86.3
    res = packing.run(TRACE / "csv/openb_pod_list_default.csv", TRACE / "csv/openb_node_list_gpu_node.csv",
                      policy="random", seeds=[42], resources="fit")
    assert (res["nodes"], res["gpus"], res["pods"], res["gpu_pods"]) == (1213, 6212, 8152, 7064)
    assert 84 < res["allocation_at_100pct"] < 89  # the simulator's fit: comparable with the paper's
    assert res["published"]["FGD"]["mean"] == 95.23


def test_fgd_breaks_a_whole_gpu_for_a_slice_only_where_the_node_can_feed_it():
    """As the engine's shared placement: a slice may go onto a partly used GPU of a node whose
    memory is short, but it breaks a whole GPU only on a node with usable GPUs (Pool.free)."""
    pool = Pool("A", [Node("a", "A", 2, memory_mib=2000), Node("b", "A", 2, memory_mib=2000)])
    pool.take(0, (0, 1500, 0))  # a: 500 MiB left, under one GPU's share (1,000): both GPUs stranded
    assert (pool.whole, pool.free) == ([2, 2], [0, 2])
    for rng in (None, random.Random(3)):
        found = plan_fgd(pool, 1, 500, typical=TYPICAL, rng=rng)
        assert found[1][0][0][0] == 1  # b, not a's stranded GPUs
    pool.occupy(0, 1, 300)  # a now has a partly used GPU with 700 free

    def only_a(i):
        return (None, None) if i == 0 else None

    for rng in (None, random.Random(3)):
        found = plan_fgd(pool, 1, 500, typical=TYPICAL, rng=rng, side=only_a)
        assert found[1] == [((0, 1, 500),)]  # on a only the partly used GPU 1, never GPU 0
