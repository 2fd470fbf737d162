"""REST API of statements: list and detail (JSON), the current-month estimate, and the chargeback
download (CSV / XLSX). Everything starts from ``selectors.statement_departments``: finance and
department admins of the department's subtree, platform admins and auditors; others get 404."""

from __future__ import annotations

from datetime import date
from decimal import Decimal

from django.conf import settings
from django.http import Http404
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import VisibleRelatedField
from portal.api_base import DetailApi, ListCreateApi
from portal.selectors import get_visible, visible_departments, visible_projects
from quotas.selectors import site_zone

from . import budgets, exports, manual, selectors, usage
from .forms import UsageForm
from .meter import meter_state
from .models import BUDGET_AMOUNT_MAX, Budget, ManualAdjustment, ManualKind, Statement, StatementLine
from .periods import FIRST_MONTH, LAST_MONTH, MonthOutOfRange, month_label, month_of, parse_month

MONTH_PARAM = OpenApiParameter("month", str, description="YYYY-MM (site time zone)")


def month_param(request, *, required: bool) -> date | None:
    raw = request.query_params.get("month")
    if raw is None or raw == "":
        if required:
            raise ValidationError({"month": [_("Give the month as YYYY-MM.")]})
        return None
    try:
        return parse_month(raw)
    except MonthOutOfRange:
        raise ValidationError(
            {
                "month": [
                    _("Months run from %(first)s to %(last)s.")
                    % {"first": month_label(FIRST_MONTH), "last": month_label(LAST_MONTH)}
                ]
            }
        ) from None
    except ValueError:
        raise ValidationError(
            {"month": [_("%(v)s is not a month: use YYYY-MM.") % {"v": repr(raw[:20])}]}
        ) from None


def department_param(request) -> frozenset[int] | None:
    """The visible departments, narrowed to ``?department=`` when given (404 if not visible)."""
    visible = selectors.statement_departments(request.user)
    raw = request.query_params.get("department")
    if raw in (None, ""):
        return visible
    try:
        wanted = int(raw)
    except ValueError:
        raise ValidationError({"department": [_("A department id is a number.")]}) from None
    if visible is not None and wanted not in visible:
        raise Http404
    return frozenset({wanted})


@extend_schema_field(OpenApiTypes.STR)
class MonthField(serializers.Field):
    def to_representation(self, value: date) -> str:
        return month_label(value)

    def to_internal_value(self, data):  # pragma: no cover - read-only
        raise NotImplementedError


class StatementOut(serializers.ModelSerializer):
    department_code = serializers.CharField(source="department.code", read_only=True)
    department_name = serializers.CharField(source="department.name", read_only=True)
    month = MonthField(read_only=True)

    class Meta:
        model = Statement
        fields = [
            "id",
            "department",
            "department_code",
            "department_name",
            "month",
            "state",
            "currency",
            "total",
            "priced_normalised",
            "created_at",
            "closed_at",
        ]


class LineOut(serializers.ModelSerializer):
    # Null on lines not charged to a project or a user (StatementLine.project / .user are optional).
    project_code = serializers.CharField(source="project.code", read_only=True, default=None, allow_null=True)
    user = serializers.CharField(source="user.username", read_only=True, default=None, allow_null=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True, default=None, allow_null=True)
    original_month = serializers.SerializerMethodField()
    # Manual lines: the adjustment billed, its reason and attachment name; null on other lines.
    reason = serializers.CharField(source="manual.reason", read_only=True, default=None, allow_null=True)
    attachment = serializers.CharField(
        source="manual.attachment", read_only=True, default=None, allow_null=True
    )

    class Meta:
        model = StatementLine
        fields = [
            "kind",
            "project",
            "project_code",
            "user",
            "flavor",
            "tier",
            "original_month",
            "unit_price",
            "card_hours",
            "card_seconds",
            "normalised_card_hours",
            "normalised_card_seconds",
            "resource",
            "core_hours",
            "core_seconds",
            "gib_hours",
            "mib_seconds",
            "amount",
            "period_start",
            "period_end",
            "manual",
            "reason",
            "attachment",
        ]

    def get_original_month(self, line) -> str | None:
        return month_label(line.original_month) if line.original_month else None


