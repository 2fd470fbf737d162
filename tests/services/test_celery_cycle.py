"""A real Celery worker and beat run the scheduling cycle by themselves (DESIGN §5)."""

import time
from pathlib import Path

import pytest

from tests import factories as fx
from tests.celery_procs import private_queue, start_beat, start_worker

ROOT = Path(__file__).resolve().parents[2]


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
    queue = private_queue()
    procs = [
        start_worker(queue, SCHEDULE_INTERVAL_SECONDS="1"),
        start_beat(queue, tmp_path / "beat", SCHEDULE_INTERVAL_SECONDS="1"),
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
