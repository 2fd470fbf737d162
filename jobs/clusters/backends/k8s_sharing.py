"""What a Kubernetes pod asks of the device plugin, per sharing mode of its flavor (DESIGN §14).
Pure functions, no client, no Django.

A job with ``gpu_milli`` (a share of one card per worker) asks in the resource names of the
device plugin that enforces that share:

* ``vgpu`` — HAMi (https://github.com/Project-HAMi/HAMi): one ``nvidia.com/gpu`` with a memory
  limit ``nvidia.com/gpumem`` (MiB, the share of the flavor's memory, floored) and a core limit
  ``nvidia.com/gpucores`` (percent of the card = ``gpu_milli / 10``). Without the flavor's memory
  the limit is ``nvidia.com/gpumem-percentage``. HAMi pins a device by UUID only (the pod
  annotation ``nvidia.com/use-gpuuuid``, a comma-separated list), not by index: the placement's
  GPUs reach it when the cluster config maps node GPU indexes to UUIDs (``gpu_uuids``); otherwise
  the pod is pinned to its nodes (node affinity) and HAMi picks the card there.
* ``shard`` — NVIDIA device plugin time-slicing: each card is advertised as ``replicas`` copies
  of a renamed resource (the flavor's ``k8s_resource``, e.g. ``nvidia.com/gpu.shared`` with
  ``renameByDefault``); a share takes ``ceil(gpu_milli / (1000 / replicas))`` of them. The replicas
  per card come from the cluster config (``time_slicing_replicas``, default 4, as the plugin's
  sharing.timeSlicing.resources[].replicas is configured).
* ``mig`` — the flavor's resource is already the MIG profile (``nvidia.com/mig-1g.10gb``): whole
  slices.
* ``vnpu`` — Ascend static virtualization (MindCluster Ascend Device Plugin): the smallest vNPU
  template not smaller than the share, advertised as ``<resource>-<template>``
  (``huawei.com/Ascend910-8c``). Templates from MindCluster's static-virtualization table
  (Atlas training products, 30 or 32 AI cores: vir02/04/08/16 → Ascend910-2c/4c/8c/16c; Atlas
  inference, 8 AI cores: vir01/02/04 → Ascend310P-1c/2c/4c); a cluster config overrides or adds
  cards (``vnpu_templates``). A share above the largest template takes the whole card.

Time-slicing and vNPU counts are whole numbers of the advertised resource, so a share is rounded
up to what the device plugin can give: the pod never gets less than the portal granted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

HAMI_MEMORY = "nvidia.com/gpumem"  # HAMi's default ResourceMemoryName (MiB)
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"  # HAMi's default ResourceCoreName (percent of one card)
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"  # HAMi pod annotation: the cards the pod may use
DEFAULT_TIME_SLICING_REPLICAS = 4

# Base resource -> (AI cores per card, {template suffix: AI cores}); MindCluster static vNPUs.
DEFAULT_VNPU_TEMPLATES: dict[str, tuple[int, dict[str, int]]] = {
    "huawei.com/Ascend910": (32, {"2c": 2, "4c": 4, "8c": 8, "16c": 16}),
    "huawei.com/Ascend310P": (8, {"1c": 1, "2c": 2, "4c": 4}),
}


@dataclass(frozen=True)
class Sharing:
    """A cluster's device-plugin settings (from its config)."""

    time_slicing_replicas: int = DEFAULT_TIME_SLICING_REPLICAS
    vnpu_templates: Mapping[str, tuple[int, dict[str, int]]] = field(
        default_factory=lambda: dict(DEFAULT_VNPU_TEMPLATES)
    )
    gpu_uuids: Mapping[str, list[str]] = field(default_factory=dict)  # node -> UUID per GPU index


DEFAULT = Sharing()


