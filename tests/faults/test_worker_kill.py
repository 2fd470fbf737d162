"""The Celery worker SIGKILLed in the middle of a status sync, then again in the middle of a
scheduling cycle, beat SIGKILLed with it each time; both started again. Every job still runs
once and finishes, with one backend job, one event per transition and an exact ledger.

(A worker killed in the middle of a dispatch: tests/services/test_dispatch_crash.py.)"""

import time

import pytest
import redis
from django.conf import settings
from django.db import connection

from jobs.models import Job
from jobs.scheduling.cycle import CYCLE_LOCK
from portal.models import Project
from tests import factories as fx
from tests.celery_procs import private_queue
from tests.faults.checks import assert_agrees_with_simulator, assert_event_log_consistent, assert_ledger_exact
from tests.faults.procs import Celery, HoldingProxy, wait_until
from tests.faults.seed import seed_pool

pytestmark = [pytest.mark.faults, pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]
def _cycle_running() -> bool:
    """Some process holds the scheduling cycle's advisory lock in this database right now."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = %s"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [CYCLE_LOCK],
        )
        return cursor.fetchone() is not None


def test_worker_and_beat_killed_mid_sync_and_mid_cycle_lose_and_duplicate_nothing(tmp_path, simserver):
    proxy = HoldingProxy(simserver.url, hold=0.5)
    seed = seed_pool(proxy.url)
    project, flavor = Project.objects.get(pk=seed["project"]), fx.flavor()
    jobs = [fx.submit(project, flavor, gpus=2, name=f"w{i}", sim_duration_seconds=150) for i in range(10)]
    ids = [job.pk for job in jobs]
    queue = private_queue()
    celery = Celery(queue, tmp_path)
    celery.start()
    try:
        wait_until(lambda: proxy.in_flight > 0, "a status sync in its backend call", interval=0.01)
        celery.kill9()  # mid-sync: the backend answered nothing yet, the portal applied nothing
        first_kill = time.monotonic()
        done_then = Job.objects.filter(pk__in=ids, state="succeeded").count()
        celery.start()
        wait_until(_cycle_running, "a scheduling cycle holding its lock", interval=0.002)
        celery.kill9()  # mid-cycle: its transaction dies with the connection, the lock with it
        second_kill = time.monotonic() - first_kill
        celery.start()
        wait_until(lambda: Job.objects.filter(pk__in=ids, state="succeeded").count() == len(ids),
                   "every job to succeed")
        converged = time.monotonic() - first_kill
    finally:
        celery.stop()
        redis.Redis.from_url(settings.REDIS_CLIENT_URL).delete(queue)
        proxy.shutdown()
    assert done_then < len(ids)  # the first kill interrupted work in progress
    assert_event_log_consistent(ids)
    seen = assert_agrees_with_simulator(simserver.backend(), ids)
    for job in Job.objects.filter(pk__in=ids):  # one run each: the backend's run is the one recorded
        assert seen[f"gp-{job.pk}"]["started_at"] == job.started_at.isoformat(), job.pk
    rows = assert_ledger_exact(ids)
    print(f"worker+beat SIGKILL ×2 ({second_kill:.1f} s apart): {len(ids)} jobs converged {converged:.1f} s "
          "after the first kill; "
          f"{rows} ledger rows")

