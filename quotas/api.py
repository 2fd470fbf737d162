"""REST API of resources (flavors, clusters, nodes) and of the quota tree."""

from __future__ import annotations

from decimal import Decimal

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from django.utils.translation import gettext as _
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import VisibleRelatedField
from portal.api_base import DetailApi, ListCreateApi
from portal.daterange import validate_in_range
from portal.selectors import get_visible, visible_departments, visible_projects

from . import baselines, selectors, services
from .api_baselines import DriftOut, drift_out
from .models import Cluster, Flavor, Loan, LoanState, Node, QuotaNode, QuotaWindow

QTY = {"max_digits": 12, "decimal_places": 3, "min_value": Decimal(0), "max_value": Decimal(1_000_000)}
RATIO = {"max_digits": 5, "decimal_places": 2, "min_value": Decimal(1), "max_value": Decimal(10)}


# --- flavors ----------------------------------------------------------------------------


class FlavorOut(serializers.ModelSerializer):
    # Derived from fraction_numerator / fraction_denominator (8 places), kept for clients that
    # read it; compute with the numerator and denominator.
    card_fraction = serializers.DecimalField(max_digits=10, decimal_places=8, read_only=True)
    # Beside the declared relative_throughput: what job history says (jobs.throughput); null when
    # no template ran on this flavor and the reference flavor.
    measured_throughput = serializers.SerializerMethodField()

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "ratio": {"type": "string", "example": "0.812"},
                "templates": {"type": "integer"},
                "runs": {"type": "integer"},
            },
        }
    )
    def get_measured_throughput(self, flavor) -> dict | None:
        # One aggregate over the job history for every flavor of the response, not one a flavor
        # (the list's items share the root's context).
        measured = self.context.get("measured_throughput")
        if measured is None:
            measured = self.context["measured_throughput"] = selectors.measured_throughput(None)
        found = measured.get(flavor.pk)
        if found is None:
            return None
        return {"ratio": str(found.ratio), "templates": found.templates, "runs": found.runs}

    class Meta:
        model = Flavor
        fields = [
            "id",
            "name",
            "vendor",
            "model",
            "memory_mib",
            "card_fraction",
            "fraction_numerator",
            "fraction_denominator",
            "mig_profile",
            "shareable",
            "premium",
            "k8s_resource_name",
            "slurm_gres",
            "pool_overcommit_ratio",
            "active",
            "sharing_mode",
            "relative_throughput",
            "relative_throughput_source",
            "relative_throughput_date",
            "operator_coverage",
            "board_watts",
            "measured_throughput",
        ]


@extend_schema_field({"type": "string", "example": "1/7"})
class CardFractionField(serializers.Field):
    """ "1/7", "3/7", "1", "0.5" (or a number) → the exact fraction; anything else is a 400."""

    def to_internal_value(self, data):
        try:
            return services.card_fraction_from_input(data)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict["card_fraction"]) from None

    def to_representation(self, value):
        return str(value)


class FlavorIn(serializers.ModelSerializer):
    pool_overcommit_ratio = serializers.DecimalField(**RATIO, required=False)
    card_fraction = CardFractionField(
        required=False, help_text="Share of one card: a fraction such as 1/7 (MIG 1g.10gb) or 1; "
        "or send fraction_numerator and fraction_denominator."
    )

    class Meta:
        model = Flavor
        fields = [f for f in FlavorOut.Meta.fields if f not in ("id", "measured_throughput")]

    def validate(self, attrs):
        if "card_fraction" in attrs and ({"fraction_numerator", "fraction_denominator"} & set(attrs)):
            raise ValidationError(
                {"card_fraction": [_("Send card_fraction or numerator and denominator, not both.")]}
            )
        return attrs


class FlavorListApi(ListCreateApi):
    output, input = FlavorOut, FlavorIn
    filterset_fields = ["vendor", "shareable", "active"]

    def visible(self):
        return Flavor.objects.order_by("name")

    def perform(self, data):
        return services.flavor_create(actor=self.request.user, **data)


