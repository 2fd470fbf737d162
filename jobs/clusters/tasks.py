"""Thin Celery tasks of the backends: they take ids (or nothing), call a service, and are safe to run
twice — each service claims its row with a conditional update before it calls a backend. Task
names keep the ``jobs.`` prefix they had before the app split (beat and queued messages use them)."""

import logging

from celery import shared_task
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone

from jobs.clusters import dispatch
from jobs.models import Job
from jobs.states import HOLDING, JobState
from portal.logs import job_context
from quotas.models import Cluster

log = logging.getLogger(__name__)

ENQUEUE_GUARD_SECONDS = 60


@shared_task(
    name="jobs.dispatch_job", ignore_result=True, autoretry_for=(Exception,), retry_backoff=5, max_retries=10
)
def dispatch_job(job_id: int) -> str:
    return _on_job(dispatch.dispatch_job, job_id)


@shared_task(
    name="jobs.stop_job", ignore_result=True, autoretry_for=(Exception,), retry_backoff=5, max_retries=10
)
def stop_job(job_id: int) -> str:
    return _on_job(dispatch.stop_job, job_id)


@shared_task(
    name="jobs.resize_job", ignore_result=True, autoretry_for=(Exception,), retry_backoff=5, max_retries=10
)
def resize_job(job_id: int) -> str:
    return _on_job(dispatch.resize_job, job_id)


def _on_job(step, job_id: int) -> str:
    # This message is being handled: the safety net may queue the next one (_enqueue_once).
    submitted_at = Job.objects.filter(pk=job_id).values_list("submitted_at", flat=True).first()
    if submitted_at is not None:
        cache.delete(_guard_key(step.__name__, job_id, submitted_at))
    # Every line logged while working on the job (backend errors included) carries its id.
    with job_context(job_id):
        outcome = step(job_id)
        log.info("%s job %s: %s", step.__name__, job_id, outcome)
        return outcome


@shared_task(name="jobs.sync_cluster", ignore_result=True)
def sync_cluster(cluster_id: int) -> dict:
    return dispatch.sync_cluster(cluster_id)


@shared_task(name="jobs.backend_work", ignore_result=True)
def backend_work() -> None:
    """Fan out: dispatch admitted jobs, stop preempted/cancelled ones, resize grown or scaled ones,
    sync every cluster. Runs from beat as a safety net, so a lost message delays work but never
    loses it."""
    live_claim = Q(dispatch_claimed_at__gte=timezone.now() - dispatch.CLAIM_TIMEOUT)
    undispatched = (
        Job.objects.filter(state=JobState.ADMITTED, dispatched_at__isnull=True).exclude(live_claim)
        .exclude(kind="external")
    )
    for job_id, submitted_at in undispatched.values_list("pk", "submitted_at"):
        _enqueue_once(dispatch_job, job_id, submitted_at)
    stopping = Job.objects.filter(
        state__in=list(HOLDING), dispatched_at__isnull=False, stop_requested_at__isnull=True
    ).exclude(
        terminating_since__isnull=True, cancel_requested_at__isnull=True, expire_requested_at__isnull=True
    )
    for job_id, submitted_at in stopping.values_list("pk", "submitted_at"):
        _enqueue_once(stop_job, job_id, submitted_at)
    resizing = Job.objects.filter(state__in=list(HOLDING), resize_requested_at__isnull=False)
    for job_id, submitted_at in resizing.values_list("pk", "submitted_at"):
        _enqueue_once(resize_job, job_id, submitted_at)
    for cluster_id in Cluster.objects.filter(active=True).values_list("pk", flat=True):
        sync_cluster.delay(cluster_id)


def _enqueue_once(task, job_id: int, submitted_at) -> None:
    """Queue `task(job_id)` unless a message for it is still waiting in the queue.

    backend_work runs every few seconds; without the guard a backlog (slow backend, busy
    workers) gains one duplicate message per job per run (seen in the 7-day soak). The key is set
    when the message is queued and deleted when a worker takes it (_on_job), so a job whose
    dispatch had to wait (its victims still leaving) is queued again at the next run. If the
    message is lost unread (a broker restart loses the key with it; anything else), the key
    expires after ENQUEUE_GUARD_SECONDS and the next run queues it again. The key carries
    submitted_at so a recycled id (a restored or re-created database) is never mistaken for the
    old job."""
    if cache.add(_guard_key(task.name.rpartition(".")[2], job_id, submitted_at), 1, ENQUEUE_GUARD_SECONDS):
        task.delay(job_id)


def _guard_key(step: str, job_id: int, submitted_at) -> str:
    return f"enqueued:{step}:{job_id}:{submitted_at.timestamp()}"


@shared_task(name="jobs.poll_metrics", ignore_result=True)
def poll_metrics() -> None:
    """The minute's GPU samples, and node health from the same sources (jobs.clusters.health):
    health first, so a Prometheus outage that stops the samples never delays a cordon by the
    backends' signals. Then each node's DCGM power (jobs.clusters.power, DESIGN §18)."""
    from jobs.clusters.health import poll_node_health
    from jobs.clusters.metrics import poll_gpu_metrics
    from jobs.clusters.power import poll_node_power

    poll_node_health()
    poll_gpu_metrics()
    poll_node_power()


@shared_task(name="jobs.expire_jobs", ignore_result=True)
def expire_jobs() -> None:
    for job_id in dispatch.expire_overdue():
        stop_job.delay(job_id)


@shared_task(name="jobs.start_timeouts", ignore_result=True)
def start_timeouts() -> dict:
    """DESIGN §17: dispatched jobs not running within the start timeout give their GPUs back."""
    from jobs.clusters.start_timeout import requeue_unstarted

    return requeue_unstarted()


@shared_task(name="jobs.sync_inventory", ignore_result=True)
def sync_inventory() -> None:
    """Nodes come from the backends (DESIGN §2); the simulator gets the portal's inventory."""
    from jobs.clusters.backends.registry import is_simulated
    from jobs.clusters.inventory import push_simulated_inventory
    from jobs.clusters.inventory import sync_inventory as sync_one

    push_simulated_inventory()
    for cluster in Cluster.objects.filter(active=True):
        if not is_simulated(cluster.kind, cluster.config or {}):
            sync_one(cluster)