def sharing_from_config(
    time_slicing_replicas: int | None = None,
    vnpu_templates: Mapping[str, Any] | None = None,
    gpu_uuids: Mapping[str, list[str]] | None = None,
) -> Sharing:
    """``vnpu_templates``: ``{"huawei.com/Ascend910": {"cores": 20, "templates": {"5c": 5, "10c": 10}}}``
    replaces the table of that resource (other resources keep the defaults)."""
    replicas = int(time_slicing_replicas or DEFAULT_TIME_SLICING_REPLICAS)
    if replicas < 1:
        raise ValueError("time_slicing_replicas must be at least 1")
    table = dict(DEFAULT_VNPU_TEMPLATES)
    for resource, entry in (vnpu_templates or {}).items():
        templates = {str(k): int(v) for k, v in dict(entry["templates"]).items()}
        table[resource] = (int(entry["cores"]), templates)
    return Sharing(replicas, table, dict(gpu_uuids or {}))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _both(quantities: dict[str, int]) -> dict[str, dict[str, str]]:
    # Extended resources are not overcommitted: the API server wants requests == limits.
    text = {name: str(value) for name, value in quantities.items()}
    return {"limits": dict(text), "requests": dict(text)}


def vgpu_quantities(resource: str, milli: int, memory_mib: int) -> dict[str, int]:
    limits = {resource: 1, HAMI_CORES: max(1, milli // 10)}
    if memory_mib > 0:
        limits[HAMI_MEMORY] = max(1, milli * memory_mib // 1000)
    else:
        limits[HAMI_MEMORY_PERCENT] = max(1, milli // 10)
    return limits


def shard_quantities(resource: str, milli: int, replicas: int) -> dict[str, int]:
    # ceil(milli / (1000 / replicas)) without the float: ceil(milli * replicas / 1000).
    return {resource: min(replicas, max(1, _ceil_div(milli * replicas, 1000)))}


def vnpu_quantities(resource: str, milli: int, sharing: Sharing) -> dict[str, int]:
    cores, templates = sharing.vnpu_templates.get(resource, (0, {}))
    if cores:
        needed = _ceil_div(milli * cores, 1000)
        fitting = sorted((c, suffix) for suffix, c in templates.items() if c >= needed)
        if fitting and fitting[0][0] < cores:
            return {f"{resource}-{fitting[0][1]}": 1}
    return {resource: 1}  # no template holds the share (or the card has none): the whole card


def resources_for(spec: Any, sharing: Sharing = DEFAULT) -> dict[str, dict[str, str]]:
    """The container's ``resources`` (empty for a job without accelerators)."""
    milli, mode, resource = spec.gpu_milli, spec.sharing_mode, spec.k8s_resource
    if milli and mode == "vgpu":
        return _both(vgpu_quantities(resource, milli, spec.gpu_memory_mib))
    if milli and mode == "shard":
        return _both(shard_quantities(resource, milli, sharing.time_slicing_replicas))
    if milli and mode == "vnpu":
        return _both(vnpu_quantities(resource, milli, sharing))
    if spec.gpus_per_worker <= 0 and not milli:
        return {}
    if mode == "shard":
        # Whole cards on a time-sliced flavor: every replica of that many cards (the plugin's
        # failRequestsGreaterThanOne must be off for such a request; see docs/backends.md).
        return _both({resource: spec.gpus_per_worker * sharing.time_slicing_replicas})
    # Whole cards (MIG slices, whole NPUs); a share without a sharing mode keeps one whole device.
    return _both({resource: 1 if milli else spec.gpus_per_worker})


def device_annotations(spec: Any, sharing: Sharing = DEFAULT) -> dict[str, str]:
    """HAMi's device pin for a vGPU share: the UUIDs of the placement's GPUs, when known."""
    if spec.sharing_mode != "vgpu" or not sharing.gpu_uuids:
        return {}
    uuids = []
    for worker in spec.placement:
        for slot in worker:
            known = sharing.gpu_uuids.get(slot.node) or []
            if slot.gpu >= len(known):
                return {}  # one unknown card: pinning a subset would be wrong, leave it to HAMi
            if known[slot.gpu] not in uuids:
                uuids.append(known[slot.gpu])
    return {HAMI_USE_UUID: ",".join(uuids)} if uuids else {}
