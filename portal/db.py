"""Database helpers shared by the apps."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection, transaction


@contextmanager
def one_snapshot() -> Iterator[None]:
    """Every read inside sees the database as of one instant (PostgreSQL REPEATABLE READ).

    A page that reads a row and then its history in two statements under READ COMMITTED can show
    both sides of a commit made in between: the job page read the job ("queued"), the scheduler
    committed the admission, then the page read the events ("admitted") — the header and the
    timeline disagreed (issue 32 item 7). Reads only: a write in here that meets a concurrent one
    fails with a serialisation error instead of waiting. Inside a transaction that is already
    open (a caller's, a test's) its own isolation holds: the level can only be set first thing."""
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield
