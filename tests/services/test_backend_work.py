"""beat's safety net (jobs.backend_work) queues each pending job once per guard period, not once
per run: the 7-day soak showed a backlog gaining one duplicate dispatch message per job per run.
Checked on the real Redis broker's queue."""

import base64
import json

import pytest
import redis
from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from jobs.clusters.tasks import _guard_key, backend_work, dispatch_job
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from quotas.models import Cluster
from tests import factories as fx

pytestmark = pytest.mark.django_db


def _queued(job_id: int, task: str) -> int:
    """Messages for `task(job_id)` waiting in the test queue on the broker."""
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    count = 0
    for raw in broker.lrange(settings.CELERY_TASK_DEFAULT_QUEUE, 0, -1):
        message = json.loads(raw)
        args = json.loads(base64.b64decode(message["body"]))[0]
        count += message["headers"]["task"] == task and args == [job_id]
    return count


def test_safety_net_queues_a_pending_dispatch_once_per_guard_period():
    f, project = fx.single_project_pool()
    job = fx.submit(project, f, gpus=8)
    assert schedule_once().admitted == 1
    before = _queued(job.pk, "jobs.dispatch_job")

    for _ in range(3):  # three beat runs while no worker took the message
        backend_work()
    assert _queued(job.pk, "jobs.dispatch_job") == before + 1

    # A worker takes the message (here: runs the task in this process) and the job still waits
    # undispatched: the next run queues it again. The cluster points at a closed port, so the
    # dispatch fails whatever else listens on this machine.
    Cluster.objects.update(config={"url": "http://127.0.0.1:9"})
    dispatch_job.apply(args=[job.pk], throw=False)
    backend_work()
    assert _queued(job.pk, "jobs.dispatch_job") == before + 2

    # The message is lost unread: once the guard expires, queued again.
    job.refresh_from_db()
    cache.delete(_guard_key("dispatch_job", job.pk, job.submitted_at))
    backend_work()
    assert _queued(job.pk, "jobs.dispatch_job") == before + 3


def test_a_job_a_worker_is_dispatching_is_not_queued_again():
    f, project = fx.single_project_pool()
    job = fx.submit(project, f, gpus=8)
    assert schedule_once().admitted == 1
    Job.objects.filter(pk=job.pk).update(dispatch_claimed_at=timezone.now())  # a live claim
    before = _queued(job.pk, "jobs.dispatch_job")
    backend_work()
    assert _queued(job.pk, "jobs.dispatch_job") == before

