import copy

import pytest
import redis
from django.conf import settings

from jobs.whatif.replay import sim
from jobs.whatif.replay.paths import ALIBABA_2023, ENV
from portal import enqueue as enqueue_module
from portal.celery import app
from tests.celery_procs import private_queue
from tests.history_scenario import record

RECORDED_PERIOD_S = 60.0  # the recording's periodic cycle; the export's manifest says so (beat's setting)


@pytest.fixture
def queue(monkeypatch):
    """A private queue: what the test's code enqueues goes there — where its worker listens, or
    nowhere — and is deleted afterwards (sent as ``portal.enqueue.send`` sends: no result kept)."""
    name = private_queue()
    monkeypatch.setattr(enqueue_module, "send", lambda task, *args, expires=None: app.send_task(
        task, args=args, queue=name, expires=expires, ignore_result=True))
    yield name
    redis.Redis.from_url(settings.REDIS_CLIENT_URL).delete(name)


@pytest.fixture
def recorded(settings):
    """A history recorded by the real scheduler (tests/history_scenario.py: 30 jobs over 2 h, a
    loan and a night window, a 5 s backend start latency), beat's cycle set to its period."""
    beat = copy.deepcopy(settings.CELERY_BEAT_SCHEDULE)
    beat["scheduling-cycle"]["schedule"] = RECORDED_PERIOD_S
    settings.CELERY_BEAT_SCHEDULE = beat
    return record(seed=11, jobs=30, span_s=2 * 3600, latency=5.0, period=RECORDED_PERIOD_S)


@pytest.fixture
def traces(tmp_path, monkeypatch):
    """A traces folder (``GPUPOOL_TRACES_DIR``) holding the default scenario's two files, empty:
    enough to start a search on any machine, for tests that never replay it."""
    folder = tmp_path / "traces"
    csv = folder / ALIBABA_2023 / "csv"
    csv.mkdir(parents=True)
    for name in (sim.ALIBABA_PODS, sim.ALIBABA_NODES):
        (csv / name).write_text("")
    monkeypatch.setenv(ENV, str(folder))
    return folder
