"""Topology levels read from the backend (DESIGN §18, issue 36 item 4), pure.

A node's place in the network comes from its labels on Kubernetes and its features on Slurm, as
Kueue's Topology Aware Scheduling, Volcano's HyperNodes and Slurm's ``topology/block`` read them,
instead of being typed in. Four levels, coarsest first:

=============  ======================================================  ==========================
level          Kubernetes label (first one present wins)                Slurm feature
=============  ======================================================  ==========================
zone           ``topology.kubernetes.io/zone``                          ``zone-<name>``
block          ``gpupool.io/block``, ``network.topology.kubernetes.io/  ``block-<name>``
               block``, ``cloud.google.com/gce-topology-block``
rack           ``gpupool.io/rack``, ``network.topology.kubernetes.io/   ``rack-<name>``
               rack``, ``topology.kubernetes.io/rack``
NVLink domain  ``nvidia.com/gpu.clique`` (GB200 NVL72: one per rack),    ``nvl-<name>``
               ``gpupool.io/nvlink-domain``
=============  ======================================================  ==========================

The engine places by zone / spine / leaf (a gang goes to the fewest leaves, then the fewest
spines, jobs/scheduler/placement.py). The levels map onto them so that the finest one the node
has is the leaf — a multi-node NVLink domain where there is one, so a gang that fits in one
domain is placed in one — and the next one up is the spine:

* leaf  = NVLink domain, else rack, else the typed leaf (``gpupool.io/leaf``, ``leaf-<name>``);
* spine = block, else rack when the leaf is an NVLink domain, else the typed spine;
* zone  = zone.

The typed zone/spine/leaf stay the fallback: a node with none of these labels is placed as
before. The rack, when named, is also the node's power rack (quotas.models.Rack).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass

ZONE_LABELS = ("topology.kubernetes.io/zone",)
BLOCK_LABELS = ("gpupool.io/block", "network.topology.kubernetes.io/block",
                "cloud.google.com/gce-topology-block")
RACK_LABELS = ("gpupool.io/rack", "network.topology.kubernetes.io/rack", "topology.kubernetes.io/rack")
NVLINK_LABELS = ("nvidia.com/gpu.clique", "gpupool.io/nvlink-domain")
SPINE_LABELS = ("gpupool.io/spine",)
LEAF_LABELS = ("gpupool.io/leaf",)
# Slurm features ``<prefix>-<name>``: prefix -> level.
SLURM_PREFIXES = {"zone": "zone", "block": "block", "rack": "rack", "nvl": "nvlink", "spine": "spine",
                  "leaf": "leaf"}
NAME_MAX = 40  # quotas.models.name_validator
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class Levels:
    zone: str = ""
    block: str = ""
    rack: str = ""
    nvlink: str = ""
    spine: str = ""  # typed
    leaf: str = ""  # typed

    def engine(self) -> tuple[str, str, str]:
        """(zone, spine, leaf) as the engine places by them ("" where none is known)."""
        leaf = self.nvlink or self.rack or self.leaf
        spine = self.block or (self.rack if self.nvlink else "") or self.spine
        return self.zone, spine, leaf


def name(value: str) -> str:
    """A label value as a topology name (1–40 of letters, digits, '.', '_', '-'): an NVLink
    clique id ("<cluster UUID>.<clique>") is longer, so a long value keeps its head and a hash
    of the whole (two cliques never share a name)."""
    clean = _UNSAFE.sub("-", value.strip()).lstrip("._-")
    if len(clean) <= NAME_MAX:
        return clean
    digest = hashlib.sha1(value.encode(), usedforsecurity=False).hexdigest()[:10]
    return f"{clean[:NAME_MAX - 11]}-{digest}"


def _first(labels: Mapping[str, str], keys: tuple[str, ...]) -> str:
    for key in keys:
        value = labels.get(key)
        if value:
            return name(value)
    return ""


def from_node_labels(labels: Mapping[str, str]) -> Levels:
    """A Kubernetes node's levels."""
    return Levels(
        zone=_first(labels, ZONE_LABELS), block=_first(labels, BLOCK_LABELS),
        rack=_first(labels, RACK_LABELS), nvlink=_first(labels, NVLINK_LABELS),
        spine=_first(labels, SPINE_LABELS), leaf=_first(labels, LEAF_LABELS),
    )


def from_slurm_features(features: list[str]) -> Levels:
    """A Slurm node's levels from its features (``rack-r12``, ``nvl-d3``, …; the first of each)."""
    found: dict[str, str] = {}
    for feature in features:
        prefix, dash, value = feature.partition("-")
        level = SLURM_PREFIXES.get(prefix)
        if dash and value and level and level not in found:
            found[level] = name(value)
    return Levels(**found)
