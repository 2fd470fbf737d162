"""Structured logs: one JSON object per line (``LOG_FORMAT=json``), each carrying the id of the
request or the Celery task and portal job it was written for.

* :class:`JsonFormatter` — ``ts, level, logger, message`` plus ``request_id``, ``task_id`` and
  ``job_id`` when known, and ``exc_info`` for exceptions. Log aggregators (Loki, Elasticsearch)
  index the fields instead of parsing free text.
* :class:`RequestIdMiddleware` — takes a well-formed incoming ``X-Request-ID`` (so an ingress or
  a caller's id runs through), otherwise makes one; returns it in the response header and keeps
  it in a context variable for the formatter. With ``LOG_REQUESTS`` it also writes one access
  line per request (gunicorn's own access log is not JSON).
* :func:`job_context` — the job id for everything logged while a task works on one job.

The ids live in :mod:`contextvars`, so threads (gunicorn's gthread workers) and the Celery
worker's tasks never see each other's ids.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from django.conf import settings
from django.core.signals import request_finished
from django.dispatch import receiver

REQUEST_ID_HEADER = "X-Request-ID"
# Accept a caller's id only if it is short and plain: it is echoed in a header and in the logs.
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
job_id: contextvars.ContextVar[int | None] = contextvars.ContextVar("job_id", default=None)

access_log = logging.getLogger("gpupool.access")

# Attributes every LogRecord has; anything else was passed in ``extra=`` and is kept as a field.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def new_request_id() -> str:
    return uuid.uuid4().hex


def valid_request_id(value: str | None) -> str | None:
    return value if value and _VALID_ID.match(value) else None


@contextmanager
def job_context(value: int | None) -> Iterator[None]:
    """Log lines written inside the block carry ``job_id``."""
    token = job_id.set(value)
    try:
        yield
    finally:
        job_id.reset(token)


def _task_id() -> str | None:
    # Celery keeps the running task on a stack of its own; no signal handlers to wire.
    from celery import current_task

    request = getattr(current_task, "request", None) if current_task else None
    return getattr(request, "id", None)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(self._ids(record))
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)

    @staticmethod
    def _ids(record: logging.LogRecord) -> dict[str, object]:
        ids = {
            "request_id": getattr(record, "request_id", None) or request_id.get(),
            "task_id": getattr(record, "task_id", None) or _task_id(),
            "job_id": getattr(record, "job_id", None) or job_id.get(),
        }
        return {key: value for key, value in ids.items() if value is not None}


class RequestIdMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        rid = valid_request_id(request.headers.get(REQUEST_ID_HEADER)) or new_request_id()
        request.request_id = rid
        # Kept until request_finished, not reset on the way out: Django logs 4xx responses
        # ("Not Found: …") after the middleware chain has returned.
        request_id.set(rid)
        started = time.monotonic()
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = rid
        if getattr(settings, "LOG_REQUESTS", False):
            _log_access(request, response.status_code, started)
        return response


@receiver(request_finished)
def _forget_request_id(**_kwargs) -> None:
    # The thread serves other requests next; lines logged between them carry no stale id.
    request_id.set(None)


def _log_access(request, status: int, started: float) -> None:
    access_log.info(
        "%s %s %s",
        request.method,
        request.path,
        status,
        extra={
            "method": request.method,
            "path": request.path,
            "status": status,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        },
    )
