"""GET /metrics for Prometheus. Its labels name departments and projects, so it answers only a
scraper that shows the token or comes from an allowed network (``GPUPOOL_METRICS_TOKEN``,
``GPUPOOL_METRICS_ALLOW_NETWORKS``); production refuses to start with neither set."""

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_GET

from jobs.clusters.metrics import portal_metrics
from portal.security import client_address


def _has_token(request, token: str) -> bool:
    # Bytes, not str: compare_digest refuses non-ASCII str, and a header may hold any latin-1 byte.
    sent = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(sent, f"Bearer {token}".encode())


def _from_allowed_network(request, networks) -> bool:
    try:
        address = ipaddress.ip_address(client_address(request))
    except ValueError:
        return False
    return any(address in network for network in networks)


def may_scrape(request) -> bool:
    token = settings.GPUPOOL["METRICS_TOKEN"]
    networks = settings.GPUPOOL.get("METRICS_ALLOW_NETWORKS", ())
    if not token and not networks:
        return True  # dev and tests only: production settings refuse this
    if token and _has_token(request, token):
        return True
    return bool(networks) and _from_allowed_network(request, networks)


@require_GET
def metrics(request):
    if not may_scrape(request):
        return HttpResponseForbidden("metrics token or allowed network required\n")
    return HttpResponse(portal_metrics(), content_type="text/plain; version=0.0.4; charset=utf-8")
