"""``GET /api/v1/history/export/`` — history as a trace (issue 25 item 1; docs/replay.md).

Platform admins only (everyone else: 404, as the what-if page): the trace covers every tenant.
``weeks=N`` or ``since`` [+ ``until``] (ISO date-times with offset), bounded by
GPUPOOL_HISTORY_MAX_DAYS; ``format=zip`` (default: trace.csv, cluster.json, recorded.csv,
manifest.json) or ``json`` (the same four as one object)."""

from __future__ import annotations

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpResponse
from django.utils.translation import gettext as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from jobs.whatif import history
from portal.selectors import scope_for

FORMATS = ("zip", "json")


def _int(params, name: str) -> int | None:
    value = params.get(name)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError:
        raise ValidationError({name: [_("Give a whole number.")]}) from None


class HistoryExportApi(APIView):
    """The recorded jobs of a range as a replayable trace with its cluster SPEC (platform admins)."""

    def perform_content_negotiation(self, request, force=False):
        # ``format`` names the file type here, not a DRF renderer; errors are JSON.
        renderer = JSONRenderer()
        return renderer, renderer.media_type

    @extend_schema(
        parameters=[
            OpenApiParameter("weeks", int, description="the last N weeks up to now"),
            OpenApiParameter(
                "since", OpenApiTypes.DATETIME, description="range start, ISO date-time with offset"
            ),
            OpenApiParameter(
                "until", OpenApiTypes.DATETIME, description="range end (exclusive), default now"
            ),
            OpenApiParameter("format", str, enum=list(FORMATS), description="zip (default) or json"),
        ],
        responses={
            (200, "application/zip"): OpenApiResponse(OpenApiTypes.BINARY),
            (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT),
        },
    )
    def get(self, request):
        if not scope_for(request.user).platform_admin:
            raise Http404
        fmt = (request.query_params.get("format") or "zip").lower()
        if fmt not in FORMATS:
            raise ValidationError(
                {"format": [_("Unknown format %(f)s: use zip or json.") % {"f": repr(fmt[:10])}]}
            )
        params = request.query_params
        try:
            start, end = history.history_range(
                weeks=_int(params, "weeks"), since=params.get("since"), until=params.get("until")
            )
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from None
        export = history.history_export(start=start, end=end)
        if fmt == "json":
            return Response(
                {
                    "manifest": export.manifest,
                    "cluster": export.cluster,
                    "trace": export.trace,
                    "recorded": export.recorded,
                }
            )
        name = f"gpupool-history-{start:%Y%m%d}-{end:%Y%m%d}.zip"
        response = HttpResponse(history.zip_bytes(export), content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="{name}"'
        return response
