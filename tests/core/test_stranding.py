"""Stranded GPUs of a node (DESIGN §15, docs/resources.md "Stranded GPUs in the figures"): the pure
count the node map, the API, the metrics and the dashboard show (``footprint.stranding``) is the
count the engine's placement works with, over random nodes and the running jobs real cycles
leave on them."""

from __future__ import annotations

from collections import defaultdict

from coresnap import NOW, F
from hypothesis import given
from test_resource_properties import SETTINGS, TREE, run_stream, worlds

from jobs.scheduler.footprint import Held, NodeSize, Request, Stranding, stranding
from jobs.scheduler.scheduler import Engine, Snapshot

A100 = NodeSize(8, cpu_millicores=96_000, memory_mib=1_048_576, local_disk_gib=4_000)


def test_a_cpu_heavy_job_strands_the_gpus_its_cores_would_have_fed():
    # one GPU with 90 of 96 cores: 7 GPUs free, 6 cores left feed none at 12 cores a GPU
    found = stranding(A100, 7, [Held(1000, Request(90_000, 131_072, 500))])
    assert found == Stranding(free=7, usable=0)
    assert found.stranded == 7
    # half the cores: 4 of the 7 free GPUs can still be fed, 3 are stranded
    assert stranding(A100, 7, [Held(1000, Request(48_000, 1_024, 1))]).stranded == 3


def test_jobs_that_ask_nothing_hold_their_gpus_share_and_strand_nothing():
    assert stranding(A100, 5, [Held(3000)]) == Stranding(free=5, usable=5)
    # a shared worker's share rounds up: 0.5 GPU holds 6 cores, never less
    assert stranding(A100, 7, [Held(500), Held(500)]).stranded == 0


def test_the_binding_dimension_is_whichever_runs_out_first():
    # memory: 1 TiB ÷ 8 = 128 GiB a GPU; 900 GiB held leaves 124 GiB: no GPU can be fed
    assert stranding(A100, 6, [Held(2000, Request(24_000, 921_600, 1_000))]).usable == 0
    # disk: 500 GiB a GPU; 3,000 GiB held leaves 1,000: two of the six
    assert stranding(A100, 6, [Held(2000, Request(24_000, 262_144, 3_000))]).usable == 2


def test_a_node_that_reports_no_cpu_memory_or_disk_strands_nothing():
    bare = NodeSize(8)
    assert stranding(bare, 6, [Held(2000, Request(96_000, 1_048_576, 4_000))]) == Stranding(6, 6)
    # one figure reported constrains only that one
    cpu_only = NodeSize(8, cpu_millicores=16_000)
    assert stranding(cpu_only, 6, [Held(2000, Request(14_000, 10**9, 10**6))]) == Stranding(6, 1)


def _held_of(snap: Snapshot) -> dict[str, list[Held]]:
    """Per node, what the snapshot's running jobs hold: a worker's request on its first node,
    or — a job that asked nothing — its GPUs on each node (the snapshot's own convention)."""
    held: dict[str, list[Held]] = defaultdict(list)
    for job in snap.running:
        per_node: dict[str, int] = defaultdict(int)
        for node, _gpu, milli in job.placement:
            per_node[node] += milli
        if job.requests:
            for node, cpu, memory, disk in job.requests:
                held[node].append(Held(0, Request(cpu, memory, disk)))
        else:
            for node, milli in per_node.items():
                held[node].append(Held(milli))
    return held


@SETTINGS
@given(worlds)
def test_the_stranded_count_is_the_one_the_engine_places_with(world):
    """Random nodes, random jobs through four real cycles: on every node at every cycle, the pure
    count's usable GPUs are the engine pool's placeable ones and its free GPUs the pool's whole
    free ones — what the pages report stranded is exactly what placement cannot use."""
    def check(snap, _result, _asked):
        pool = Engine(snap).state.pools[F]
        held = _held_of(snap)
        for n in snap.nodes:
            if n.id not in pool.index:
                continue  # not schedulable: not in the pool
            i = pool.index[n.id]
            free = pool.whole[i] if pool.whole is not None else pool.free[i]
            size = NodeSize(n.gpus, n.cpu_millicores, n.memory_mib, n.local_disk_gib)
            assert stranding(size, free, held[n.id]) == Stranding(free, pool.free[i]), n.id

    run_stream(world, check)


def test_the_property_world_does_strand_gpus():
    """The property above is not vacuous: a world of its kind where a CPU-heavy job runs leaves
    stranded GPUs that the pool and the pure count agree on."""
    from jobs.scheduler.scheduler import Node, RunningJob

    node = Node("n0", F, 8, "z", "s0", "l0", cpu_millicores=96_000, memory_mib=1_048_576,
                local_disk_gib=4_000)
    heavy = RunningJob("r", "pa", F, 100, True, NOW, None, (("n0", 0, 1000),),
                       requests=(("n0", 90_000, 1_024, 0),))
    snap = Snapshot(NOW, (node,), TREE, {}, (heavy,), ())
    pool = Engine(snap).state.pools[F]
    assert (pool.whole[0], pool.free[0]) == (7, 0)
    assert stranding(NodeSize(8, 96_000, 1_048_576, 4_000), 7, _held_of(snap)["n0"]).stranded == 7


def test_explain_counts_the_largest_free_node_in_usable_gpus():
    """Two nodes, each with 3 free GPUs of which its cores feed one: a 4-GPU worker fits on no
    node, and "the largest free node" is 1 usable GPU, not the 3 free ones."""
    from coresnap import limits

    from jobs.scheduler.scheduler import Node, QueuedJob, RunningJob, schedule

    nodes = tuple(Node(f"n{i}", F, 8, "z", "s0", "l0", cpu_millicores=96_000) for i in range(2))
    running = tuple(RunningJob(f"r{i}", "pa", F, 100, False, NOW, None,
                               tuple((f"n{i}", g, 1000) for g in range(5)),
                               requests=((f"n{i}", 84_000, 0, 0),)) for i in range(2))
    wants = QueuedJob("w", "pb", F, NOW, 1, None, 4, None, 100, True, None, True)
    lims = {("D", F): limits(16), **{(p, F): limits(16) for p in ("pa", "pb", "pc")}}
    result = schedule(Snapshot(NOW, nodes, TREE, lims, running, (wants,)))
    explain = result.explanations["w"]
    assert explain.reason == "placement"
    assert dict(explain.numbers)["largest_free_node"] == 1000