class StatementDetailOut(StatementOut):
    lines = serializers.SerializerMethodField()

    class Meta(StatementOut.Meta):
        fields = [*StatementOut.Meta.fields, "lines"]

    @extend_schema_field(LineOut(many=True))
    def get_lines(self, statement) -> list[dict]:
        return LineOut(selectors.statement_lines(statement), many=True).data


class StatementListApi(ListCreateApi):
    output = StatementOut

    @extend_schema(
        parameters=[MONTH_PARAM, OpenApiParameter("department", int), OpenApiParameter("state", str)]
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def visible(self):
        qs = selectors.visible_statements(self.request.user)
        month = month_param(self.request, required=False)
        if month is not None:
            qs = qs.filter(month=month)
        departments = department_param(self.request)
        if departments is not None:
            qs = qs.filter(department_id__in=departments)
        state = self.request.query_params.get("state")
        if state:
            qs = qs.filter(state=state)
        return qs.order_by("-month", "department__code")


class StatementDetailApi(DetailApi):
    output = StatementDetailOut

    def visible(self):
        return selectors.visible_statements(self.request.user)


class EstimateLineOut(serializers.Serializer):
    kind = serializers.CharField(source="key.kind")
    project = serializers.IntegerField(source="key.project_id", allow_null=True)
    user = serializers.IntegerField(source="key.user_id", allow_null=True)
    # The name closed statements' lines show in ``user``; ``user`` here stays the id it always was.
    username = serializers.SerializerMethodField()
    flavor = serializers.IntegerField(source="key.flavor_id", allow_null=True)  # null: a manual line
    tier = serializers.CharField(source="key.tier")
    original_month = serializers.SerializerMethodField()
    unit_price = serializers.SerializerMethodField()
    card_hours = serializers.DecimalField(max_digits=20, decimal_places=6)
    normalised_card_hours = serializers.DecimalField(max_digits=20, decimal_places=6, allow_null=True)
    # What the line bills (DESIGN §15): card, or CPU / memory beyond the share ("core", "gib").
    resource = serializers.CharField()
    core_hours = serializers.DecimalField(max_digits=20, decimal_places=6, allow_null=True)
    gib_hours = serializers.DecimalField(max_digits=20, decimal_places=6, allow_null=True)
    amount = serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True)

    def get_username(self, line) -> str | None:
        return self.context.get("usernames", {}).get(line.key.user_id)

    def get_original_month(self, line) -> str | None:
        return month_label(line.key.original_month) if line.key.original_month else None

    def get_unit_price(self, line) -> str | None:
        return None if line.period is None else str(line.period.price)


class EstimateOut(serializers.Serializer):
    department = serializers.IntegerField(source="department.pk")
    department_code = serializers.CharField(source="department.code")
    month = MonthField()
    metered_through = serializers.DateTimeField(allow_null=True)
    total = serializers.DecimalField(max_digits=16, decimal_places=2)
    unpriced = serializers.BooleanField()
    lines = EstimateLineOut(many=True)


class StatementEstimateApi(APIView):
    """The statements of an open month (default: this month) as they stand now, computed on the
    fly from the ledger and never stored: a cost estimate, not a bill."""

    @extend_schema(
        parameters=[MONTH_PARAM, OpenApiParameter("department", int)], responses=EstimateOut(many=True)
    )
    def get(self, request):
        if not selectors.sees_statements(request.user):
            raise Http404
        month = month_param(request, required=False) or month_of(timezone.now(), site_zone())
        if selectors.is_closed(month):
            raise ValidationError(
                {"month": [_("%(m)s is closed: read its statements.") % {"m": month_label(month)}]}
            )
        departments = department_param(request)
        estimates = [
            e
            for e in selectors.statement_estimate(request.user, month)
            if departments is None or e.department.pk in departments
        ]
        usernames = selectors.estimate_usernames(estimates)
        return Response(EstimateOut(estimates, many=True, context={"usernames": usernames}).data)


