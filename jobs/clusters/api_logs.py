"""REST API of a job's working environment (DESIGN §13): its log tail, the whole log as a
stream, and how to reach a dev job's exposed port. The job is looked up through
``selectors.visible_jobs``: another tenant's job is a 404 like its detail."""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs import selectors
from jobs.clusters import logs
from jobs.clusters.views_logs import log_file_response
from portal.selectors import get_visible


def _visible_job(request, pk):
    return get_visible(selectors.visible_jobs(request.user).select_related("cluster"), pk=pk)


class LogTailOut(serializers.Serializer):
    text = serializers.CharField(help_text="The end of the log (stdout and stderr), from a whole line.")
    size = serializers.IntegerField(
        allow_null=True, help_text="The whole log in bytes, where the cluster knows it."
    )
    truncated = serializers.BooleanField(help_text="Earlier output exists that text leaves out.")
    missing = serializers.CharField(
        help_text="Why there is no log (not started yet, an external job, the cluster could not be read); "
        "empty when there is one. Then text is empty."
    )


def tail_bytes_param(params) -> int:
    """``tail_bytes`` (1 … 1 MiB, default GPUPOOL["LOG_TAIL_BYTES"]), or 400 naming the bounds."""
    raw = params.get("tail_bytes")
    if raw in (None, ""):
        return settings.GPUPOOL["LOG_TAIL_BYTES"]
    try:
        value = int(raw)
    except (TypeError, ValueError):
        value = 0
    if not 1 <= value <= logs.MAX_TAIL_BYTES:
        raise ValidationError(
            {"tail_bytes": [_("A whole number of bytes from 1 to %(n)d.") % {"n": logs.MAX_TAIL_BYTES}]}
        )
    return value


class JobLogApi(APIView):
    """The end of the job's log, read from its cluster now (the portal stores no logs). No log
    is not an error: ``missing`` says why."""

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "tail_bytes",
                int,
                description="How much of the end to return, in bytes: 1 to 1048576 (default: the "
                "portal's GPUPOOL_LOG_TAIL_BYTES, 16384).",
            )
        ],
        responses={200: LogTailOut, 400: OpenApiTypes.OBJECT},
    )
    def get(self, request, pk):
        job = _visible_job(request, pk)
        tail = logs.job_log_tail(job, max_bytes=tail_bytes_param(request.query_params))
        return Response(LogTailOut(tail).data)


class JobLogDownloadApi(APIView):
    """The whole log as ``text/plain`` (``gp-<id>.log``), streamed from the cluster. 404 with the
    reason in ``detail`` when the job has no log."""

    def perform_content_negotiation(self, request, force=False):
        # The log is the answer itself, not a rendering of data; only errors are JSON.
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    @extend_schema(
        responses={
            (200, "text/plain"): OpenApiResponse(OpenApiTypes.BINARY, description="The whole log."),
            (404, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT, description="No such job, or no log."
            ),
        }
    )
    def get(self, request, pk):
        job = _visible_job(request, pk)
        try:
            chunks = logs.job_log_stream(job)
        except logs.LogUnavailable as exc:
            raise NotFound(str(exc)) from exc
        return log_file_response(chunks, job.pk)


class AccessOut(serializers.Serializer):
    url = serializers.CharField(help_text="An address the browser opens (an ingress); may be empty.")
    command = serializers.CharField(
        help_text="A command to run on your computer (an SSH tunnel through the login node); may be empty."
    )
    note = serializers.CharField(help_text="What to know about it.")


class JobAccessApi(APIView):
    """How to reach a running dev job's exposed port (Jupyter, VS Code server, SSH): a URL or a
    tunnel command. 404 when the job exposes nothing now (not a dev job, no port, not running)."""

    @extend_schema(responses={200: AccessOut, 404: OpenApiTypes.OBJECT})
    def get(self, request, pk):
        job = _visible_job(request, pk)
        access = logs.job_access(job, request.user)
        if access is None:
            raise NotFound(_("This job exposes nothing now: only a running dev job with a port does."))
        return Response(AccessOut(access).data)
