"""Node health (DESIGN §17, issue 35 item 5): health signals cordon a node automatically, with
the reason on the node map and in the node's events, and send its jobs back to the queue.

Signals, read at every metrics poll (``jobs.poll_metrics``):

- DCGM from Prometheus: a GPU whose last XID error (``DCGM_FI_DEV_XID_ERRORS``) is not 0, or whose
  row remapping failed (``DCGM_FI_DEV_ROW_REMAP_FAILURE``), by the exporter's ``Hostname`` label;
- the backend's own word on its nodes (``NodeInfo.problem``): Slurm nodes DOWN, FAIL or DRAIN with
  their reason, Kubernetes node conditions (Ready not True, a pressure condition True).

A node with a signal and no health hold is cordoned — ``Node.hold`` cordoned, ``health_reason``
the signal's words, a ``health`` NodeEvent without actor, the cordon written to the backend
(drained on Slurm, ``unschedulable`` on Kubernetes) unless the backend reported the problem
itself — and every job holding its GPUs is sent back
to the queue through the preemption path (``preemption_signal``): a checkpointing job is stopped
with its grace period and resumes elsewhere from its checkpoint, the others start again, a
service's replicas are placed again. None of it is a retry (DESIGN §17).

Flapping is damped: a node cordoned by the health check ``FLAP_LIMIT`` times within
``FLAP_WINDOW`` is held (``health_damped``) — it stays cordoned when its signals clear, until an
operator returns it (``jobs.clusters.nodes.node_return``). A node cordoned fewer times is returned
by the health check itself once every source answered and none reports it (a ``recovered`` event).

A node a platform admin holds (cordoned or draining, no ``health_reason``) is the admin's: the
health check neither cordons it again nor returns it. What the portal itself wrote to a backend
(the reason begins with ``MARK``) is never read back as a signal.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs import reasons
from jobs.clusters.backends.base import BackendError
from jobs.clusters.backends.registry import backend_for, is_simulated
from jobs.clusters.metrics import prometheus
from jobs.clusters.nodes import jobs_on_node
from jobs.scheduling.cycle import preemption_signal
from portal.enqueue import enqueue
from quotas.models import Cluster, Node, NodeAction, NodeEvent, NodeHold, NodeState

log = logging.getLogger(__name__)

FLAP_LIMIT = 3
FLAP_WINDOW = timedelta(hours=24)
MARK = "gpupool health: "
REASON_MAX = 300
# (PromQL, the words of one series): one series per GPU with a problem.
PROMETHEUS_SIGNALS = (
    ("max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS) > 0", "XID {value} on GPU {gpu}"),
    ("max by (Hostname, gpu) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0", "row remapping failed on GPU {gpu}"),
)



def prometheus_signals() -> dict[str, list[str]] | None:
    """Host name → the words of its GPUs' problems; None when Prometheus did not answer."""
    if not settings.GPUPOOL.get("PROMETHEUS_URL"):
        return {}
    found: dict[str, list[str]] = defaultdict(list)
    try:
        client = prometheus()
        for query, words in PROMETHEUS_SIGNALS:
            for series in sorted(client.custom_query(query), key=lambda r: (
                    r["metric"].get("Hostname", ""), r["metric"].get("gpu", "").zfill(4))):
                host = series["metric"].get("Hostname", "")
                value = float(series["value"][1])
                found[host].append(words.format(value=f"{value:g}", gpu=series["metric"].get("gpu", "?")))
    except Exception as exc:  # any failure of the source: no verdict this poll
        log.warning("node health: Prometheus did not answer: %s", exc)
        return None
    return dict(found)


def backend_signals(cluster: Cluster) -> dict[str, str] | None:
    """Node name → what the backend says is wrong with it; None when the backend did not answer.
    The simulator reports nothing of its own (its faults are injected as down nodes and XIDs)."""
    if is_simulated(cluster.kind, cluster.config or {}):
        return {}
    try:
        listed = backend_for(cluster.kind, cluster.config or {}).list_nodes()
    except BackendError as exc:
        log.warning("node health: cluster %s did not answer: %s", cluster.name, exc)
        return None
    return {n.name: n.problem for n in listed if n.problem and MARK.strip() not in n.problem}


def gather() -> tuple[dict[int, str], set[int], bool]:
    """Node id → its signals' words (joined); the nodes whose backend itself reports the problem;
    and whether every source answered."""
    complete = True
    by_node: dict[int, list[str]] = defaultdict(list)
    backend_knows: set[int] = set()
    clusters = list(Cluster.objects.filter(active=True))
    nodes = list(Node.objects.filter(cluster__in=clusters).values_list("pk", "name", "cluster_id"))
    host = prometheus_signals()
    complete &= host is not None
    for pk, name, _cluster in nodes:
        by_node[pk].extend((host or {}).get(name, ()))
    for cluster in clusters:
        said = backend_signals(cluster)
        complete &= said is not None
        for pk, name, cluster_id in nodes:
            if cluster_id == cluster.pk and (said or {}).get(name):
                by_node[pk].append(said[name])
                backend_knows.add(pk)
    signals = {pk: "; ".join(words)[:REASON_MAX] for pk, words in by_node.items() if words}
    return signals, backend_knows, complete


