"""REST API of the approval engine and of notifications (DESIGN §6, §9).

Requests are read through ``visible_approval_requests`` (404 outside the scope); decisions go
through ``portal.approvals`` services. Deciding a request that someone else decided a moment
earlier answers 409 with the reason."""

from __future__ import annotations

from decimal import Decimal

from django.db import transaction
from django.db.models import Prefetch
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    PolymorphicProxySerializer,
    extend_schema,
    extend_schema_field,
)
from rest_framework import generics, serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from . import approvals
from .api_base import DetailApi, ListCreateApi
from .models import ApprovalAudit, ApprovalRequest, ApprovalStep, Notification, StepState
from .notifications import notification_mark_read, notifications_for, notifications_mark_all_read
from .selectors import get_visible, scope_for
from .texts import render_data

# --- output -----------------------------------------------------------------------------------


class ApprovalStepOut(serializers.ModelSerializer):
    # Null for a platform-admin step (no department) and for a step nobody has decided yet.
    department_name = serializers.CharField(
        source="department.name", read_only=True, default=None, allow_null=True
    )
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = ApprovalStep
        fields = [
            "id",
            "order",
            "approver_role",
            "department",
            "department_name",
            "state",
            "opened_at",
            "deadline",
            "on_deadline",
            "decided_by",
            "decided_at",
            "comment",
            "escalated_from",
        ]


class ApprovalAuditOut(serializers.ModelSerializer):
    # Null when the system acted (a deadline expired or escalated the request).
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = ApprovalAudit
        fields = ["id", "action", "step", "actor", "at", "comment", "data"]


def _steps(request: ApprovalRequest) -> list[ApprovalStep]:
    # Uses the prefetched steps of a list page; one query otherwise.
    return list(request.steps.all())


class ApprovalOut(serializers.ModelSerializer):
    requester = serializers.SlugRelatedField(slug_field="username", read_only=True)
    summary = serializers.CharField(
        source="summary_text", read_only=True, help_text="In the language of Accept-Language."
    )
    payload = serializers.SerializerMethodField(
        help_text="What the request is about, as its kind stores it; texts in it (a job's reasons) "
        "in the language of Accept-Language."
    )
    current_step = serializers.SerializerMethodField()
    can_decide = serializers.SerializerMethodField()
    can_cancel = serializers.SerializerMethodField()

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "kind",
            "state",
            "summary",
            "reason",
            "subject_id",
            "payload",
            "requester",
            "department",
            "project",
            "counterparty",
            "created_at",
            "decided_at",
            "current_step",
            "can_decide",
            "can_cancel",
        ]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_payload(self, obj):
        return render_data(obj.payload or {})

    def _open(self, obj) -> ApprovalStep | None:
        return next((s for s in _steps(obj) if s.state == StepState.PENDING), None)

    @extend_schema_field(ApprovalStepOut(allow_null=True))
    def get_current_step(self, obj):
        step = self._open(obj)
        return ApprovalStepOut(step).data if step else None

    def get_can_decide(self, obj) -> bool:
        user = self.context["request"].user
        step = self._open(obj)
        return (
            step is not None
            and obj.requester_id != user.pk
            and approvals.can_act_on_step(scope_for(user), step)
        )

    def get_can_cancel(self, obj) -> bool:
        return approvals.can_cancel(self.context["request"].user, obj)


