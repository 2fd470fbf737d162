import hmac

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_GET

from .metrics import portal_metrics


@require_GET
def metrics(request):
    token = settings.GPUPOOL["METRICS_TOKEN"]
    if token and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {token}"):
        return HttpResponseForbidden("metrics token required\n")
    return HttpResponse(portal_metrics(), content_type="text/plain; version=0.0.4; charset=utf-8")
