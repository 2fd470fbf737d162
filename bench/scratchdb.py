"""A scratch database for a benchmark: ``<name>_bench`` next to DATABASE_URL's, migrated, and
dropped at the end, so a benchmark never touches the data of the database it was pointed at."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg


def _bench_url(base: str) -> tuple[str, str, str]:
    parts = urlsplit(base)
    name = (parts.path.lstrip("/") or "postgres") + "_bench"
    admin = urlunsplit(parts._replace(path="/postgres"))
    return urlunsplit(parts._replace(path=f"/{name}")), admin, name


def _drop(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def scratch_django(
    settings: str = "portal.settings.test", *, keep: bool = False, reuse: bool = False
) -> Iterator[str]:
    """Create and migrate the scratch database, set Django up on it, drop it on exit.

    ``keep``: leave it in place at the end; ``reuse``: start from the one a ``keep`` run left
    (migrated to the code's migrations, so a change's data migration runs on it), so a slow
    populate is paid once while a change is measured."""
    url, admin, name = _bench_url(os.environ["DATABASE_URL"])
    if not reuse:
        _drop(admin, name)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    try:
        os.environ["DATABASE_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        yield url
        from django.db import connections

        connections.close_all()
    finally:
        if not keep:
            _drop(admin, name)