def poll_node_health(now: datetime | None = None) -> dict[str, int]:
    """Cordon the nodes with a health signal, return the ones whose signals all cleared."""
    now = now or timezone.now()
    signals, backend_knows, complete = gather()
    counts = {"cordoned": 0, "requeued": 0, "recovered": 0}
    for node_id, why in sorted(signals.items()):
        requeued = cordon_unhealthy(node_id, why, now, tell_backend=node_id not in backend_knows)
        if requeued is not None:
            counts["cordoned"] += 1
            counts["requeued"] += len(requeued)
    if complete:  # a source that did not answer is no all-clear
        for node_id in Node.objects.exclude(health_reason="").exclude(pk__in=list(signals)).values_list(
            "pk", flat=True
        ):
            counts["recovered"] += recover(node_id, now)
    if counts["requeued"]:
        enqueue("jobs.backend_work")  # stop them now rather than at beat's next run
    return counts


def cordon_unhealthy(node_id: int, why: str, now: datetime, *, tell_backend: bool = True) -> list[int] | None:
    """Cordon the node for ``why`` and signal its jobs to go; None when it was cordoned already (or
    is an admin's). ``tell_backend`` False: the backend reported the problem itself (Slurm has
    the node down or drained, Kubernetes its condition), so the portal writes nothing there —
    overwriting Slurm's reason would lose it, and returning the node would undo a drain the
    cluster's own admin placed."""
    with transaction.atomic():
        node = Node.objects.select_for_update().select_related("cluster").get(pk=node_id)
        if node.health_reason or node.hold:
            return None  # cordoned by the health check already, or held by an admin
        recent = NodeEvent.objects.filter(
            node=node, action=NodeAction.HEALTH, at__gt=now - FLAP_WINDOW
        ).count()
        node.health_damped = recent + 1 >= FLAP_LIMIT
        node.health_reason, node.hold, before = why, NodeHold.CORDONED, node.state
        if before != NodeState.DOWN:
            node.state = NodeState.CORDONED
        node.save(update_fields=["health_reason", "health_damped", "hold", "state"])
        on_node = jobs_on_node(node)
        said = reasons.reason(reasons.NODE_UNHEALTHY, node=node.name, reason=why)
        requeued = preemption_signal([(j.pk, said) for j in on_node], now, data={"node": node.name})
        NodeEvent.objects.create(
            node=node, action=NodeAction.HEALTH, from_state=before, to_state=node.state, reason=why,
            actor=None, at=now,
            data={"jobs": [j.pk for j in on_node], "requeued": requeued, "damped": node.health_damped,
                  "written_to_backend": tell_backend},
        )
    if tell_backend:
        _tell_backend(node, schedulable=False, why=why)
    return requeued


def recover(node_id: int, now: datetime) -> int:
    """Return a node the health check cordoned and whose signals all cleared — unless it flapped
    (``health_damped``): that one waits for an operator. 1 when returned."""
    with transaction.atomic():
        node = Node.objects.select_for_update().select_related("cluster").get(pk=node_id)
        if not node.health_reason or node.health_damped:
            return 0
        before, was = node.state, node.health_reason
        node.health_reason, node.hold = "", NodeHold.NONE
        if before != NodeState.DOWN:
            node.state = NodeState.READY
        node.save(update_fields=["health_reason", "hold", "state"])
        NodeEvent.objects.create(
            node=node, action=NodeAction.RECOVERED, from_state=before, to_state=node.state,
            reason=was, actor=None, at=now,
        )
        cordon = NodeEvent.objects.filter(node=node, action=NodeAction.HEALTH).order_by("-at", "-id").first()
    if cordon is None or cordon.data.get("written_to_backend", True):
        _tell_backend(node, schedulable=True, why=was)  # lift what the health check wrote there
    return 1


def _tell_backend(node: Node, *, schedulable: bool, why: str) -> None:
    """The cordon on the cluster too, so native jobs stay off the node. The portal's own hold is
    what the engine places by, so a backend that refuses (or does not answer) changes nothing
    here; the next operator action writes it again."""
    cluster = node.cluster
    try:
        backend_for(cluster.kind, cluster.config or {}).set_node_schedulable(
            node.name, schedulable, reason=MARK + why
        )
    except BackendError as exc:
        log.warning("node health: cluster %s refused the cordon of %s: %s", cluster.name, node.name, exc)
