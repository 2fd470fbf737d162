"""REST API of autoscaling from load (docs/scheduling.md "Autoscaling"): an inference job's
settings and the autoscaler's last decision."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import selectors
from jobs.models import AUTOSCALE_QUERY_MAX_LENGTH
from jobs.scheduling.autoscale import autoscale_view, job_autoscale_set
from portal.selectors import get_visible


class AutoscaleStatusOut(serializers.Serializer):
    value = serializers.CharField(
        allow_null=True, help_text="The query's value per replica (None: no value)."
    )
    target = serializers.CharField(help_text="The target per replica it was compared with.")
    replicas = serializers.IntegerField(help_text="Replicas running when it decided.")
    desired = serializers.IntegerField(
        help_text="Replicas it asked for (the job's target after the decision)."
    )
    reason = serializers.CharField(help_text="Why, in the request's language.")
    decided_at = serializers.DateTimeField()


class AutoscaleOut(serializers.Serializer):
    job = serializers.IntegerField()
    enabled = serializers.BooleanField()
    query = serializers.CharField(
        help_text="PromQL; {job} is the job's backend name (gp-<id>), {job_id} its id."
    )
    filled_query = serializers.CharField(help_text="The query as it is sent to Prometheus.")
    target = serializers.DecimalField(max_digits=14, decimal_places=3, allow_null=True)
    cooldown_seconds = serializers.IntegerField()
    last_scaled_at = serializers.DateTimeField(allow_null=True, help_text="The autoscaler's last change.")
    replicas = serializers.IntegerField(help_text="Replicas the job holds now.")
    min_workers = serializers.IntegerField(allow_null=True)
    workers = serializers.IntegerField(help_text="Its maximum replicas.")
    target_workers = serializers.IntegerField(
        allow_null=True, help_text="Replicas it is scaled to (None: workers)."
    )
    status = AutoscaleStatusOut(allow_null=True, help_text="The last decision (None: none yet).")


class AutoscaleIn(serializers.Serializer):
    query = serializers.CharField(
        allow_blank=True, trim_whitespace=True, max_length=AUTOSCALE_QUERY_MAX_LENGTH,
        help_text="PromQL answering one value per replica; every selector reads the job's own series "
        '(a matcher such as hpc_job="{job}", job="{job}", pod=~"{job}-.*" or job_id="{job_id}"); '
        "empty turns autoscaling off.",
    )
    target = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=40,
        help_text="The value one replica should carry (a decimal > 0, at most 3 decimals).",
    )
    cooldown_seconds = serializers.IntegerField(
        required=False, allow_null=True,
        help_text="No change within this long after the last (30–86400, default 300).",
    )


class AutoscaleSubmitIn(AutoscaleIn):
    """A submission's ``autoscale`` (``POST /api/v1/jobs/``, templates): the settings of ``PUT
    …/autoscale/`` given with the job; the same service checks them (``jobs.scheduling.autoscale``)."""

    query = serializers.CharField(
        trim_whitespace=True, max_length=AUTOSCALE_QUERY_MAX_LENGTH,
        help_text="PromQL answering one value per replica; every selector reads the job's own series "
        '(a matcher such as hpc_job="{job}", job="{job}", pod=~"{job}-.*" or job_id="{job_id}").',
    )
    target = serializers.CharField(
        max_length=40, help_text="The value one replica should carry (a decimal > 0, at most 3 decimals).",
    )


def nested_autoscale_errors(errors: dict) -> dict:
    """Service errors (``autoscale_query``, …) as a submission body names the fields:
    ``{"autoscale": {"query": […]}}``."""
    out, nested = {}, {}
    for field, messages in errors.items():
        if field.startswith("autoscale_"):
            nested[field.removeprefix("autoscale_")] = messages
        else:
            out[field] = messages
    if nested:
        out.setdefault("autoscale", {})
        if isinstance(out["autoscale"], list):  # the object itself was refused: keep both
            nested["non_field_errors"] = out["autoscale"]
        out["autoscale"] = nested
    return out


class JobAutoscaleApi(APIView):
    """An inference job's autoscaling: ``GET`` the settings and the last decision, ``PUT`` new
    settings (the job's owner or an admin of its project; 400 on any other kind of job)."""

    @extend_schema(responses=AutoscaleOut)
    def get(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        return Response(AutoscaleOut(autoscale_view(job)).data)

    @extend_schema(request=AutoscaleIn, responses=AutoscaleOut)
    def put(self, request, pk):
        job = get_visible(selectors.visible_jobs(request.user), pk=pk)
        data = AutoscaleIn(data=request.data)
        data.is_valid(raise_exception=True)
        job = job_autoscale_set(
            actor=request.user, job=job, query=data.validated_data["query"],
            target=data.validated_data.get("target"),
            cooldown_seconds=data.validated_data.get("cooldown_seconds"),
        )
        return Response(AutoscaleOut(autoscale_view(job)).data)