class ChargebackApi(APIView):
    """The chargeback file of a closed month (``format`` csv or xlsx), limited to the statements
    the caller sees. Columns: docs/billing.md."""

    def perform_content_negotiation(self, request, force=False):
        # ``format`` names the file type here, not a DRF renderer; errors are JSON.
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    @extend_schema(
        parameters=[
            OpenApiParameter("month", str, required=True, description="YYYY-MM"),
            OpenApiParameter("format", str, enum=list(exports.FORMATS), description="csv (default) or xlsx"),
            OpenApiParameter("department", int),
            OpenApiParameter(
                "bom",
                str,
                enum=["1", "0"],
                description="CSV: 1 (default) starts the file with a UTF-8 byte order mark, which "
                "Excel needs to read it as UTF-8; 0 leaves it out.",
            ),
            OpenApiParameter(
                "encoding",
                str,
                enum=list(exports.ENCODINGS),
                description="CSV: utf-8-sig (default, with the byte order mark) or utf-8 (plain); "
                "the same choice as bom, which it must not contradict.",
            ),
        ],
        responses={
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.BINARY),
            (200, exports.CONTENT_TYPES["xlsx"]): OpenApiResponse(OpenApiTypes.BINARY),
        },
    )
    def get(self, request):
        if not selectors.sees_statements(request.user):
            raise Http404
        fmt = (request.query_params.get("format") or "csv").lower()
        if fmt not in exports.FORMATS:
            raise ValidationError(
                {"format": [_("Unknown format %(f)s: use csv or xlsx.") % {"f": repr(fmt[:10])}]}
            )
        bom = csv_bom_param(request.query_params)
        month = month_param(request, required=True)
        departments = department_param(request)
        if not selectors.is_closed(month):
            raise ValidationError({"month": [_("%(m)s is not closed yet.") % {"m": month_label(month)}]})
        return exports.chargeback_response(month, departments, fmt, bom=bom)


def csv_bom_param(params) -> bool:
    """The CSV's byte order mark from ``bom`` and ``encoding`` (400 naming the field at fault)."""
    bom = exports.csv_bom(bom=params.get("bom"), encoding=params.get("encoding"))
    if bom is None:
        field = "bom" if exports.bom_flag(params.get("bom")) is None else "encoding"
        raise ValidationError({field: [exports.encoding_error()]})
    return bom


# --- usage explorer (issue 24) -------------------------------------------------------------------


def _dec(value) -> str | None:
    return None if value is None else str(value)