def _plain(value):
    """The context's figures for JSON: Decimals as strings (exact, like every amount of the API)."""
    if isinstance(value, Decimal):
        return f"{value:f}"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class ApprovalDetailOut(ApprovalOut):
    steps = serializers.SerializerMethodField()
    audit = serializers.SerializerMethodField()
    context = serializers.SerializerMethodField(
        help_text="What an approver weighs the request against, now (docs/approvals.md): ``flavor``; "
        "``usage`` (per quota owner concerned — ``role`` owner, borrower or lender — its ``quota``, "
        "``effective_quota``, and what its subtree holds ``in_quota`` and ``borrowed``); "
        "``requester_usage`` (what the requester's own jobs hold there); ``capacity`` (``healthy``, "
        "``held``, ``free`` GPUs of the flavor); ``cost`` (``basis`` job / quota_month / loan, "
        "``cards``, ``hours``, ``card_hours``, ``amount`` and ``currency`` at the standard rate, null "
        "without a rate); ``history`` (the requester's last ``days`` days: requests ``approved`` and "
        "``rejected``, ``jobs_run``, ``jobs_idle``); ``budgets`` (project's and department's this "
        "month: ``card_hours``, ``used``, ``remaining``; for a money budget ``amount``, ``currency``, "
        "``used_amount``, ``remaining_amount``; ``percent``, the higher share). Numbers are decimal strings. "
        "Null for whoever may not see it: only approvers of the request's steps, admins and finance "
        "of its department, platform admins and auditors do."
    )

    class Meta(ApprovalOut.Meta):
        fields = [*ApprovalOut.Meta.fields, "steps", "audit", "context"]

    @extend_schema_field(serializers.DictField(allow_null=True))  # null: see the help text
    def get_context(self, obj):
        found = approvals.approval_contexts(self.context["request"].user, [obj]).get(obj.pk)
        return _plain(found) if found is not None else None

    @extend_schema_field(ApprovalStepOut(many=True))
    def get_steps(self, obj):
        return ApprovalStepOut(approvals.request_steps(obj), many=True).data

    @extend_schema_field(ApprovalAuditOut(many=True))
    def get_audit(self, obj):
        return ApprovalAuditOut(approvals.request_audit(obj), many=True).data


def detail_response(request, obj: ApprovalRequest, status_code=status.HTTP_200_OK) -> Response:
    return Response(ApprovalDetailOut(obj, context={"request": request}).data, status=status_code)


def create_through(handler, request) -> Response:
    """Validate with the kind's input serializer and create through its service."""
    data = handler.api_input(data=request.data, context={"request": request})
    data.is_valid(raise_exception=True)
    values = {k: v for k, v in data.validated_data.items() if k != "kind"}
    with transaction.atomic():
        obj = handler.api_create(request.user, values)
    return detail_response(request, obj, status.HTTP_201_CREATED)


# --- list, create, detail ------------------------------------------------------------------------


def _flag(value) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def _creatable():
    return {kind: h.api_input for kind, h in sorted(approvals.KINDS.items()) if h.api_input is not None}


_FLAGS = [
    OpenApiParameter("mine", OpenApiTypes.BOOL, description="Only the requests I made."),
    OpenApiParameter("inbox", OpenApiTypes.BOOL, description="Only the requests waiting for my decision."),
]


class ApprovalListApi(generics.ListAPIView):
    """Visible approval requests, newest first. ``POST`` makes a quota, loan, rule-change or
    idle-policy exemption request (``{"kind": "quota"|"loan"|"policy"|"idle_exemption", …}``; rule
    changes: platform admins only, 403 for anyone else before the body is read; an exemption:
    ``{"job": id, "until": instant or null, "reason": …}`` by the job's owner or a project admin);
    jobs ask for approval when they are submitted."""

    serializer_class = ApprovalOut
    filterset_fields = ["state", "kind", "project", "department"]
    http_method_names = ["get", "post", "head", "options"]

    def get_queryset(self):
        user = self.request.user
        params = self.request.query_params
        qs = (
            approvals.inbox_requests(user)
            if _flag(params.get("inbox"))
            else approvals.visible_approval_requests(user)
        )
        if _flag(params.get("mine")):
            qs = qs.filter(requester_id=user.pk)
        steps = ApprovalStep.objects.select_related("department").order_by("order", "id")
        return qs.prefetch_related(Prefetch("steps", queryset=steps)).order_by("-created_at", "-id")

    @extend_schema(parameters=_FLAGS, responses=ApprovalOut(many=True))
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        request=PolymorphicProxySerializer(
            component_name="ApprovalCreate", serializers=_creatable, resource_type_field_name="kind"
        ),
        responses={201: ApprovalDetailOut},
    )
    def post(self, request):
        kind = request.data.get("kind") if hasattr(request.data, "get") else None
        handler = approvals.KINDS.get(kind) if isinstance(kind, str) else None
        if handler is None or handler.api_input is None:
            raise ValidationError(
                {
                    "kind": [
                        _("Choose one of: %(kinds)s. Jobs ask for approval when they are submitted.")
                        % {"kinds": ", ".join(_creatable())}
                    ]
                }
            )
        return create_through(handler, request)


class ApprovalDetailApi(DetailApi):
    output = ApprovalDetailOut

    def visible(self):
        return approvals.visible_approval_requests(self.request.user)


# --- decisions -------------------------------------------------------------------------------------


