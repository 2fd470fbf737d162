"""Reads for the node / GPU map (issue 24): one cluster's nodes by topology (spine → leaf →
node), each GPU (or slice) free, used by which job, or used by a job the metrics poll flagged
idle (``Job.idle_since``, jobs/clusters/metrics.py); per node its free, usable and stranded GPUs
(``jobs.stranding``: free GPUs its free CPU, memory or disk cannot feed).

A job is named (and linked) only where the viewer may see it (``portal.selectors``); anyone
else's is "in use". The number of queries does not depend on how many jobs the database holds:
the nodes of the cluster, the holding jobs of its flavors (at most one per GPU or slice, read
through the (state, flavor) index), the viewer's project ids, the software baselines (each node
is flagged when off its own, DESIGN §15) and the node events.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import QuerySet
from django.utils.translation import gettext_lazy as _

from jobs import stranding
from jobs.clusters.power import RackPower, rack_power
from jobs.models import Job
from jobs.scheduler.footprint import Held, Stranding
from jobs.states import HOLDING
from portal.models import User
from portal.selectors import scope_for, visible_project_ids
from quotas.baselines import baselines, node_drift
from quotas.drift import Drift
from quotas.models import Cluster, Flavor, Node, NodeEvent, NodeState

MILLI = 1000
EVENTS_SHOWN = 20
# A draining node that no job holds any more is drained (Slurm's DRAINING → DRAINED): shown, not
# stored. It is derived where the jobs on the node are read, so it is true the moment the last
# job leaves, whichever way it left (finished, cancelled, requeued, lost), and no writer of job
# states has to know about nodes. The hold stays "draining" until the node is returned.
DRAINED = "drained"
SHOWN_STATES = {**dict(NodeState.choices), DRAINED: _("Drained")}


def shown_state(node: Node, held: bool) -> str:
    """The state a page shows: ``node.state``, or "drained" for a draining node no job holds."""
    if node.state == NodeState.DRAINING and not held:
        return DRAINED
    return node.state


@dataclass(slots=True)
class Holder:
    job_id: int
    name: str  # "" when the viewer may not see the job
    milli: int
    idle: bool
    terminating: bool


@dataclass(slots=True)
class GpuCell:
    index: int
    holders: list[Holder] = field(default_factory=list)

    @property
    def used_milli(self) -> int:
        return sum(h.milli for h in self.holders)

    @property
    def status(self) -> str:
        """free | partial (a shared card with room) | used | idle (a holder flagged idle)."""
        if not self.holders:
            return "free"
        if any(h.idle for h in self.holders):
            return "idle"
        return "used" if self.used_milli >= MILLI else "partial"


@dataclass(slots=True)
class NodeView:
    node: Node
    gpus: list[GpuCell]
    # Free GPUs its free CPU, memory and disk can feed (``jobs.stranding``); None: not computed
    # (then every free GPU counts as usable).
    room: Stranding | None = None
    drift: Drift | None = None  # against its software baseline (quotas.baselines); None: not read

    @property
    def free(self) -> int:
        return sum(1 for g in self.gpus if not g.holders)

    @property
    def usable(self) -> int:
        return self.free if self.room is None else self.room.usable

    @property
    def stranded(self) -> int:
        return 0 if self.room is None else self.room.stranded

    @property
    def used(self) -> int:
        return len(self.gpus) - self.free

    @property
    def idle(self) -> int:
        return sum(1 for g in self.gpus if g.status == "idle")

    @property
    def job_ids(self) -> list[int]:
        return sorted({h.job_id for g in self.gpus for h in g.holders})

    @property
    def state(self) -> str:
        return shown_state(self.node, bool(self.used))

    @property
    def state_label(self) -> str:
        return SHOWN_STATES.get(self.state, self.state)

    @property
    def health(self) -> str:
        """ok | down (the backend says the node does not answer) | unhealthy (cordoned by the
        health check, ``node.health_reason`` says why)."""
        if self.node.state == NodeState.DOWN:
            return "down"
        return "unhealthy" if self.node.health_reason else "ok"


@dataclass(slots=True)
class Leaf:
    name: str
    nodes: list[NodeView] = field(default_factory=list)


@dataclass(slots=True)
class Spine:
    zone: str
    name: str
    leaves: list[Leaf] = field(default_factory=list)


@dataclass(slots=True)
class NodeMap:
    cluster: Cluster | None
    spines: list[Spine]
    nodes: list[NodeView]
    totals: dict[str, int]
    racks: list[RackPower] = field(default_factory=list)  # DESIGN §18, jobs.clusters.power


def map_clusters() -> QuerySet[Cluster]:
    return Cluster.objects.filter(active=True).order_by("name")


def map_flavors() -> QuerySet[Flavor]:
    return Flavor.objects.order_by("name")


def occupancy(user: User, nodes: list[Node]) -> dict[int, list[GpuCell]]:
    """Per node id, its GPU cells with their holders as ``user`` may see them."""
    return _occupancy(user, nodes)[0]


def node_views(user: User, nodes: list[Node]) -> list[NodeView]:
    """The nodes with their GPU cells, their free, usable and stranded GPUs (one read of the
    jobs holding GPUs for both) and their drift from the software baseline (one read of the
    baselines)."""
    cells, held = _occupancy(user, nodes)
    known = baselines() if nodes else {}
    return [
        NodeView(n, cells[n.pk], _room(n, cells[n.pk], held.get(n.pk, ())), node_drift(n, known))
        for n in nodes
    ]


def _room(node: Node, cells: list[GpuCell], held) -> Stranding:
    return stranding.of_node(node, sum(1 for g in cells if not g.holders), held)


def _occupancy(user: User, nodes: list[Node]) -> tuple[dict[int, list[GpuCell]], dict[int, list[Held]]]:
    """Per node id, its GPU cells as ``user`` may see them, and what its jobs hold of it."""
    cells = {n.pk: [GpuCell(i) for i in range(n.gpu_count)] for n in nodes}
    flavor_ids = {n.flavor_id for n in nodes}
    if not cells:
        return cells, {}
    visible = visible_project_ids(user)
    visible_set = None if visible is None else set(visible)
    rows = list(Job.objects.filter(state__in=list(HOLDING), flavor_id__in=flavor_ids).values_list(
        "pk", "name", "project_id", "idle_since", "terminating_since", *stranding.HELD_COLUMNS
    ))
    held = stranding.held_by_node(row[5:] for row in rows)
    for pk, name, project_id, idle_since, terminating_since, placement, *_rest in rows:
        shown = name if visible_set is None or project_id in visible_set else ""
        for worker in placement or ():
            for node_id, gpu, milli in worker:
                node_cells = cells.get(node_id)
                if node_cells is None or not 0 <= gpu < len(node_cells):
                    continue
                node_cells[gpu].holders.append(
                    Holder(pk, shown, int(milli), idle_since is not None, terminating_since is not None)
                )
    return cells, held


def node_map(
    user: User,
    *,
    cluster: Cluster | None,
    flavor: Flavor | None = None,
    state: str = "",
    has_free: bool = False,
    off_baseline: bool = False,
) -> NodeMap:
    """The cluster's nodes (filtered) grouped zone/spine → leaf → node, with their GPU cells."""
    if cluster is None:
        return NodeMap(None, [], [], {"nodes": 0, "gpus": 0, "free": 0, "usable": 0, "stranded": 0,
                                      "used": 0, "idle": 0})
    nodes_qs = Node.objects.filter(cluster=cluster).select_related("flavor", "rack")
    if flavor is not None:
        nodes_qs = nodes_qs.filter(flavor=flavor)
    if state:
        # "drained" is a draining node without jobs (shown, not stored); the stored states as
        # they are stored (the API's ``state`` field and filter).
        nodes_qs = nodes_qs.filter(state=NodeState.DRAINING if state == DRAINED else state)
    nodes = list(nodes_qs.order_by("zone", "spine", "leaf", "name"))
    views = node_views(user, nodes)
    if state == DRAINED:
        views = [v for v in views if v.state == DRAINED]
    if has_free:
        views = [v for v in views if v.free and v.node.state == NodeState.READY]
    if off_baseline:
        views = [v for v in views if v.drift.off]
    spines: dict[tuple[str, str], dict[str, Leaf]] = defaultdict(dict)
    for view in views:
        n = view.node
        spines[n.zone, n.spine].setdefault(n.leaf, Leaf(n.leaf)).nodes.append(view)
    grouped = [Spine(zone, spine, list(leaves.values())) for (zone, spine), leaves in spines.items()]
    ready = [v for v in views if v.node.state == NodeState.READY]
    totals = {
        "nodes": len(views),
        "gpus": sum(len(v.gpus) for v in views),
        "free": sum(v.free for v in ready),
        "usable": sum(v.usable for v in ready),
        "stranded": sum(v.stranded for v in ready),
        "used": sum(v.used for v in views),
        "idle": sum(v.idle for v in views),
    }
    return NodeMap(cluster, grouped, views, totals, rack_power(cluster))


def node_events(user: User, *, cluster: Cluster | None = None, node: Node | None = None) -> list[NodeEvent]:
    """The newest node events of a cluster or a node. Node operations are the platform's: anyone
    who sees the map sees why a node is out; who did it only platform admins and auditors."""
    events = NodeEvent.objects.select_related("node", "actor")
    if node is not None:
        events = events.filter(node=node)
    elif cluster is not None:
        events = events.filter(node__cluster=cluster)
    else:
        return []
    shown = list(events.order_by("-at", "-id")[:EVENTS_SHOWN])
    if not scope_for(user).sees_everything:
        for event in shown:
            event.actor_shown = ""
    else:
        for event in shown:
            event.actor_shown = event.actor.get_username() if event.actor else _("health check")
    return shown
