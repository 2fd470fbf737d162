"""What a job's workers ask of their nodes besides GPUs (DESIGN §15, docs/resources.md): the flavor's
share per unit, a worker's default and effective request, and the most a worker may ask. The
arithmetic is pure (jobs/scheduler/footprint.py); this module reads the inventory for it. Submission
(defaults, limits), dispatch (Slurm/Kubernetes requests) and the snapshot all ask here, so the
three agree on what a job asked."""

from __future__ import annotations

from jobs.scheduler.footprint import (
    FULL,
    NodeSize,
    Request,
    Share,
    default_request,
    most_per_worker,
    share_of,
)
from quotas.models import Flavor, Node


def node_sizes(flavor: Flavor, *, cluster_id: int | None = None) -> list[NodeSize]:
    """Every node of ``flavor`` (of one cluster when given) as the share sees it."""
    nodes = Node.objects.filter(flavor=flavor)
    if cluster_id is not None:
        nodes = nodes.filter(cluster_id=cluster_id)
    return [NodeSize(units, cpu, mem, disk) for units, cpu, mem, disk in nodes.values_list(
        "gpu_count", "cpu_millicores", "memory_mib", "local_disk_gib")]


def flavor_share(flavor: Flavor, sizes: list[NodeSize] | None = None) -> Share:
    """One unit's share: the flavor profile's per-unit values where set, else its smallest node's
    (a profile value never promises more than that node has — the smaller wins)."""
    measured = share_of(node_sizes(flavor) if sizes is None else sizes)
    out = {}
    for dim, profile in (("cpu_millicores", flavor.cpu_millicores_per_unit),
                         ("memory_mib", flavor.memory_mib_per_unit),
                         ("local_disk_gib", flavor.local_disk_gib_per_unit)):
        node = measured.get(dim)
        if profile is not None and node is not None:
            out[dim] = min(profile, node)
        elif profile is not None or node is not None:
            out[dim] = profile if profile is not None else node
    return Share(**out)


def worker_default(share: Share, *, units: int, milli: int | None) -> Request:
    """A worker's request when it asks nothing: its units' (or thousandths') share."""
    return default_request(share, units=0 if milli is not None else units, milli=milli)


def effective_request(job, share: Share | None = None) -> Request:
    """What one worker of ``job`` asks: its own figures, the rest from its share at submission
    (``Job.unit_share``), else the flavor's share now."""
    if share is None:
        share = Share(**{k: v for k, v in (job.unit_share or {}).items() if v is not None}) \
            if job.unit_share else flavor_share(job.flavor)
    default = worker_default(share, units=job.gpus_per_worker or 0, milli=job.gpu_milli)
    return Request(
        cpu_millicores=job.cpu_millicores if job.cpu_millicores is not None else default.cpu_millicores,
        memory_mib=job.memory_mib if job.memory_mib is not None else default.memory_mib,
        local_disk_gib=job.local_disk_gib if job.local_disk_gib is not None else default.local_disk_gib,
    )


def largest_node_units(sizes: list[NodeSize]) -> int:
    return max((s.units for s in sizes), default=0)


def per_worker_limit(flavor: Flavor, sizes: list[NodeSize] | None = None) -> Request:
    """The most one worker may ask of each dimension: the largest node's units at the share."""
    sizes = node_sizes(flavor) if sizes is None else sizes
    return most_per_worker(flavor_share(flavor, sizes), largest_node_units(sizes))


__all__ = ["FULL", "Request", "Share", "effective_request", "flavor_share", "largest_node_units",
           "node_sizes", "per_worker_limit", "worker_default"]
