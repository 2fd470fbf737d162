"""REST API of the node / GPU map (issue 24): the nodes with the occupancy of each GPU, and
cordon, drain and uncordon (return to service) for platform admins (``jobs.clusters.nodes``; anyone
else gets 403). A job is named only where the caller may see it (``portal.selectors``)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.clusters import node_map
from jobs.clusters.nodes import REASON_MAX, node_cordon, node_drain, node_return
from portal.pagination import Pagination
from portal.selectors import scope_for
from quotas.api_baselines import DriftOut, drift_out
from quotas.baselines import node_drift
from quotas.models import Cluster, Flavor, Node, NodeState


class GpuHolderOut(serializers.Serializer):
    job = serializers.IntegerField(allow_null=True, help_text="The job's id; null when you may not see it.")
    name = serializers.CharField(help_text="The job's name; empty when you may not see it.")
    milli = serializers.IntegerField(help_text="Thousandths of the GPU (or slice) the job holds.")
    idle = serializers.BooleanField(help_text="The job was flagged idle by the utilisation poll.")


class GpuOut(serializers.Serializer):
    index = serializers.IntegerField()
    status = serializers.ChoiceField(
        choices=["free", "partial", "used", "idle"],
        help_text="free; partial (shared, room left); used; idle (a holder was flagged idle).",
    )
    holders = GpuHolderOut(many=True)


class NodeOccupancyOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    state = serializers.ChoiceField(choices=NodeState.choices)
    hold = serializers.CharField(
        help_text="A hold: cordoned (by a platform admin or the health check), draining, or empty.")
    health = serializers.ChoiceField(
        choices=["ok", "down", "unhealthy"],
        help_text="down: the backend says the node does not answer; unhealthy: cordoned by the health check.")
    health_reason = serializers.CharField(
        help_text="Why the health check cordoned the node (an XID error, Slurm's reason, a Kubernetes "
        "condition); empty when it did not.")
    health_damped = serializers.BooleanField(
        help_text="It went bad too often: it stays cordoned until an operator returns it.")
    zone = serializers.CharField()
    spine = serializers.CharField()
    leaf = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs (or slices) of the node.")
    free = serializers.IntegerField(help_text="GPUs (or slices) no job holds.")
    usable = serializers.IntegerField(
        help_text="Free GPUs (or slices) the node's free CPU, memory and local disk can feed at its share "
        "(what placement can use).")
    stranded = serializers.IntegerField(
        help_text="Free GPUs (or slices) the node's free CPU, memory or local disk cannot feed: "
        "free - usable.")
    occupancy = GpuOut(many=True)
    drift = DriftOut(help_text="The node's driver and CUDA against its flavor's software baseline.")


def node_out(view: node_map.NodeView) -> dict:
    n = view.node
    return {
        "id": n.pk,
        "name": n.name,
        "cluster": n.cluster.name,
        "flavor": n.flavor.name,
        "state": n.state,
        "hold": n.hold,
        "health": view.health,
        "health_reason": n.health_reason,
        "health_damped": n.health_damped,
        "zone": n.zone,
        "spine": n.spine,
        "leaf": n.leaf,
        "gpus": n.gpu_count,
        "free": view.free,
        "usable": view.usable,
        "stranded": view.stranded,
        "occupancy": [
            {
                "index": g.index,
                "status": g.status,
                "holders": [
                    {"job": h.job_id if h.name else None, "name": h.name, "milli": h.milli, "idle": h.idle}
                    for h in g.holders
                ],
            }
            for g in view.gpus
        ],
        "drift": drift_out(view.drift if view.drift is not None else node_drift(n)),
    }


def _by_name(model, field: str, raw: str | None):
    if not raw:
        return None
    found = model.objects.filter(name=raw).first()
    if found is None:
        raise ValidationError({field: [_("No %(what)s named %(name)s.") % {"what": field, "name": raw}]})
    return found


class NodeOccupancyApi(GenericAPIView):
    """Every node of the active clusters (or of one), with the occupancy of each GPU or slice."""

    pagination_class = Pagination
    serializer_class = NodeOccupancyOut
    queryset = Node.objects.none()  # for the schema: the nodes are read by jobs.clusters.node_map

    @extend_schema(
        parameters=[
            OpenApiParameter("cluster", str, description="Only this cluster's nodes (its name)."),
            OpenApiParameter("flavor", str, description="Only nodes of this flavor (its name)."),
            OpenApiParameter("state", str, enum=NodeState.values, description="Only nodes in this state."),
            OpenApiParameter("has_free", bool, description="Only ready nodes with a free GPU."),
            OpenApiParameter("off_baseline", bool, description="Only nodes off their software baseline."),
        ],
        responses=NodeOccupancyOut(many=True),
    )
    def get(self, request):
        params = request.query_params
        cluster = _by_name(Cluster, "cluster", params.get("cluster"))
        flavor = _by_name(Flavor, "flavor", params.get("flavor"))
        state = params.get("state") or ""
        if state and state not in NodeState.values:
            states = ", ".join(NodeState.values)
            raise ValidationError({"state": [_("One of: %(states)s.") % {"states": states}]})
        has_free = str(params.get("has_free", "")).lower() in ("1", "true", "yes")
        off_baseline = str(params.get("off_baseline", "")).lower() in ("1", "true", "yes")
        clusters = [cluster] if cluster else list(node_map.map_clusters())
        out = []
        for c in clusters:
            built = node_map.node_map(request.user, cluster=c, flavor=flavor, state=state, has_free=has_free,
                                      off_baseline=off_baseline)
            out += [node_out(v) for v in built.nodes]
        return self.get_paginated_response(self.paginate_queryset(out))


class NodeActionIn(serializers.Serializer):
    reason = serializers.CharField(max_length=REASON_MAX, help_text="Why (kept in the node's history).")


class DrainIn(NodeActionIn):
    requeue = serializers.BooleanField(
        default=False,
        help_text="true: requeue the node's jobs now (preempted, with their grace period); "
        "false: let them finish.",
    )


class NodeEventOut(serializers.Serializer):
    action = serializers.CharField()
    from_state = serializers.CharField()
    to_state = serializers.CharField()
    reason = serializers.CharField()
    at = serializers.DateTimeField()
    jobs = serializers.ListField(child=serializers.IntegerField(), help_text="Jobs on the node then.")
    requeued = serializers.ListField(
        child=serializers.IntegerField(), help_text="Jobs sent back to the queue."
    )


class NodeActionOut(serializers.Serializer):
    node = NodeOccupancyOut()
    changed = serializers.BooleanField(help_text="false: the node already was there (nothing recorded).")
    event = NodeEventOut(allow_null=True)


class _NodeActionApi(APIView):
    input = NodeActionIn

    def act(self, request, node: Node, data: dict):
        raise NotImplementedError

    def post(self, request, pk):
        if not scope_for(request.user).platform_admin:  # before reading anything the caller sent
            raise PermissionDenied(_("Only platform admins cordon, drain or return nodes."))
        node = get_object_or_404(Node.objects.select_related("cluster", "flavor"), pk=pk)
        data = self.input(data=request.data)
        data.is_valid(raise_exception=True)
        outcome = self.act(request, node, data.validated_data)
        view = node_map.node_views(request.user, [outcome.node])[0]
        event = outcome.event
        return Response(
            {
                "node": node_out(view),
                "changed": event is not None,
                "event": None if event is None else {
                    "action": event.action,
                    "from_state": event.from_state,
                    "to_state": event.to_state,
                    "reason": event.reason,
                    "at": event.at,
                    "jobs": event.data.get("jobs", []),
                    "requeued": event.data.get("requeued", []),
                },
            }
        )


@extend_schema(request=NodeActionIn, responses=NodeActionOut)
class NodeCordonApi(_NodeActionApi):
    """Cordon the node: it takes no new jobs, the jobs on it run on (platform admins)."""

    def act(self, request, node, data):
        return node_cordon(actor=request.user, node=node, reason=data["reason"])


@extend_schema(request=DrainIn, responses=NodeActionOut)
class NodeDrainApi(_NodeActionApi):
    """Drain the node: no new jobs; its jobs finish, or are requeued now (platform admins)."""

    input = DrainIn

    def act(self, request, node, data):
        return node_drain(actor=request.user, node=node, reason=data["reason"], requeue=data["requeue"])


@extend_schema(request=NodeActionIn, responses=NodeActionOut)
class NodeUncordonApi(_NodeActionApi):
    """Return the node to service (lift a cordon or drain; platform admins)."""

    def act(self, request, node, data):
        return node_return(actor=request.user, node=node, reason=data["reason"])