def _minutes(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class UsageExplorerRowOut(serializers.Serializer):
    group = serializers.SerializerMethodField(help_text="{dimension: id or kind}, one or two entries")
    labels = serializers.SerializerMethodField(help_text="{dimension: readable name}")
    card_hours = serializers.SerializerMethodField()
    normalised_card_hours = serializers.SerializerMethodField()
    core_hours = serializers.SerializerMethodField(help_text="CPU the allocations held (DESIGN §15)")
    gib_hours = serializers.SerializerMethodField(help_text="memory the allocations held, GiB × hours")
    cost = serializers.SerializerMethodField(help_text="Decimal string; null when money is not shown")
    unpriced = serializers.BooleanField()
    sampled_card_hours = serializers.SerializerMethodField()
    effective_card_hours = serializers.SerializerMethodField()
    utilisation_pct = serializers.SerializerMethodField()
    jobs_started = serializers.IntegerField()
    wait_mean_minutes = serializers.SerializerMethodField()
    wait_p95_minutes = serializers.SerializerMethodField()

    def _dims(self) -> tuple[str, ...]:
        return self.context["group_by"]

    def get_group(self, row) -> dict:
        return dict(zip(self._dims(), row.key, strict=False))

    def get_labels(self, row) -> dict:
        return dict(zip(self._dims(), row.labels, strict=False))

    def get_card_hours(self, row) -> str:
        return str(row.card_hours)

    def get_normalised_card_hours(self, row) -> str:
        return str(row.normalised_card_hours)

    def get_core_hours(self, row) -> str:
        return str(row.core_hours)

    def get_gib_hours(self, row) -> str:
        return str(row.gib_hours)

    def get_cost(self, row) -> str | None:
        return _dec(row.cost) if self.context["money"] else None

    def get_sampled_card_hours(self, row) -> str | None:
        return _dec(row.sampled_card_hours)

    def get_effective_card_hours(self, row) -> str | None:
        return _dec(row.effective_card_hours)

    def get_utilisation_pct(self, row) -> str | None:
        return _dec(row.utilisation_pct)

    def get_wait_mean_minutes(self, row) -> float | None:
        return _minutes(row.wait_mean_minutes)

    def get_wait_p95_minutes(self, row) -> float | None:
        return _minutes(row.wait_p95_minutes)


class UsageExplorerOut(serializers.Serializer):
    start = serializers.DateField(help_text="first local day")
    end = serializers.DateField(help_text="local day after the last (exclusive)")
    group_by = serializers.ListField(child=serializers.CharField())
    currency = serializers.CharField(allow_null=True)
    metered_through = serializers.DateTimeField(allow_null=True)
    rows = UsageExplorerRowOut(many=True)
    total = UsageExplorerRowOut()


class UsageApi(APIView):
    """The usage explorer's table: card-hours, normalised card-hours, cost (the ledger priced as
    statement usage lines, for those who see statements), utilisation and queue waits of
    [start, end) in the site time zone, grouped by one or two of department, project, user,
    flavor, kind, priority (``group_by=project`` or ``group_by=department,user``). Rows are
    limited to what the caller sees. docs/billing.md "Usage explorer"."""

    @extend_schema(
        parameters=[
            OpenApiParameter("start", OpenApiTypes.DATE, description="YYYY-MM-DD, first day (default: "
                             "the first of this month)"),
            OpenApiParameter("end", OpenApiTypes.DATE, description="YYYY-MM-DD, exclusive (default: the "
                             "first of next month)"),
            OpenApiParameter("group_by", str, description="one or two of " + ", ".join(usage.DIMENSIONS)
                             + ", comma-separated (default project)"),
        ],
        responses=UsageExplorerOut,
    )
    def get(self, request):
        params = request.query_params
        levels = [g.strip() for g in (params.get("group_by") or "").split(",") if g.strip()]
        if len(levels) > usage.MAX_LEVELS:
            raise ValidationError({"group_by": [_("Group by one or two dimensions.")]})
        form = UsageForm(
            {
                "start": params.get("start") or "",
                "end": params.get("end") or "",
                "group_by": levels[0] if levels else "",
                "then_by": levels[1] if len(levels) > 1 else "",
            }
        )
        if not form.is_valid():
            errors = {("group_by" if k == "then_by" else k): v for k, v in form.errors.items()}
            raise ValidationError(errors)
        report = usage.usage_report(request.user, form.usage_query(), settings.GPUPOOL["CURRENCY"])
        first, until = usage.range_label(report.query.start, report.query.end)
        context = {"group_by": report.query.group_by, "money": report.money}
        return Response(
            {
                "start": first.isoformat(),
                "end": until.isoformat(),
                "group_by": list(report.query.group_by),
                "currency": report.currency if report.money else None,
                "metered_through": meter_state().metered_through,
                "rows": UsageExplorerRowOut(report.rows, many=True, context=context).data,
                "total": UsageExplorerRowOut(report.total, context=context).data,
            }
        )


# --- budgets (DESIGN §3.9) ------------------------------------------------------------------------


class BudgetForecastOut(serializers.Serializer):
    unit = serializers.CharField(help_text="The budget's currency if it has an amount, else card-hours.")
    rate_per_day = serializers.DecimalField(max_digits=20, decimal_places=2)
    projected = serializers.DecimalField(max_digits=20, decimal_places=2, help_text="At the month's end.")
    runs_out_on = serializers.DateField(allow_null=True, help_text="Null: not this month.")
    window_start = serializers.DateTimeField(help_text="The rate is measured from here to now.")



class BudgetOut(serializers.ModelSerializer):
    month = serializers.SerializerMethodField()
    used_card_hours = serializers.SerializerMethodField()
    percent = serializers.SerializerMethodField()
    over = serializers.SerializerMethodField()
    used_amount = serializers.SerializerMethodField()
    forecast = serializers.SerializerMethodField()
    updated_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Budget
        fields = [
            "id",
            "department",
            "project",
            "card_hours",
            "amount",
            "currency",
            "month",
            "used_card_hours",
            "used_amount",
            "percent",
            "over",
            "forecast",
            "updated_at",
            "updated_by",
        ]

    def _status(self, budget) -> budgets.BudgetStatus:
        statuses = self.context.setdefault("budget_statuses", {})
        if budget.pk not in statuses:
            statuses.update(budgets.budget_statuses([budget], series=True))
        return statuses[budget.pk]

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=2, allow_null=True))
    def get_used_amount(self, budget) -> str | None:
        """Money used this month (the ledger priced as the statement prices it, plus the unmetered
        tail at the standard rate); null for a budget without an amount."""
        return None if budget.amount is None else str(self._status(budget).used_money)

    @extend_schema_field(BudgetForecastOut)
    def get_forecast(self, budget) -> dict:
        status = self._status(budget)
        runs_out = status.runs_out_on
        return {
            "unit": budget.currency if status.in_money else "card-hours",
            "rate_per_day": str(status.forecast.rate_per_day.quantize(budgets.CENT)),
            "projected": str(status.projected),
            "runs_out_on": runs_out.isoformat() if runs_out else None,
            "window_start": status.forecast.window_start,
        }

    def get_month(self, budget) -> str:
        return month_label(self._status(budget).month)

    @extend_schema_field(serializers.DecimalField(max_digits=16, decimal_places=2))
    def get_used_card_hours(self, budget) -> str:
        return str(self._status(budget).used.quantize(budgets.CENT))

    def get_percent(self, budget) -> int:
        return self._status(budget).percent

    def get_over(self, budget) -> bool:
        return self._status(budget).over


