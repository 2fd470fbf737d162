"""``/healthz``: the portal is healthy when it can reach its database and its broker."""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.views.decorators.cache import never_cache


def _check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return "ok"


def _check_broker() -> str:
    client = redis.Redis.from_url(settings.REDIS_CLIENT_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()
    return "ok"


@never_cache
def healthz(request):
    checks = {}
    for name, check in (("database", _check_database), ("broker", _check_broker)):
        try:
            checks[name] = check()
        except Exception as exc:  # any failure means unhealthy; the reason is reported, not raised
            checks[name] = f"error: {type(exc).__name__}"
    healthy = all(value == "ok" for value in checks.values())
    return JsonResponse(
        {"status": "ok" if healthy else "error", "checks": checks}, status=200 if healthy else 503
    )
