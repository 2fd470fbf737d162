"""The suite runs on the real services: PostgreSQL, Redis, and a real Celery worker."""

from pathlib import Path

import pytest
from django.db import connection
from django.test import override_settings

from portal.tasks import ping
from tests.celery_procs import private_queue, start_worker

ROOT = Path(__file__).resolve().parent.parent


def test_database_is_postgresql(db):
    assert connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        assert int(cursor.fetchone()[0].split(".")[0]) >= 14


@pytest.mark.celery_worker
def test_a_task_round_trips_through_the_broker_and_a_real_worker():
    queue = private_queue()
    worker = start_worker(queue, test_db=False)
    try:
        result = ping.apply_async(args=["hello"], queue=queue)
        assert result.get(timeout=60) == "pong:hello"
    finally:
        worker.terminate()
        output = worker.communicate(timeout=30)[0].decode(errors="replace")
    assert "Traceback" not in output, output


def test_healthz_checks_database_and_broker(client, db):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "broker": "ok"}}


@pytest.mark.django_db
def test_healthz_fails_when_the_broker_is_unreachable(client):
    with override_settings(REDIS_CLIENT_URL="redis://127.0.0.1:1/0"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"].startswith("error")
    assert response.json()["checks"]["database"] == "ok"


def test_the_portals_sends_do_not_wait_on_the_result_backend():
    """``send`` must not subscribe to a result: with Redis down that subscription retries for
    ~19 s, and every submission during an outage hung that long (the Redis restart fault test)."""
    from portal.celery import app
    from portal.enqueue import send

    subscribed = app.backend.result_consumer.subscribed_to
    sent = send("portal.ping", "nobody reads this", expires=5)  # a worker drops it once expired
    assert sent.ignored and app.backend.get_key_for_task(sent.id) not in subscribed
    # The check can fail: a task sent for its result subscribes.
    awaited = ping.apply_async(args=["x"], queue=private_queue(), expires=5)
    assert app.backend.get_key_for_task(awaited.id) in subscribed


# --- the suite's own rules -------------------------------------------------------------------------

_CLOCKS = {
    ("timezone", "now"), ("datetime", "now"), ("datetime", "today"), ("date", "today"), ("time", "time"),
}


def _calls(node) -> set[tuple[str, str]]:
    """(object, attribute) of every ``x.y(...)`` call under ``node``: ``pytest.skip``, ``timezone.now``."""
    import ast

    return {
        (call.func.value.id, call.func.attr)
        for call in ast.walk(node)
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
    }


def test_item14_no_test_skips_on_the_wall_clock():
    """Issue 32 item 14: tests that read the clock and skipped in the first minutes or hours of a
    month did not run on those days. A test whose figures depend on the date pins the clock
    (tests/clock.py) instead; no function of the suite both reads the clock and skips."""
    import ast

    offenders = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                calls = _calls(node)
                if ("pytest", "skip") in calls and calls & _CLOCKS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert offenders == []
