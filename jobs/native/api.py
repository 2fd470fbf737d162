"""REST API of external sources (DESIGN §11): the Slurm accounts and Kubernetes namespaces that
external jobs come from, and mapping an unmapped one to a project (platform admins)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.native import services
from jobs.native.external_sources import Observed, observed, visible_external_sources
from portal import permissions as perm
from portal.api import VisibleRelatedField
from portal.api_base import DetailApi, ListCreateApi
from portal.selectors import get_visible, scope_for, visible_projects


class ExternalSourceOut(serializers.Serializer):
    id = serializers.IntegerField()
    cluster = serializers.CharField(source="cluster.name")
    kind = serializers.CharField(help_text="slurm_account or k8s_namespace.")
    name = serializers.CharField(help_text="The Slurm account or Kubernetes namespace.")
    project = serializers.IntegerField(source="project_id", allow_null=True, help_text="Null: unmapped.")
    project_code = serializers.SerializerMethodField()
    first_seen_at = serializers.DateTimeField()
    last_seen_at = serializers.DateTimeField(allow_null=True)
    mapped_at = serializers.DateTimeField(allow_null=True)
    mapped_by = serializers.SerializerMethodField()
    observed_jobs = serializers.SerializerMethodField(
        help_text="Unmapped: jobs seen from it so far (recorded as jobs when it is mapped)."
    )
    observed_card_hours = serializers.SerializerMethodField(
        help_text="Unmapped: their card-hours so far (whole cards); a running job counts up to now."
    )
    unknown_resource_jobs = serializers.SerializerMethodField(
        help_text="Unmapped: observed jobs whose resource names no flavor (not in the card-hours)."
    )

    def _observed(self, source) -> Observed:
        return self.context.get("observed", {}).get(source.pk, Observed())

    def get_project_code(self, source) -> str | None:
        return source.project.code if source.project_id else None

    def get_mapped_by(self, source) -> str | None:
        return source.mapped_by.username if source.mapped_by_id else None

    def get_observed_jobs(self, source) -> int:
        return self._observed(source).jobs

    def get_observed_card_hours(self, source) -> str:
        return f"{self._observed(source).card_hours:.2f}"

    def get_unknown_resource_jobs(self, source) -> int:
        return self._observed(source).unknown_resource


def _mapped_filter(value: str | None) -> bool | None:
    """``?mapped=true|false``; absent: both; anything else is bad input (400)."""
    if value in (None, ""):
        return None
    flag = str(value).lower()
    if flag in ("true", "1", "yes"):
        return True
    if flag in ("false", "0", "no"):
        return False
    raise ValidationError({"mapped": ["Must be true or false."]})


class ExternalSourceListApi(ListCreateApi):
    """Where external jobs come from: Slurm accounts and Kubernetes namespaces, with the project
    each maps to. Platform admins and auditors see every source (unmapped ones included, with what
    was seen running from them); others see the sources mapped to projects they can see."""

    output = ExternalSourceOut
    filterset_fields = ["kind", "cluster"]

    def visible(self):
        sources = visible_external_sources(self.request.user).order_by("cluster__name", "kind", "name")
        mapped = _mapped_filter(self.request.query_params.get("mapped"))
        if mapped is not None:
            sources = sources.filter(project__isnull=not mapped)
        return sources

    @extend_schema(
        parameters=[OpenApiParameter("mapped", OpenApiTypes.BOOL, description="Only mapped (true) or "
                                     "unmapped (false) sources.")],
        responses=ExternalSourceOut(many=True),
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.filter_queryset(self.get_queryset()))
        out = ExternalSourceOut(page, many=True, context={"observed": observed(page)})
        return self.get_paginated_response(out.data)


class ExternalSourceDetailApi(DetailApi):
    output = ExternalSourceOut

    def visible(self):
        return visible_external_sources(self.request.user)

    def retrieve(self, request, *args, **kwargs):
        source = self.get_object()
        return Response(ExternalSourceOut(source, context={"observed": observed([source])}).data)


class ExternalSourceMapIn(serializers.Serializer):
    project = VisibleRelatedField(visible_projects, help_text="The project's id.")


class ExternalSourceMapOut(serializers.Serializer):
    source = ExternalSourceOut()
    jobs_recorded = serializers.IntegerField(help_text="External jobs created from its observations.")
    unknown_resource = serializers.IntegerField(
        help_text="Observed jobs left out: their resource names no flavor."
    )


class ExternalSourceMapApi(APIView):
    """Map an unmapped source to a project (platform admins): every job seen from it becomes an
    external job of the project, and the meter's next run meters their history. 400 when it is
    mapped already or the project is unknown or inactive."""

    @extend_schema(request=ExternalSourceMapIn, responses=ExternalSourceMapOut)
    def post(self, request, pk):
        source = get_visible(visible_external_sources(request.user), pk=pk)
        # Who may act comes before what they sent (as the project move: 403, not a 400).
        perm.require(scope_for(request.user).platform_admin)
        body = ExternalSourceMapIn(data=request.data, context={"request": request})
        body.is_valid(raise_exception=True)
        outcome = services.external_source_map(
            actor=request.user, source=source, project=body.validated_data["project"]
        )
        source = visible_external_sources(request.user).get(pk=source.pk)
        return Response(ExternalSourceMapOut({
            "source": source,
            "jobs_recorded": outcome.counts["created"],
            "unknown_resource": outcome.counts["unknown_resource"],
        }).data)
