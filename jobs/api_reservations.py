"""REST API of reservations, maintenance windows and queue states (DESIGN §17; docs/reservations.md).

- ``POST /api/v1/projects/{id}/reservation-requests/`` (or ``POST /api/v1/approvals/`` with
  ``"kind": "reservation"`` and ``"project"``): ask for a count of a flavor or named nodes for a
  project over a window; a platform admin decides. A project the caller cannot see is a 404.
- ``GET /api/v1/reservations/``: maintenance windows and the reservations of visible projects;
  ``POST /api/v1/maintenance/`` (platform admins); ``POST /api/v1/reservations/{id}/cancel/``.
- ``GET``/``PUT /api/v1/projects/{id}/queue-state/`` and ``/api/v1/departments/{id}/queue-state/``:
  open, hold or drain, with a reason (the department's admins, platform admins)."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _h
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import reservations as svc
from jobs.reservation_models import QueueState, Reservation
from portal.api import VisibleRelatedField
from portal.api_approvals import ApprovalDetailOut, detail_response
from portal.approvals import ApprovalKindHandler, register_kind
from portal.daterange import validate_in_range
from portal.models import ApprovalKind, ApprovalRequest, User
from portal.pagination import Pagination
from portal.selectors import visible_departments, visible_projects
from quotas.models import Flavor, Node


class _WindowIn(serializers.Serializer):
    starts_at = serializers.DateTimeField(validators=[validate_in_range])
    ends_at = serializers.DateTimeField(validators=[validate_in_range])
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class ReservationRequestBody(_WindowIn):
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.filter(active=True),
                                          required=False, allow_null=True, default=None)
    gpus = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False, allow_null=True,
                                    default=None, help_text=_h("A count of whole GPUs of ``flavor``."))
    nodes = serializers.SlugRelatedField(slug_field="name", queryset=Node.objects.all(), many=True,
                                         required=False, default=list,
                                         help_text=_h("Or named nodes (instead of a count)."))


class ReservationRequestIn(ReservationRequestBody):
    kind = serializers.CharField(required=False, help_text=_h('"reservation" (on POST /approvals/)'))
    project = VisibleRelatedField(visible_projects)

    def validate_kind(self, value):
        if value != ApprovalKind.RESERVATION:
            raise serializers.ValidationError(
                _("This body is a %(kind)s request.") % {"kind": ApprovalKind.RESERVATION})
        return value


def create_reservation_request(actor: User, data: dict) -> ApprovalRequest:
    return svc.reservation_request_create(
        actor=actor, project=data["project"], starts_at=data["starts_at"], ends_at=data["ends_at"],
        flavor=data.get("flavor"), gpus=data.get("gpus"), nodes=data.get("nodes") or [],
        reason=data.get("reason", ""),
    )


def register() -> None:
    register_kind(ApprovalKindHandler(
        kind=ApprovalKind.RESERVATION,
        apply=svc.reservation_request_apply,
        close=svc.reservation_request_close,
        api_input=ReservationRequestIn,
        api_create=create_reservation_request,
    ))


class ProjectReservationRequestApi(APIView):
    """Ask for a reservation for this project (whoever may edit it); a platform admin decides."""

    @extend_schema(request=ReservationRequestBody, responses={201: ApprovalDetailOut})
    def post(self, request, pk: int):
        project = get_object_or_404(visible_projects(request.user), pk=pk)
        body = ReservationRequestBody(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        obj = create_reservation_request(request.user, {**body.validated_data, "project": project})
        return detail_response(request, obj, status.HTTP_201_CREATED)


class ReservationOut(serializers.ModelSerializer):
    project = serializers.SlugRelatedField(slug_field="code", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    nodes = serializers.SlugRelatedField(slug_field="name", read_only=True, many=True)
    maintenance = serializers.BooleanField(read_only=True)
    slurm_name = serializers.CharField(read_only=True)

    class Meta:
        model = Reservation
        fields = ["id", "project", "maintenance", "flavor", "gpus", "nodes", "starts_at", "ends_at", "state",
                  "reason", "slurm_name", "created_at"]


class ReservationListApi(ListAPIView):
    """Maintenance windows, and the reservations of the projects you can see, by start."""

    serializer_class = ReservationOut
    pagination_class = Pagination

    def get_queryset(self):
        return svc.visible_reservations(self.request.user).order_by("starts_at", "id")


class MaintenanceIn(_WindowIn):
    nodes = serializers.SlugRelatedField(slug_field="name", queryset=Node.objects.all(), many=True)


class MaintenanceApi(APIView):
    """Schedule a maintenance window on named nodes (platform admins; a reason is required)."""

    @extend_schema(request=MaintenanceIn, responses={201: ReservationOut})
    def post(self, request):
        body = MaintenanceIn(data=request.data)
        body.is_valid(raise_exception=True)
        d = body.validated_data
        resv = svc.maintenance_create(actor=request.user, nodes=d["nodes"], starts_at=d["starts_at"],
                                      ends_at=d["ends_at"], reason=d.get("reason", ""))
        return Response(ReservationOut(resv).data, status=status.HTTP_201_CREATED)


class ReservationCancelApi(APIView):
    """Cancel a reservation (whoever may edit its project, platform admins) or a maintenance
    (platform admins)."""

    @extend_schema(request=None, responses={200: ReservationOut})
    def post(self, request, pk: int):
        resv = get_object_or_404(svc.visible_reservations(request.user), pk=pk)
        svc.reservation_cancel(actor=request.user, reservation=resv)
        resv.refresh_from_db()
        return Response(ReservationOut(resv).data)


class QueueStateOut(serializers.Serializer):
    state = serializers.ChoiceField(choices=QueueState.choices)


class QueueStateIn(serializers.Serializer):
    state = serializers.ChoiceField(choices=QueueState.choices)
    reason = serializers.CharField(max_length=300)


class _QueueStateApi(APIView):
    owner = ""

    def _target(self, request, pk):
        user = request.user
        rows = visible_projects(user) if self.owner == "project" else visible_departments(user)
        return get_object_or_404(rows, pk=pk)

    @extend_schema(responses={200: QueueStateOut})
    def get(self, request, pk: int):
        target = self._target(request, pk)
        return Response({"state": svc.queue_state_of(**{self.owner: target})})

    @extend_schema(request=QueueStateIn, responses={200: QueueStateOut})
    def put(self, request, pk: int):
        target = self._target(request, pk)
        body = QueueStateIn(data=request.data)
        body.is_valid(raise_exception=True)
        svc.queue_state_set(actor=request.user, state=body.validated_data["state"],
                            reason=body.validated_data["reason"], **{self.owner: target})
        return Response({"state": svc.queue_state_of(**{self.owner: target})})


class ProjectQueueStateApi(_QueueStateApi):
    """A project's queue state: open, hold (nothing new admitted) or drain (hold, and its running
    jobs are stopped and requeued, checkpointing ones first)."""

    owner = "project"


class DepartmentQueueStateApi(_QueueStateApi):
    """A department's queue state (it holds every project under it)."""

    owner = "department"
