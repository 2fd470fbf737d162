"""What a job's workers ask of their nodes besides GPUs (DESIGN §15, docs/resources.md): the flavor's
share per unit, a worker's default and effective request, and the most a worker may ask. The
arithmetic is pure (jobs/scheduler/footprint.py); this module reads the inventory for it. Submission
(defaults, limits), dispatch (Slurm/Kubernetes requests) and the snapshot all ask here, so the
three agree on what a job asked."""

from __future__ import annotations

import re
from decimal import Decimal

from django.utils.translation import gettext_noop

from jobs.scheduler.footprint import (
    DIMENSIONS,
    FULL,
    NodeSize,
    Request,
    Share,
    binding,
    default_request,
    filled,
    footprint_milli,
    footprint_units,
    most_per_worker,
    share_from,
    share_of,
)
from portal.texts import Message, message, render
from quotas.models import Flavor, Node

# Above this a figure is a typo or an attack, whatever the nodes (10^9 MiB is a pebibyte): refused
# before anything is computed with it, so no arithmetic or column ever sees it.
ABSURD = 10**9
# "12.4": a CUDA version as drivers report it (nvidia-smi, GPU feature discovery).
CUDA_VERSION = re.compile(r"^[0-9]{1,3}\.[0-9]{1,3}$")
# What each dimension is called in the texts (stored messages: rendered in each reader's language).
DIMENSION_WORDS = {
    "cpu_millicores": gettext_noop("CPU"),
    "memory_mib": gettext_noop("memory"),
    "local_disk_gib": gettext_noop("local disk"),
}


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


def flavor_shares(flavor_ids) -> dict[int, Share]:
    """``flavor_share`` of several flavors in two statements (their profiles, their nodes)."""
    ids = set(flavor_ids)
    if not ids:
        return {}
    sizes: dict[int, list[NodeSize]] = {pk: [] for pk in ids}
    for flavor_id, *size in Node.objects.filter(flavor_id__in=ids).values_list(
        "flavor_id", "gpu_count", "cpu_millicores", "memory_mib", "local_disk_gib"
    ):
        sizes[flavor_id].append(NodeSize(*size))
    return {f.pk: flavor_share(f, sizes[f.pk]) for f in Flavor.objects.filter(pk__in=ids)}


def effective_request(job, share: Share | None = None) -> Request:
    """What one worker of ``job`` asks: its own figures, the rest from its share at submission
    (``Job.unit_share``), else the flavor's share now."""
    if share is None:
        share = share_from(job.unit_share) if job.unit_share else flavor_share(job.flavor)
    asked = Request(job.cpu_millicores, job.memory_mib, job.local_disk_gib)
    return filled(asked, share, units=job.gpus_per_worker or 0, milli=job.gpu_milli)


def queued_request(flavor: Flavor, asked: Request, *, units: int, milli: int | None) -> Request | None:
    """One worker's request as the engine gets it once the job is queued (``jobs.scheduling.snapshot``):
    None when it asked no figure (it then holds its GPUs' share of its node), else its figures with
    the ones it left empty filled from the flavor's share now (what submission stores)."""
    if all(asked.get(d) is None for d in DIMENSIONS):
        return None
    got = filled(asked, flavor_share(flavor), units=units, milli=milli)
    return Request(*(got.get(d) or 0 for d in DIMENSIONS))


def largest_node_units(sizes: list[NodeSize]) -> int:
    return max((s.units for s in sizes), default=0)


def per_worker_limit(flavor: Flavor, sizes: list[NodeSize] | None = None) -> Request:
    """The most one worker may ask of each dimension: the largest node's units at the share."""
    sizes = node_sizes(flavor) if sizes is None else sizes
    return most_per_worker(flavor_share(flavor, sizes), largest_node_units(sizes))


def biggest_node(flavor: Flavor) -> Node | None:
    """The node of ``flavor`` with the most units (the one the per-worker limit comes from)."""
    return Node.objects.filter(flavor=flavor).order_by("-gpu_count", "name").first()


def quantity(dim: str, value: int) -> Message:
    """``value`` of ``dim`` as people read it: cores, GiB (MiB when not a whole GiB)."""
    if dim == "cpu_millicores":
        return message(gettext_noop("%(n)s cores"), n=_plain(Decimal(value) / 1000))
    if dim == "memory_mib" and value % 1024:
        return message(gettext_noop("%(n)s MiB"), n=str(value))
    if dim == "memory_mib":
        return message(gettext_noop("%(n)s GiB"), n=str(value // 1024))
    return message(gettext_noop("%(n)s GiB"), n=str(value))


def quantity_text(dim: str, value: int) -> str:
    return render(quantity(dim, value))


def _plain(value: Decimal) -> str:
    return f"{value.normalize():f}"


def stranded_units(share: Share, request: Request, *, workers: int, units: int,
                   milli: int | None) -> tuple[Decimal, str | None]:
    """GPUs (units) the job takes without using them, over all its workers, and the dimension
    that strands them (None: nothing is stranded). A shared worker strands thousandths."""
    if milli is not None:
        extra = Decimal(footprint_milli(milli, request, share) - milli) / FULL
    else:
        extra = Decimal(footprint_units(units, request, share) - units)
    if extra <= 0:
        return Decimal(0), None
    return extra * workers, binding(milli if milli is not None else units, request, share,
                                    shared=milli is not None)


__all__ = [
    "ABSURD",
    "CUDA_VERSION",
    "DIMENSIONS",
    "DIMENSION_WORDS",
    "FULL",
    "Request",
    "Share",
    "biggest_node",
    "default_request",
    "effective_request",
    "flavor_share",
    "largest_node_units",
    "node_sizes",
    "per_worker_limit",
    "quantity",
    "quantity_text",
    "queued_request",
    "stranded_units",
]
