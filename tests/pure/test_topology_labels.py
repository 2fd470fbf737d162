"""Topology levels from node labels and Slurm features (jobs.clusters.topology, DESIGN §18)."""

from __future__ import annotations

from types import SimpleNamespace

from jobs.clusters.backends.k8s_status import node_info
from jobs.clusters.backends.slurm import SlurmBackend
from jobs.clusters.topology import Levels, from_node_labels, from_slurm_features, name


def test_the_finest_level_is_the_leaf_and_the_next_the_spine():
    assert Levels(zone="z", block="b", rack="r", nvlink="d").engine() == ("z", "b", "d")
    assert Levels(zone="z", rack="r", nvlink="d").engine() == ("z", "r", "d")
    assert Levels(zone="z", block="b", rack="r").engine() == ("z", "b", "r")
    assert Levels(zone="z", rack="r", spine="s", leaf="l").engine() == ("z", "s", "r")
    assert Levels(zone="z", spine="s", leaf="l").engine() == ("z", "s", "l")  # the typed fallback


def test_kubernetes_labels_and_a_long_clique_id():
    clique = "7b2e4f1c-9a0d-4c3b-8e5f-1a2b3c4d5e6f.12"
    levels = from_node_labels({"topology.kubernetes.io/zone": "cn-north-1a",
                               "network.topology.kubernetes.io/block": "blk-3",
                               "gpupool.io/rack": "R07", "nvidia.com/gpu.clique": clique})
    assert (levels.zone, levels.block, levels.rack) == ("cn-north-1a", "blk-3", "R07")
    assert len(levels.nvlink) <= 40 and levels.nvlink.startswith("7b2e4f1c")
    other = name(clique[:-1] + "3")
    assert other != levels.nvlink and len(other) <= 40  # two cliques of one cluster stay apart


def test_slurm_features():
    levels = from_slurm_features(["driver-550.54", "zone-a", "block-b2", "rack-r12", "nvl-d3", "rack-x"])
    assert levels == Levels(zone="a", block="b2", rack="r12", nvlink="d3")
    assert from_slurm_features(["zone-a", "spine-s1", "leaf-l4"]).engine() == ("a", "s1", "l4")


def test_the_backends_read_them():
    slurm = SlurmBackend.__new__(SlurmBackend)
    slurm.gres_map = {}
    info = slurm._node("gb1|gpu:gb200:4|idle|zone-a,block-b1,rack-r1,nvl-r1|none")
    assert (info.zone, info.spine, info.leaf, info.rack) == ("a", "b1", "r1", "r1")
    labels = {"topology.kubernetes.io/zone": "z", "gpupool.io/rack": "r2", "nvidia.com/gpu.clique": "c.1"}
    node = SimpleNamespace(
        metadata=SimpleNamespace(name="gb2", labels=labels),
        status=SimpleNamespace(capacity={"nvidia.com/gpu": "4"}, allocatable={"nvidia.com/gpu": "4"},
                               conditions=[SimpleNamespace(type="Ready", status="True", message="")],
                               node_info=None),
        spec=SimpleNamespace(unschedulable=False))
    info = node_info(node)
    assert (info.zone, info.spine, info.leaf, info.rack) == ("z", "r2", "c.1", "r2")
