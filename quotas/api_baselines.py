"""REST API of software baselines (DESIGN §15) and of the drift report. Baselines are pool
resources like flavors: every signed-in user reads them, platform admins write them (anyone else
403). The drift report is the platform's: platform admins and auditors (anyone else 403)."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api_base import DetailApi, ListCreateApi
from portal.selectors import scope_for

from . import baselines, drift
from .models import Cluster, Flavor, SoftwareBaseline

DRIFT_STATES = [drift.OK, drift.NONE, *drift.OFF]


class BaselineOut(serializers.ModelSerializer):
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True, help_text="null: every cluster."
    )

    class Meta:
        model = SoftwareBaseline
        fields = ["id", "flavor", "cluster", "driver_version", "cuda_version"]


class VersionField(serializers.CharField):
    """A JSON string only: a number would lose what it meant (12.10 arrives as 12.1), so it is
    refused, not converted."""

    default_error_messages = {"not_a_string": gettext_lazy('A version in quotes, e.g. "12.4".')}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("not_a_string")
        return super().to_internal_value(data)


class BaselineIn(serializers.Serializer):
    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())
    cluster = serializers.SlugRelatedField(
        slug_field="name", queryset=Cluster.objects.all(), allow_null=True, required=False,
        help_text="A cluster's name: its baseline overrides the flavor's for every cluster (null).",
    )
    driver_version = VersionField(
        max_length=40, allow_blank=True, required=False, help_text='e.g. "535.104.05"; empty: not checked.'
    )
    cuda_version = VersionField(
        max_length=20, allow_blank=True, required=False, help_text='e.g. "12.4"; empty: not checked.'
    )


class BaselineListApi(ListCreateApi):
    """Expected driver and CUDA versions per flavor, for every cluster or one."""

    output, input = BaselineOut, BaselineIn

    def visible(self):
        return SoftwareBaseline.objects.select_related("flavor", "cluster").order_by(
            "flavor__name", "cluster__name", "id")

    def perform(self, data):
        return baselines.baseline_create(actor=self.request.user, **data)


class BaselineDetailApi(DetailApi):
    output, input, deletable = BaselineOut, BaselineIn, True

    def visible(self):
        return SoftwareBaseline.objects.select_related("flavor", "cluster")

    def update_object(self, obj, data):
        return baselines.baseline_update(actor=self.request.user, baseline=obj, **data)

    def delete_object(self, obj):
        baselines.baseline_delete(actor=self.request.user, baseline=obj)


class DriftOut(serializers.Serializer):
    state = serializers.ChoiceField(
        choices=DRIFT_STATES,
        help_text="ok; none (no baseline); older (driver or CUDA older than the baseline); unreported "
        "(the node reports no version the baseline names); driver / cuda (that version differs).",
    )
    expected_driver = serializers.CharField()
    expected_cuda = serializers.CharField()
    driver = serializers.CharField(help_text="What the node reports (empty: nothing).")
    cuda = serializers.CharField()


def drift_out(found: drift.Drift) -> dict:
    return {
        "state": found.state,
        "expected_driver": found.expected_driver,
        "expected_cuda": found.expected_cuda,
        "driver": found.driver,
        "cuda": found.cuda,
    }


class DriftNodeOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    drift = DriftOut()


class DriftGroupOut(serializers.Serializer):
    flavor = serializers.CharField()
    cluster = serializers.CharField()
    expected_driver = serializers.CharField()
    expected_cuda = serializers.CharField()
    nodes = serializers.IntegerField(help_text="Nodes of the flavor on the cluster.")
    off = serializers.IntegerField(help_text="Of them, off the baseline.")
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Nodes off it per state.")
    off_nodes = DriftNodeOut(many=True)


class DriftReportApi(APIView):
    """Every node off its baseline, by flavor and cluster (platform admins and auditors)."""

    @extend_schema(responses=DriftGroupOut(many=True))
    def get(self, request):
        if not scope_for(request.user).sees_everything:
            raise PermissionDenied(_("Only platform admins and auditors see the drift report."))
        return Response([drift_group_out(g) for g in baselines.drift_report()])


def drift_group_out(g: baselines.DriftGroup) -> dict:
    return {
        "flavor": g.flavor,
        "cluster": g.cluster,
        "expected_driver": g.expected_driver,
        "expected_cuda": g.expected_cuda,
        "nodes": g.nodes_total,
        "off": len(g.off),
        "counts": g.counts,
        "off_nodes": [{"id": n.pk, "name": n.name, "drift": drift_out(d)} for n, d in g.off],
    }
