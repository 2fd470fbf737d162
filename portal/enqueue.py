"""Background work is enqueued by the task's name, after the current transaction commits.

Celery tasks (``<app>/tasks.py``) are entry points: each takes ids and calls one service. A
service that needs work done in the background names the task here instead of importing
``tasks`` — so nothing imports a tasks module and the way down stays one-way (STYLE.md;
``tests/test_architecture.py`` holds it). The message goes out only once the data it refers to
is committed: a worker must never look for a row that is not there yet, nor act on a change that
was rolled back. Outside a transaction it goes out at once.
"""

from __future__ import annotations

from celery.result import AsyncResult
from django.db import transaction


def send(name: str, *args, expires: float | None = None) -> AsyncResult:
    """Send task ``name`` with ``args`` now, to the portal's queue (``CELERY_QUEUE``).

    ``ignore_result``: nobody waits for these tasks' results, and ``send_task`` cannot see the
    task's own ``ignore_result`` (the sender need not import it). Without it Celery subscribes to
    the result in the result backend (Redis) first, and with Redis down that subscription
    retries for ~19 s — a submission would hang that long instead of failing fast and leaving
    the work to beat (the Redis restart fault test caught it)."""
    from portal.celery import app

    return app.send_task(name, args=args, expires=expires, ignore_result=True)


def enqueue(name: str, *args, expires: float | None = None) -> None:
    """Send task ``name`` with ``args`` after the current transaction commits. ``robust``: a
    broker that is down must not undo or break the commit that already happened; the periodic
    tasks (beat) pick up what a lost message would have done."""
    transaction.on_commit(lambda: send(name, *args, expires=expires), robust=True)
