"""Structured logs (portal/logs.py): a request's lines carry its X-Request-ID (taken from the
caller when well-formed, made otherwise, always echoed), a task's lines its Celery task id and
portal job id — in the test client, in a process configured by LOG_FORMAT=json, and in a real
Celery worker."""

from __future__ import annotations

import contextvars
import io
import json
import logging
import subprocess
import sys
import time
from contextlib import contextmanager

import pytest

from jobs.clusters.tasks import stop_job
from portal.logs import JsonFormatter, job_context, request_id
from tests.celery_procs import ROOT, _env, private_queue
from tests.waiting import TIMEOUT

pytestmark = pytest.mark.deploy


@contextmanager
def json_lines(logger_name: str = ""):
    """Everything logged below ``logger_name`` while the block runs, as parsed JSON lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(logger_name)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    lines: list[dict] = []
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        lines += [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_request_logs_json_with_the_callers_request_id(client, settings, db):
    settings.LOG_REQUESTS = True
    with json_lines("gpupool.access") as lines:
        response = client.get("/healthz", HTTP_X_REQUEST_ID="ingress-7f3a9c")
    assert response.status_code == 200
    assert response["X-Request-ID"] == "ingress-7f3a9c"
    [line] = lines
    assert line["request_id"] == "ingress-7f3a9c" and line["logger"] == "gpupool.access"
    assert (line["method"], line["path"], line["status"]) == ("GET", "/healthz", 200)
    assert line["level"] == "INFO" and line["ts"].endswith("+00:00") and line["duration_ms"] >= 0
    assert request_id.get() is None  # nothing leaks into the next request on this thread


@pytest.mark.parametrize("sent", [None, "short", "has spaces in it", "x" * 200, "evil\r\nSet-Cookie: a=b"])
def test_a_missing_or_malformed_request_id_is_replaced_by_a_new_one(client, settings, db, sent):
    settings.LOG_REQUESTS = True
    headers = {} if sent is None else {"HTTP_X_REQUEST_ID": sent}
    with json_lines("gpupool.access") as lines:
        response = client.get("/healthz", **headers)
    made = response["X-Request-ID"]
    assert made != sent and len(made) == 32 and int(made, 16) >= 0
    assert lines[0]["request_id"] == made


def test_lines_logged_while_serving_carry_the_request_id(client, db):
    with json_lines("django.request") as lines:
        response = client.get("/no-such-page/", HTTP_X_REQUEST_ID="trace-0000-1111")
    assert response.status_code == 404
    assert [(line["level"], line["request_id"]) for line in lines] == [("WARNING", "trace-0000-1111")]
    assert "Not Found" in lines[0]["message"]


def test_a_job_task_logs_its_job_id_and_task_id(db):
    with json_lines("jobs.clusters.tasks") as lines:
        result = stop_job.apply(args=[987654])
    assert result.get() == "not claimable"
    [line] = lines
    assert line["job_id"] == 987654 and line["task_id"] == result.id
    assert "not claimable" in line["message"]


def test_the_formatter_keeps_extras_and_exceptions_and_omits_unknown_ids():
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed %s", ("dispatch",), None)
    try:
        raise RuntimeError("cluster unreachable")
    except RuntimeError:
        record.exc_info = sys.exc_info()
    record.cluster = "c1"

    def format_in_job_5():
        with job_context(5):
            return json.loads(JsonFormatter().format(record))

    # A fresh context: no request id from whatever this thread ran before (a test that called the
    # middleware without the request_finished signal that clears it).
    line = contextvars.Context().run(format_in_job_5)
    assert line["message"] == "failed dispatch" and line["job_id"] == 5 and line["cluster"] == "c1"
    assert "RuntimeError: cluster unreachable" in line["exc_info"]
    assert "request_id" not in line and "task_id" not in line
    assert "job_id" not in json.loads(JsonFormatter().format(logging.makeLogRecord({"msg": "x"})))


def test_log_format_json_switches_the_processes_handler(db):
    env = _env("unused", True, {"LOG_FORMAT": "json"})
    code = "import logging; logging.getLogger('gpupool.check').warning('hello %s', 'json')"
    result = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    [line] = [json.loads(text) for text in result.stderr.splitlines() if text.startswith("{")]
    assert (line["logger"], line["message"], line["level"]) == ("gpupool.check", "hello json", "WARNING")


@pytest.mark.celery_worker
def test_a_real_worker_writes_json_lines_with_the_job_and_task_ids(db):
    queue = private_queue()
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "portal",
        "worker",
        "-Q",
        queue,
        "--pool=solo",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
        "--loglevel=INFO",
    ]
    env = _env(queue, True, {"LOG_FORMAT": "json"})
    worker = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        sent = stop_job.apply_async(args=[424242], queue=queue)
        line = _first_json_line(worker, lambda entry: entry.get("job_id") == 424242)
        assert line["task_id"] == sent.id and line["logger"] == "jobs.clusters.tasks"
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def _first_json_line(proc: subprocess.Popen, wanted) -> dict:
    deadline = time.monotonic() + TIMEOUT  # a hang guard (tests/waiting.py)
    seen = []
    for text in proc.stdout:
        seen.append(text)
        if text.startswith("{") and wanted(json.loads(text)):
            return json.loads(text)
        if time.monotonic() > deadline:
            break
    raise AssertionError("no such line from the worker:\n" + "".join(seen[-30:]))