class FlavorDetailApi(DetailApi):
    output, input = FlavorOut, FlavorIn

    def visible(self):
        return Flavor.objects.all()

    def update_object(self, obj, data):
        return services.flavor_update(actor=self.request.user, flavor=obj, **data)


# --- clusters and nodes -----------------------------------------------------------------


class ClusterOut(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "kind", "description", "active"]


class ClusterIn(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["name", "kind", "description", "config", "active"]


class ClusterListApi(ListCreateApi):
    output, input = ClusterOut, ClusterIn
    filterset_fields = ["kind", "active"]

    def visible(self):
        return Cluster.objects.order_by("name")

    def perform(self, data):
        return services.cluster_create(actor=self.request.user, **data)


class ClusterDetailApi(DetailApi):
    output, input = ClusterOut, ClusterIn

    def visible(self):
        return Cluster.objects.all()

    def update_object(self, obj, data):
        return services.cluster_update(actor=self.request.user, cluster=obj, **data)


class NodeOut(serializers.ModelSerializer):
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    topology_path = serializers.CharField(read_only=True)
    drift = serializers.SerializerMethodField(help_text="Driver and CUDA against the software baseline.")

    @extend_schema_field(DriftOut)
    def get_drift(self, node) -> dict:
        known = self.context.get("baselines")  # read once for every node of the response
        if known is None:
            known = self.context["baselines"] = baselines.baselines()
        return drift_out(baselines.node_drift(node, known))

    class Meta:
        model = Node
        fields = [
            "id",
            "cluster",
            "name",
            "flavor",
            "gpu_count",
            "state",
            "zone",
            "spine",
            "leaf",
            "topology_path",
            "last_seen_at",
            "driver_version",
            "cuda_version",
            "drift",
        ]


class NodeIn(serializers.ModelSerializer):
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())

    class Meta:
        model = Node
        fields = ["cluster", "name", "flavor", "gpu_count", "state", "zone", "spine", "leaf"]


class NodeListApi(ListCreateApi):
    output, input = NodeOut, NodeIn
    filterset_fields = ["cluster", "flavor", "state", "zone", "spine", "leaf"]

    def visible(self):
        return Node.objects.select_related("flavor").order_by("cluster_id", "zone", "spine", "leaf", "name")

    def perform(self, data):
        return services.node_create(actor=self.request.user, **data)


class NodeDetailApi(DetailApi):
    output, input = NodeOut, NodeIn

    def visible(self):
        return Node.objects.select_related("flavor")

    def update_object(self, obj, data):
        return services.node_update(actor=self.request.user, node=obj, **data)


# --- quota nodes --------------------------------------------------------------------------


class QuotaNodeOut(serializers.ModelSerializer):
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = QuotaNode
        fields = [
            "id",
            "flavor",
            "department",
            "project",
            "quota",
            "borrow_limit",
            "lend_limit",
            "overcommit_ratio",
            "updated_at",
        ]


class QuotaNodeIn(serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())
    department = VisibleRelatedField(visible_departments, allow_null=True, required=False)
    project = VisibleRelatedField(visible_projects, allow_null=True, required=False)
    quota = serializers.DecimalField(**QTY)
    borrow_limit = serializers.DecimalField(**QTY, allow_null=True, required=False)
    lend_limit = serializers.DecimalField(**QTY, allow_null=True, required=False)
    overcommit_ratio = serializers.DecimalField(**RATIO, required=False)

    def validate(self, attrs):
        if self.partial:
            return attrs
        if (attrs.get("department") is None) == (attrs.get("project") is None):
            raise ValidationError({"department": ["Give exactly one of department or project."]})
        return attrs


class QuotaNodeUpdateIn(serializers.Serializer):
    quota = serializers.DecimalField(**QTY, required=False)
    borrow_limit = serializers.DecimalField(**QTY, allow_null=True, required=False)
    lend_limit = serializers.DecimalField(**QTY, allow_null=True, required=False)
    overcommit_ratio = serializers.DecimalField(**RATIO, required=False)