class DecideIn(serializers.Serializer):
    approve = serializers.BooleanField()
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ApprovalDecideApi(APIView):
    """Approve or reject the open step. 403 for the requester (segregation of duties) and for
    whoever is not an approver of the step; 409 when it was decided meanwhile."""

    @extend_schema(request=DecideIn, responses={200: ApprovalDetailOut, 409: OpenApiTypes.OBJECT})
    def post(self, request, pk):
        obj = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
        data = DecideIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            obj = approvals.approval_decide(
                actor=request.user,
                step_or_request=obj,
                approve=data.validated_data["approve"],
                comment=data.validated_data["comment"],
            )
        except approvals.AlreadyDecided as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        return detail_response(request, obj)


class BulkDecideIn(DecideIn):
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1), min_length=1, max_length=100)


class BulkResultOut(serializers.Serializer):
    id = serializers.IntegerField()
    ok = serializers.BooleanField()
    state = serializers.CharField(allow_null=True)
    error = serializers.CharField(allow_blank=True)


class BulkDecideOut(serializers.Serializer):
    results = BulkResultOut(many=True)


class ApprovalBulkDecideApi(APIView):
    """Decide several requests at once; each id gets its own result (and its own transaction)."""

    @extend_schema(request=BulkDecideIn, responses=BulkDecideOut)
    def post(self, request):
        data = BulkDecideIn(data=request.data)
        data.is_valid(raise_exception=True)
        ids = list(dict.fromkeys(data.validated_data["ids"]))
        found = approvals.visible_approval_requests(request.user).in_bulk(ids)
        results = approvals.approval_bulk_decide(
            actor=request.user,
            requests={pk: found.get(pk) for pk in ids},
            approve=data.validated_data["approve"],
            comment=data.validated_data["comment"],
        )
        return Response({"results": BulkResultOut(results, many=True).data})


class CommentIn(serializers.Serializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ApprovalCancelApi(APIView):
    """The requester (or a platform admin) withdraws a pending request."""

    @extend_schema(request=CommentIn, responses={200: ApprovalDetailOut, 409: OpenApiTypes.OBJECT})
    def post(self, request, pk):
        obj = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
        data = CommentIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            with transaction.atomic():
                obj = approvals.approval_cancel(actor=request.user, request=obj, **data.validated_data)
        except approvals.AlreadyDecided as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        return detail_response(request, obj)


class ApprovalCommentApi(APIView):
    """Add a comment to the record (requester and approvers)."""

    @extend_schema(request=CommentIn, responses={201: ApprovalAuditOut})
    def post(self, request, pk):
        obj = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
        data = CommentIn(data=request.data)
        data.is_valid(raise_exception=True)
        with transaction.atomic():
            entry = approvals.approval_comment(actor=request.user, request=obj, **data.validated_data)
        return Response(ApprovalAuditOut(entry).data, status=status.HTTP_201_CREATED)


# --- notifications -----------------------------------------------------------------------------------


class NotificationOut(serializers.ModelSerializer):
    text = serializers.CharField(
        source="display_text", read_only=True, help_text="In the language of Accept-Language."
    )
    read = serializers.BooleanField(read_only=True)

    class Meta:
        model = Notification
        fields = ["id", "text", "link", "request", "topic", "project", "created_at", "read", "read_at"]


class NotificationListApi(ListCreateApi):
    """My notifications, newest first; ``?unread=1`` for the unread ones."""

    output = NotificationOut

    def visible(self):
        qs = notifications_for(self.request.user)
        if _flag(self.request.query_params.get("unread")):
            qs = qs.filter(read_at__isnull=True)
        return qs.order_by("-created_at", "-id")

    @extend_schema(
        parameters=[OpenApiParameter("unread", OpenApiTypes.BOOL)], responses=NotificationOut(many=True)
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class NotificationReadApi(APIView):
    @extend_schema(request=None, responses=NotificationOut)
    def post(self, request, pk):
        note = get_visible(notifications_for(request.user), pk=pk)
        return Response(NotificationOut(notification_mark_read(actor=request.user, notification=note)).data)


class ReadAllOut(serializers.Serializer):
    marked = serializers.IntegerField()


class NotificationReadAllApi(APIView):
    @extend_schema(request=None, responses=ReadAllOut)
    def post(self, request):
        return Response({"marked": notifications_mark_all_read(actor=request.user)})
