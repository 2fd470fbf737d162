"""Real Celery processes for tests: a worker (and beat) consuming a private queue, talking to the
real broker and, when asked, to the test database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def private_queue() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def database_url_of_tests() -> str:
    """DATABASE_URL of the database pytest-django created (committed data needs transaction=True)."""
    s = connection.settings_dict
    host = s["HOST"] or ""
    if host.startswith("/"):
        return f"postgresql://{quote(s['USER'])}:{quote(s['PASSWORD'])}@/{s['NAME']}?host={host}"
    return f"postgresql://{quote(s['USER'])}:{quote(s['PASSWORD'])}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


def _env(queue: str, test_db: bool, extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test", "CELERY_QUEUE": queue, **extra}
    if test_db:
        env["DATABASE_URL"] = database_url_of_tests()
    return env


def start_worker(
    queue: str, *, test_db: bool = True, output=subprocess.PIPE, **extra: str
) -> subprocess.Popen:
    """A solo-pool worker: the task runs in the process a test may SIGKILL."""
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
        "--loglevel=WARNING",
    ]
    return subprocess.Popen(
        command, cwd=ROOT, env=_env(queue, test_db, extra), stdout=output, stderr=subprocess.STDOUT
    )


def start_beat(queue: str, schedule_file: Path, **extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "portal",
        "beat",
        "--schedule",
        str(schedule_file),
        "--loglevel=WARNING",
    ]
    return subprocess.Popen(
        command, cwd=ROOT, env=_env(queue, True, extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