class QuotaNodeListApi(ListCreateApi):
    output, input = QuotaNodeOut, QuotaNodeIn
    filterset_fields = ["flavor", "department", "project"]

    def visible(self):
        return selectors.visible_quota_nodes(self.request.user).order_by("flavor__name", "id")

    def perform(self, data):
        return services.quota_node_set(actor=self.request.user, **{"overcommit_ratio": Decimal(1), **data})


class QuotaNodeDetailApi(DetailApi):
    output, input, deletable = QuotaNodeOut, QuotaNodeUpdateIn, True

    def visible(self):
        return selectors.visible_quota_nodes(self.request.user)

    def update_object(self, obj, data):
        return services.quota_node_update(actor=self.request.user, node=obj, **data)

    def delete_object(self, obj):
        services.quota_node_delete(actor=self.request.user, node=obj)


# --- loans and windows ----------------------------------------------------------------------


class LoanOut(serializers.ModelSerializer):
    flavor = serializers.CharField(source="lender.flavor.name", read_only=True)
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Loan
        fields = [
            "id",
            "flavor",
            "lender",
            "borrower",
            "amount",
            "starts_at",
            "ends_at",
            "state",
            "reason",
            "requested_by",
            "created_at",
        ]


class LoanIn(serializers.Serializer):
    lender = VisibleRelatedField(selectors.visible_quota_nodes)
    borrower = VisibleRelatedField(selectors.visible_quota_nodes)
    amount = serializers.DecimalField(**QTY)
    starts_at = serializers.DateTimeField(validators=[validate_in_range])
    ends_at = serializers.DateTimeField(validators=[validate_in_range])
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True)
    state = serializers.ChoiceField(choices=[LoanState.PENDING, LoanState.ACTIVE], required=False)


class LoanListApi(ListCreateApi):
    output, input = LoanOut, LoanIn
    filterset_fields = ["state", "lender", "borrower"]

    def visible(self):
        return selectors.visible_loans(self.request.user).order_by("-starts_at", "id")

    def perform(self, data):
        return services.loan_create(actor=self.request.user, **data)


class LoanDetailApi(DetailApi):
    output = LoanOut

    def visible(self):
        return selectors.visible_loans(self.request.user)


class LoanCancelApi(APIView):
    @extend_schema(request=None, responses=LoanOut)
    def post(self, request, pk):
        loan = get_visible(selectors.visible_loans(request.user), pk=pk)
        return Response(LoanOut(services.loan_cancel(actor=request.user, loan=loan)).data)


# A window's times are local wall-clock times in the site time zone ("20:00:00", no offset): OpenAPI's
# "time" format is RFC 3339's, which requires an offset, so the schema gives the shape instead.
@extend_schema_field(
    {
        "type": "string",
        "pattern": r"^([01]\d|2[0-3]):[0-5]\d(:[0-5]\d(\.\d{1,6})?)?$",
        "description": "Local wall-clock time in the site time zone, HH:MM[:SS], no offset.",
        "example": "20:00:00",
    }
)
class WallClockTimeField(serializers.TimeField):
    pass


class WindowOut(serializers.ModelSerializer):
    start_time = WallClockTimeField()
    end_time = WallClockTimeField()

    class Meta:
        model = QuotaWindow
        fields = [
            "id",
            "quota_node",
            "name",
            "weekdays",
            "start_time",
            "end_time",
            "quota",
            "lend_limit",
            "active",
        ]


