"""A real Celery worker and beat run the scheduling cycle by themselves (DESIGN §5)."""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.db import connection

from tests import factories as fx

ROOT = Path(__file__).resolve().parents[2]


def _test_database_url() -> str:
    s = connection.settings_dict
    host = s["HOST"] or ""
    if host.startswith("/"):
        return f"postgresql://{quote(s['USER'])}:{quote(s['PASSWORD'])}@/{s['NAME']}?host={host}"
    return f"postgresql://{quote(s['USER'])}:{quote(s['PASSWORD'])}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


@pytest.mark.celery_worker
@pytest.mark.django_db(transaction=True)
def test_beat_and_worker_admit_a_submitted_job(tmp_path):
    f = fx.flavor()
    fx.nodes(f, 1)
    d = fx.department("D")
    p = fx.project("p", d)
    fx.quota(f, d, 8)
    fx.quota(f, p, 8)
    job = fx.submit(p, f, gpus=8)
    queue = f"test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
        "CELERY_QUEUE": queue,
        "DATABASE_URL": _test_database_url(),
        "SCHEDULE_INTERVAL_SECONDS": "1",
    }
    celery = [sys.executable, "-m", "celery", "-A", "portal"]
    procs = [
        subprocess.Popen(
            [
                *celery,
                "worker",
                "-Q",
                queue,
                "--pool=solo",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=WARNING",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*celery, "beat", "--schedule", str(tmp_path / "beat"), "--loglevel=WARNING"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            job.refresh_from_db()
            if job.state == "admitted":
                break
            time.sleep(0.5)
    finally:
        for proc in procs:
            proc.terminate()
        logs = [proc.communicate(timeout=30)[0].decode(errors="replace") for proc in procs]
    assert job.state == "admitted", logs
    assert job.events.filter(to_state="admitted").count() == 1
