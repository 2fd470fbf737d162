"""Inventory sync (DESIGN §2: nodes come from the backend, never typed in by hand).

For real backends the backend is the source: ``sync_inventory`` applies ``list_nodes()`` to the
Node rows. The simulator simulates the inventory the portal holds, so ``push_simulated_inventory``
sends the portal's nodes to it — but node *states* come back from it, as they come from sinfo or
the Kubernetes API: a node the simulator lost (an injected fault) is down in the portal until the
simulator has it back, and a push never heals it.

A platform admin's hold (``Node.hold``: cordoned or draining, set through ``jobs.clusters.nodes``) is the
portal's, not the backend's: no sync lifts it. A held node shows the hold whatever the backend
reports, except down (``quotas.models.held_state``)."""

from __future__ import annotations

from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from jobs.clusters.backends.base import CPU_HINT, NodeInfo
from jobs.clusters.backends.registry import backend_for, is_simulated, simulator_url
from quotas.models import Cluster, Flavor, FlavorKind, Node, NodeState, Rack, held_state

# How a GPU-less node names its cpu flavor where there are several: a Slurm feature, a node label.
FLAVOR_FEATURE = "flavor-"
FLAVOR_LABEL = "gpupool.io/flavor"


def push_simulated_inventory() -> dict[str, int]:
    by_url: dict[str, list[NodeInfo]] = defaultdict(list)
    clusters_of: dict[str, list[int]] = defaultdict(list)
    for cluster in Cluster.objects.filter(active=True):
        if not is_simulated(cluster.kind, cluster.config or {}):
            continue
        url = simulator_url(cluster.config or {})
        clusters_of[url].append(cluster.pk)
        for node in cluster.nodes.select_related("flavor"):
            by_url[url].append(
                NodeInfo(
                    node.name, node.flavor.name, node.gpu_count, _simulated(node.state),
                    node.zone, node.spine, node.leaf,
                )
            )
    for url, nodes in by_url.items():
        reported = backend_for("simulator", {"url": url}).set_inventory(nodes, keep_states=True)
        _apply_states(clusters_of[url], reported)
    return {url: len(nodes) for url, nodes in by_url.items()}


def refresh_node_states(cluster: Cluster) -> None:
    """Read the cluster's node states now (the status sync calls this when a job died of a node
    failure, so the jobs it requeues are not placed on that node again)."""
    if is_simulated(cluster.kind, cluster.config or {}):
        _apply_states([cluster.pk], backend_for(cluster.kind, cluster.config or {}).list_nodes())
    else:
        sync_inventory(cluster)


def _simulated(state: str) -> str:
    """The simulator knows ready, cordoned and down: a draining node is cordoned there."""
    return NodeState.CORDONED if state == NodeState.DRAINING else state


def _apply_states(cluster_ids: list[int], reported: list[NodeInfo]) -> int:
    nodes = Node.objects.filter(cluster_id__in=cluster_ids)
    holds = dict(nodes.exclude(hold="").values_list("name", "hold"))
    # Grouped by the hold it was computed with, and conditional on it: a hold placed meanwhile
    # (jobs.clusters.nodes) is never overwritten by a state read before it.
    by_state: dict[tuple[str, str], list[str]] = defaultdict(list)
    for info in reported:
        hold = holds.get(info.name, "")
        by_state[held_state(info.state, hold), hold].append(info.name)
    return sum(
        nodes.filter(name__in=names, hold=hold)
        .exclude(state=state)
        .update(state=state, last_seen_at=timezone.now())
        for (state, hold), names in by_state.items()
    )


def _flavor_for(info: NodeInfo, flavors: list[Flavor]) -> Flavor | None:
    """A GPU node's flavor: the one whose name, Slurm GRES or Kubernetes resource is its hint.
    A node without accelerators (hint ``cpu``) is a node of a ``cpu`` flavor: the one the node
    names (Slurm feature ``flavor-<name>``, Kubernetes label ``gpupool.io/flavor``), else the one
    active ``cpu`` flavor — with several and none named, the node is not read (docs/resources.md)."""
    if info.flavor_hint == CPU_HINT:
        return _cpu_flavor(info, [f for f in flavors if f.kind == FlavorKind.CPU])
    for flavor in flavors:
        if flavor.kind == FlavorKind.GPU and info.flavor_hint in (
            flavor.name, flavor.slurm_gres, flavor.k8s_resource_name
        ):
            return flavor
    return None


def _cpu_flavor(info: NodeInfo, flavors: list[Flavor]) -> Flavor | None:
    labels = dict(info.labels)
    named = labels.get(FLAVOR_LABEL) or next(
        (key.removeprefix(FLAVOR_FEATURE) for key in labels if key.startswith(FLAVOR_FEATURE)), None
    )
    if named is not None:
        return next((f for f in flavors if f.name == named), None)
    active = [f for f in flavors if f.active]
    return active[0] if len(active) == 1 else None


MACHINE_FIELDS = (
    "cpu_millicores", "memory_mib", "local_disk_gib",
    "cpu_millicores_capacity", "memory_mib_capacity", "local_disk_gib_capacity",
    "driver_version", "cuda_version",
)


def machine_fields(info: NodeInfo) -> dict:
    """The node's whole machine as the backend reports it (DESIGN §15): what it does not report
    stays empty, so only GPUs are placed there — never a figure typed in or left from before."""
    out = {name: getattr(info, name) for name in MACHINE_FIELDS}
    out["driver_version"], out["cuda_version"] = info.driver_version[:40], info.cuda_version[:20]
    out["labels"] = dict(info.labels)
    return out


def sync_inventory(cluster: Cluster) -> dict[str, int]:
    """Create, update and mark down nodes from the backend's list. A node the backend no longer
    lists is marked down (its jobs are handled by the status sync), never deleted: jobs and
    metering refer to it."""
    listed = backend_for(cluster.kind, cluster.config or {}).list_nodes()
    flavors = list(Flavor.objects.all())
    now, counts = timezone.now(), {"created": 0, "updated": 0, "missing": 0, "unknown_flavor": 0}
    with transaction.atomic():
        holds = dict(cluster.nodes.exclude(hold="").select_for_update().values_list("name", "hold"))
        racks: dict[str, Rack] = {}
        seen = set()
        for info in listed:
            flavor = _flavor_for(info, flavors)
            if flavor is None or info.gpus < 1:  # a CPU node that reports no cores has no units
                counts["unknown_flavor"] += 1
                continue
            _, created = Node.objects.update_or_create(
                cluster=cluster,
                name=info.name,
                defaults={
                    "flavor": flavor,
                    "gpu_count": info.gpus,
                    "state": held_state(info.state, holds.get(info.name, "")),
                    "zone": info.zone or "default",
                    "spine": info.spine or "default",
                    "leaf": info.leaf or "default",
                    "last_seen_at": now,
                    **machine_fields(info),
                    **_rack_field(cluster, info, racks),
                },
            )
            counts["created" if created else "updated"] += 1
            seen.add(info.name)
        counts["missing"] = cluster.nodes.exclude(name__in=seen).exclude(state="down").update(state="down")
    return counts


def _rack_field(cluster: Cluster, info: NodeInfo, racks: dict[str, Rack]) -> dict:
    """The node's rack when a label or feature names one (jobs.clusters.topology), created without
    a cap the first time; nothing when none does, so a rack an admin assigned stays."""
    if not info.rack:
        return {}
    if info.rack not in racks:
        racks[info.rack], _ = Rack.objects.get_or_create(cluster=cluster, name=info.rack)
    return {"rack": racks[info.rack]}