class BudgetIn(serializers.Serializer):
    department = VisibleRelatedField(visible_departments, required=False, allow_null=True)
    project = VisibleRelatedField(visible_projects, required=False, allow_null=True)
    card_hours = serializers.DecimalField(
        max_digits=14, decimal_places=2, min_value=Decimal("0.01"), required=False, allow_null=True
    )
    amount = serializers.DecimalField(
        max_digits=16,
        decimal_places=2,
        min_value=Decimal("0.01"),
        max_value=BUDGET_AMOUNT_MAX,
        required=False,
        allow_null=True,
        help_text="Money per month in the site currency; null removes the money limit.",
    )


def _limits(data) -> dict:
    """The limits a request gives: absent ones stay as they are (``budgets.budget_set``)."""
    return {field: data[field] for field in ("card_hours", "amount") if field in data}


class BudgetListApi(ListCreateApi):
    """Monthly budgets (card-hours, money or both) of the visible departments and projects, with
    this month's usage (ledger + the unmetered tail), the money spent (priced as the statement
    prices it) and the burn-down forecast to the month's end. POST sets one (creates or changes
    the budget of that department or project; a limit left out stays as it is, null removes it):
    department admins and finance of the department or above, platform admins."""

    output, input = BudgetOut, BudgetIn

    def visible(self):
        return budgets.visible_budgets(self.request.user).order_by("id")

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        context = self.get_serializer_context()
        # One usage computation per page.
        context["budget_statuses"] = budgets.budget_statuses(page, series=True)
        return self.get_paginated_response(BudgetOut(page, many=True, context=context).data)

    def perform(self, data):
        return budgets.budget_set(
            actor=self.request.user,
            department=data.get("department"),
            project=data.get("project"),
            **_limits(data),
        )


class BudgetDetailApi(DetailApi):
    output, input, deletable = BudgetOut, BudgetIn, True

    def visible(self):
        return budgets.visible_budgets(self.request.user)

    def update_object(self, obj, data):
        for field in ("department", "project"):
            if field in data and data[field] != getattr(obj, field):
                raise ValidationError({field: [_("A budget stays with its department or project.")]})
        if not _limits(data):
            return obj
        return budgets.budget_set(
            actor=self.request.user, department=obj.department, project=obj.project, **_limits(data)
        )

    def delete_object(self, obj):
        budgets.budget_delete(actor=self.request.user, budget=obj)


