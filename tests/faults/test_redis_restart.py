"""Redis (broker and cache) killed and started again empty, with web, worker and beat running on
it. Redis keeps nothing on disk, so every task queued but not yet delivered is lost; the design
makes that harmless — a submission's cycle request is only a hint, and beat issues the periodic
cycle and backend work again — so every job submitted before, during and after still runs once."""

import signal
import time

import pytest
import redis

from jobs.models import Job
from tests.celery_procs import database_url_of_tests, private_queue
from tests.faults.checks import assert_agrees_with_simulator, assert_event_log_consistent, assert_ledger_exact
from tests.faults.procs import Celery, Client, HoldingProxy, PrivateRedis, Web, django_env, wait_until
from tests.faults.seed import seed_pool

pytestmark = [pytest.mark.faults, pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def _submit(client: Client, seed: dict, prefix: str, count: int = 4) -> list[int]:
    ids = []
    for i in range(count):
        answer = client.submit(f"{prefix}{i}", seed["project"], seed["flavor"], gpus=2, duration=100)
        assert answer.status_code == 201, answer.text  # the portal takes jobs whatever the broker does
        ids.append(answer.json()["id"])
    return ids


def _all_in(ids: list[int], state: str) -> bool:
    return Job.objects.filter(pk__in=ids, state=state).count() == len(ids)


def test_a_redis_restart_loses_queued_tasks_harmlessly(tmp_path, simserver):
    proxy = HoldingProxy(simserver.url, hold=0)
    seed = seed_pool(proxy.url)
    broker = PrivateRedis(tmp_path)
    broker.start()
    queue = private_queue()
    web = Web(django_env(DATABASE_URL=database_url_of_tests(), REDIS_URL=broker.url(0), CELERY_QUEUE=queue),
              tmp_path / "web.log")
    celery = Celery(queue, tmp_path, REDIS_URL=broker.url(0))
    web.start()
    celery.start()
    client = Client(web.url, seed["token"])
    try:
        # Runs through the outage (20 s), so a status sync has a job to ask the backend about.
        anchor = client.submit("anchor", seed["project"], seed["flavor"], gpus=2, duration=2000).json()["id"]
        before = _submit(client, seed, "before-")
        wait_until(lambda: _all_in(before, "succeeded"), "the first jobs to succeed")

        proxy.hold = 6  # the worker's next status sync waits in the backend …
        wait_until(lambda: proxy.in_flight > 0, "the worker inside a status call", interval=0.02)
        # … and stays there, whatever the clock says (its own 5 s timeout, a slow machine), until
        # Redis is back: the solo worker reads no message meanwhile …
        celery.worker.send_signal(signal.SIGSTOP)
        queued = _submit(client, seed, "queued-")  # … so these jobs' cycle requests stay queued
        assert redis.Redis(port=broker.port).llen(queue) >= len(queued)
        # Beat would send its next periodic task to the new Redis the moment it is up: paused, so
        # what the queue holds right after the restart is only what survived (nothing).
        celery.beat.send_signal(signal.SIGSTOP)
        broker.kill9()
        during = _submit(client, seed, "during-")  # their cycle requests fail to send: logged, not raised
        health = client.get("/healthz")
        assert health.status_code == 503 and health.json()["checks"]["broker"].startswith("error")
        assert client.get("/api/v1/jobs/?state=queued").status_code == 200
        broker.start()
        restarted = time.monotonic()
        assert redis.Redis(port=broker.port).llen(queue) == 0  # the queued tasks are gone
        celery.beat.send_signal(signal.SIGCONT)
        proxy.hold = 0
        waiting = queued + during
        assert Job.objects.filter(pk__in=waiting, state="queued").count() == len(waiting)
        celery.worker.send_signal(signal.SIGCONT)  # its broker connection is gone: it reconnects
        # Nothing asks for a cycle any more but beat, and only a reconnected worker can run it.
        wait_until(lambda: Job.objects.filter(pk__in=waiting).exclude(state="queued").exists(),
                   "beat's next cycle after the restart")
        first_admission = time.monotonic() - restarted
        after = _submit(client, seed, "after-")
        ids = [anchor, *before, *waiting, *after]
        wait_until(lambda: _all_in(ids, "succeeded"), "every job to succeed")
        converged = time.monotonic() - restarted
        assert client.get("/healthz").status_code == 200
    finally:
        if celery.worker.poll() is None:
            celery.worker.send_signal(signal.SIGCONT)  # a stopped process would not see SIGTERM
        celery.stop()
        web.stop()
        broker.stop()
        proxy.shutdown()
    assert_event_log_consistent(ids)
    assert_agrees_with_simulator(simserver.backend(), ids)
    assert_ledger_exact(ids)
    print(f"redis restart: first admission {first_admission:.1f} s after Redis was back, "
          f"{len(ids)} jobs converged after {converged:.1f} s")
