"""Multi-node NVLink domains as the level a gang prefers (issue 36 item 4, DESIGN §18): the
domains come from node labels (jobs.clusters.topology) as the engine's leaves, and a 72-GPU gang
lands in one NVL72 domain (18 nodes × 4 GPUs) when one is free, never spanning two when one
would do."""

from __future__ import annotations

import random

from coresnap import queued, running, snapshot, tree

from jobs.clusters.topology import from_node_labels
from jobs.scheduler.scheduler import Node, schedule

F = "A100"  # coresnap's flavor
TL = tree({"D": (1000, {"p": 500, "q": 500})})
PER_DOMAIN, CARDS = 18, 4


def _gb200(domains: int) -> tuple[Node, ...]:
    """``domains`` NVL72 racks, two per block, every node placed by its labels alone."""
    nodes = []
    for d in range(domains):
        for k in range(PER_DOMAIN):
            labels = {"topology.kubernetes.io/zone": "z1", "gpupool.io/block": f"b{d // 2}",
                      "gpupool.io/rack": f"rack{d}", "nvidia.com/gpu.clique": f"0f3c9e7a-{d}.1"}
            zone, spine, leaf = from_node_labels(labels).engine()
            nodes.append(Node(f"d{d}n{k:02d}", F, CARDS, zone, spine, leaf))
    return tuple(nodes)


def _domains_of(result, job: str) -> set[str]:
    placed = next(a for a in result.admissions if a.job_id == job)
    return {node.split("n")[0] for worker in placed.placement for node, _, _ in worker}


def test_the_labels_make_the_domain_the_leaf_and_the_block_the_spine():
    node = _gb200(3)[2 * PER_DOMAIN]
    assert (node.zone, node.spine, node.leaf) == ("z1", "b1", "0f3c9e7a-2.1")


def test_a_72_gpu_gang_lands_in_the_one_free_domain():
    nodes = _gb200(3)
    # domains 0 and 2 each have one node busy (68 GPUs free: more than the gang's 72 in total
    # over both, but neither hosts it); domain 1 is free.
    run = [running("a", "p", "d0n05", 4), running("b", "p", "d2n11", 4)]
    for shape in ({"gpus_per_worker": 4, "workers": 18}, {"gpus_per_worker": 1, "workers": 72},
                  {"gpus_per_worker": 2, "workers": 36}):
        result = schedule(snapshot(nodes, TL, run, [queued("g", "q", **shape)]))
        assert _domains_of(result, "g") == {"d1"}, shape


def test_a_72_gpu_gang_never_spans_two_domains_when_one_would_do():
    """Random occupancy of four domains: whenever some domain has 72 free GPUs, the gang is all
    in one domain; when none has, it still runs (spread) if the block has room."""
    rng = random.Random(36)
    nodes = _gb200(4)
    one, spread = 0, 0
    for _ in range(60):
        run, fits_one = [], False
        for d in range(4):
            busy = rng.sample(range(PER_DOMAIN), rng.choice([0, 0, 1, 3, 9]))
            run += [running(f"r{d}-{k}", "p", f"d{d}n{k:02d}", rng.randint(1, CARDS)) for k in busy]
            fits_one = fits_one or not busy  # a worker takes a whole node: only a free domain hosts 18
        result = schedule(snapshot(nodes, TL, run, [queued("g", "q", 4, workers=18)]))
        if fits_one:
            assert len(_domains_of(result, "g")) == 1
            one += 1
        elif result.admissions:
            spread += 1
    assert one > 10 and spread > 0  # both cases were met