# --- manual adjustments (DESIGN §7; docs/manual-adjustments.md) -----------------------------------


class ManualAdjustmentOut(serializers.ModelSerializer):
    department_code = serializers.CharField(source="department.code", read_only=True)
    project_code = serializers.CharField(source="project.code", read_only=True, default=None, allow_null=True)
    signed_amount = serializers.DecimalField(max_digits=16, decimal_places=2, read_only=True)
    proposed_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    month = serializers.SerializerMethodField()

    class Meta:
        model = ManualAdjustment
        fields = [
            "id",
            "department",
            "department_code",
            "project",
            "project_code",
            "kind",
            "amount",
            "signed_amount",
            "currency",
            "reason",
            "attachment",
            "state",
            "proposed_by",
            "proposed_at",
            "decided_by",
            "decided_at",
            "decision_note",
            "month",
        ]

    def get_month(self, obj) -> str | None:
        """The first month whose statement may carry the line (set on approval)."""
        return month_label(obj.month) if obj.month else None


class ManualAdjustmentIn(serializers.Serializer):
    department = VisibleRelatedField(manual.proposable_departments)
    project = VisibleRelatedField(visible_projects, required=False, allow_null=True)
    kind = serializers.ChoiceField(choices=ManualKind.choices)
    # Text, checked by the service (``manual.clean_amount``): "1200.50"; never rounded or clamped.
    amount = serializers.CharField(max_length=40)
    reason = serializers.CharField(max_length=manual.REASON_MAX)
    attachment = serializers.CharField(max_length=manual.ATTACHMENT_MAX, required=False, allow_blank=True)


class ManualAdjustmentListApi(ListCreateApi):
    """Manual credit and debit lines of the departments whose statements the caller reads.
    POST proposes one (finance of the department, platform admins); it is billed only after a
    second person approves it (``…/decide/``)."""

    output, input = ManualAdjustmentOut, ManualAdjustmentIn

    @extend_schema(parameters=[OpenApiParameter("department", int), OpenApiParameter("state", str)])
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def visible(self):
        qs = manual.visible_adjustments(self.request.user)
        departments = department_param(self.request)
        if departments is not None:
            qs = qs.filter(department_id__in=departments)
        state = self.request.query_params.get("state")
        if state:
            qs = qs.filter(state=state)
        return qs.order_by("-id")

    def perform(self, data):
        return manual.adjustment_propose(
            actor=self.request.user,
            department=data["department"],
            project=data.get("project"),
            kind=data["kind"],
            amount=data["amount"],
            reason=data["reason"],
            attachment=data.get("attachment", ""),
        )


class ManualAdjustmentDetailApi(DetailApi):
    output = ManualAdjustmentOut

    def visible(self):
        return manual.visible_adjustments(self.request.user)


class ManualDecideIn(serializers.Serializer):
    approve = serializers.BooleanField()
    note = serializers.CharField(max_length=manual.REASON_MAX, required=False, allow_blank=True, default="")


class ManualAdjustmentDecideApi(APIView):
    """Approve or reject a proposed adjustment: finance of its department or a platform admin,
    never the proposer (403); 409 when it was decided meanwhile."""

    @extend_schema(request=ManualDecideIn, responses={200: ManualAdjustmentOut, 409: OpenApiTypes.OBJECT})
    def post(self, request, pk):
        adjustment = get_visible(manual.visible_adjustments(request.user), pk=pk)
        data = ManualDecideIn(data=request.data)
        data.is_valid(raise_exception=True)
        try:
            adjustment = manual.adjustment_decide(
                actor=request.user,
                adjustment_id=adjustment.pk,
                approve=data.validated_data["approve"],
                note=data.validated_data["note"],
            )
        except manual.AlreadyDecided as exc:
            return Response({"detail": " ".join(exc.messages)}, status=status.HTTP_409_CONFLICT)
        return Response(ManualAdjustmentOut(adjustment).data)