class WindowIn(serializers.Serializer):
    quota_node = VisibleRelatedField(selectors.visible_quota_nodes)
    name = serializers.CharField(max_length=80)
    weekdays = serializers.RegexField(
        r"^(?!.*(.).*\1)[0-6]{1,7}$",
        required=False,
        error_messages={"invalid": "Digits 0 (Monday) to 6, each once."},
    )
    start_time = WallClockTimeField()
    end_time = WallClockTimeField()
    quota = serializers.DecimalField(**QTY, allow_null=True, required=False)
    lend_limit = serializers.DecimalField(**QTY, allow_null=True, required=False)
    active = serializers.BooleanField(required=False)

    def validate(self, attrs):
        start, end = attrs.get("start_time"), attrs.get("end_time")
        if start is not None and start == end:
            raise ValidationError({"end_time": ["A window must not start and end at the same time."]})
        return attrs


class WindowListApi(ListCreateApi):
    output, input = WindowOut, WindowIn
    filterset_fields = ["quota_node", "active"]

    def visible(self):
        return selectors.visible_windows(self.request.user).order_by("id")

    def perform(self, data):
        return services.window_create(actor=self.request.user, **data)


class WindowUpdateIn(WindowIn):
    quota_node = None


class WindowDetailApi(DetailApi):
    output, input, deletable = WindowOut, WindowUpdateIn, True

    def visible(self):
        return selectors.visible_windows(self.request.user).select_related("quota_node__flavor")

    def update_object(self, obj, data):
        return services.window_update(actor=self.request.user, window=obj, **data)

    def delete_object(self, obj):
        services.window_delete(actor=self.request.user, window=obj)


# --- the tree -------------------------------------------------------------------------------


class TreeRowOut(serializers.Serializer):
    quota_node = serializers.IntegerField(source="node.pk")
    kind = serializers.CharField()
    owner_id = serializers.IntegerField()
    owner = serializers.CharField(source="node.owner")
    parent = serializers.SerializerMethodField()
    depth = serializers.IntegerField()
    quota = serializers.DecimalField(max_digits=12, decimal_places=3, source="node.quota")
    # Null limits: borrow without limit, lend all idle quota (docs/quotas.md).
    borrow_limit = serializers.DecimalField(
        max_digits=12, decimal_places=3, source="node.borrow_limit", allow_null=True
    )
    lend_limit = serializers.DecimalField(
        max_digits=12, decimal_places=3, source="node.lend_limit", allow_null=True
    )
    overcommit_ratio = serializers.DecimalField(
        max_digits=5, decimal_places=2, source="node.overcommit_ratio"
    )
    effective_quota = serializers.DecimalField(max_digits=12, decimal_places=3, source="effective.quota")
    effective_lend_limit = serializers.DecimalField(
        max_digits=12, decimal_places=3, source="effective.lend_limit", allow_null=True
    )

    def get_parent(self, row) -> str | None:
        return f"{row.parent_key[0]}:{row.parent_key[1]}" if row.parent_key else None


# Declares the response of QuotaTreeApi, which builds the dict itself. ``capacity`` and
# ``pool_overcommit_ratio`` are bare Decimals there, which DRF's JSON encoder writes as numbers
# (COERCE_DECIMAL_TO_STRING only applies to serializer fields), hence FloatField.
class QuotaTreeOut(serializers.Serializer):
    flavor = serializers.CharField()
    capacity = serializers.FloatField()
    pool_overcommit_ratio = serializers.FloatField()
    nodes = TreeRowOut(many=True)


class QuotaTreeApi(APIView):
    """The visible quota tree of one flavor with effective quotas (loans and windows applied)."""

    @extend_schema(parameters=[OpenApiParameter("flavor", str, required=True)], responses=QuotaTreeOut)
    def get(self, request):
        name = request.query_params.get("flavor", "")
        flavor = Flavor.objects.filter(name=name).first()
        if flavor is None:
            raise ValidationError({"flavor": [f"Unknown flavor {name[:40]!r}."]})
        rows = selectors.quota_tree(request.user, flavor.pk, timezone.now())
        return Response(
            {
                "flavor": flavor.name,
                "capacity": selectors.healthy_capacity(flavor.pk),
                "pool_overcommit_ratio": flavor.pool_overcommit_ratio,
                "nodes": TreeRowOut(rows, many=True).data,
            }
        )
