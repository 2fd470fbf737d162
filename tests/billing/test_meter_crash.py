"""A ``manage.py meter`` SIGKILLed at random moments, then run again: not one card-second lost
or counted twice (compared with the independent count from the event log)."""

import os
import random
import signal
import subprocess
import sys
import time
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from billing.meter import meter_state
from billing.models import UsageRecord
from tests.celery_procs import database_url_of_tests
from tests.waiting import wait_until

from .conftest import expected_card_seconds, local

ROOT = Path(__file__).resolve().parents[2]


def _meter_process(*args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_tests(),
        "DJANGO_SETTINGS_MODULE": "portal.settings.test",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "meter", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _history(world, history, rng, jobs=300):
    flavors = [world.F]
    for _ in range(jobs):
        job = history.job(
            rng.choice([world.pa, world.pa1, world.pb]), rng.choice(flavors), gpus=rng.randint(1, 8)
        )
        at = local(2025, 6, 1) + timedelta(seconds=rng.randrange(20 * 86400))
        for run in range(rng.randint(1, 2)):
            history.admit(job, at, on_loan=rng.random() < 0.3)
            history.start(job, at + timedelta(seconds=5))
            at += timedelta(seconds=rng.randrange(600, 30 * 3600))
            if rng.random() < 0.5:
                history.flip(job, at, rng.random() < 0.5)
                at += timedelta(seconds=rng.randrange(60, 10 * 3600))
            history.end(job, at, "preempted" if run == 0 and rng.random() < 0.5 else "succeeded")
            if job.state == "succeeded":
                break
            at += timedelta(seconds=rng.randrange(60, 3600))


def _count() -> int:
    return UsageRecord.objects.count()


def _until_it_writes(process: subprocess.Popen, rows: int) -> None:
    """Until the meter has written more than ``rows`` rows (or ended)."""
    wait_until(lambda: _count() > rows or process.poll() is not None, "the meter to write", interval=0.05)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_meter_killed_at_random_moments_loses_nothing_and_counts_nothing_twice(world, history):
    rng = random.Random(61)
    _history(world, history, rng)
    observed = []
    for _attempt in range(3):
        process = _meter_process("--batch-size", "7", "--pause", "0.05")
        _until_it_writes(process, observed[-1] if observed else 0)
        time.sleep(rng.uniform(0.0, 0.6))  # a random moment of the run: mid-batch or between batches
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        observed.append(_count())
        assert meter_state().metered_through is None  # a killed run never moves the cursor
    assert observed[0] > 0
    finish = _meter_process()
    assert finish.wait(timeout=120) == 0
    total = _count()
    assert all(seen < total for seen in observed), (observed, total)  # every kill interrupted real work
    exact = sum(expected_card_seconds(meter_state().metered_through).values())
    metered = sum(UsageRecord.objects.values_list("card_seconds", flat=True))
    assert abs(metered - exact) < Decimal("0.001")  # rows round to 1e-6 card-second each
    again = _meter_process("--rescan-from", "2025-05-01T00:00+08:00")
    assert again.wait(timeout=120) == 0
    assert _count() == total
