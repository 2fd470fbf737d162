"""Thin Celery tasks: they take ids (or nothing), call a service, and are safe to run twice —
each service claims its row with a conditional update before it calls a backend."""

from celery import shared_task
from django.db import transaction

from quotas.models import Cluster

from . import dispatch
from .models import Job
from .scheduling import schedule_once
from .states import HOLDING, JobState


@shared_task(name="jobs.schedule_cycle", ignore_result=True)
def schedule_cycle() -> None:
    # wait=False: if a cycle is running it will see whatever triggered this one.
    report = schedule_once(wait=False)
    if report is not None and (report.admitted or report.preempted):
        transaction.on_commit(lambda: backend_work.delay())


@shared_task(
    name="jobs.dispatch_job", ignore_result=True, autoretry_for=(Exception,), retry_backoff=5, max_retries=10
)
def dispatch_job(job_id: int) -> str:
    return dispatch.dispatch_job(job_id)


@shared_task(
    name="jobs.stop_job", ignore_result=True, autoretry_for=(Exception,), retry_backoff=5, max_retries=10
)
def stop_job(job_id: int) -> str:
    return dispatch.stop_job(job_id)


@shared_task(
    name="jobs.resize_job", ignore_result=True, autoretry_for=(Exception,), retry_backoff=5, max_retries=10
)
def resize_job(job_id: int) -> str:
    return dispatch.resize_job(job_id)


@shared_task(name="jobs.sync_cluster", ignore_result=True)
def sync_cluster(cluster_id: int) -> dict:
    return dispatch.sync_cluster(cluster_id)


@shared_task(name="jobs.backend_work", ignore_result=True)
def backend_work() -> None:
    """Fan out: dispatch admitted jobs, stop preempted/cancelled ones, resize grown or scaled ones,
    sync every cluster. Runs from beat as a safety net, so a lost message delays work but never
    loses it."""
    for job_id in Job.objects.filter(state=JobState.ADMITTED, dispatched_at__isnull=True).values_list(
        "pk", flat=True
    ):
        dispatch_job.delay(job_id)
    stopping = Job.objects.filter(
        state__in=list(HOLDING), dispatched_at__isnull=False, stop_requested_at__isnull=True
    ).exclude(
        terminating_since__isnull=True, cancel_requested_at__isnull=True, expire_requested_at__isnull=True
    )
    for job_id in stopping.values_list("pk", flat=True):
        stop_job.delay(job_id)
    resizing = Job.objects.filter(state__in=list(HOLDING), resize_requested_at__isnull=False)
    for job_id in resizing.values_list("pk", flat=True):
        resize_job.delay(job_id)
    for cluster_id in Cluster.objects.filter(active=True).values_list("pk", flat=True):
        sync_cluster.delay(cluster_id)


@shared_task(name="jobs.poll_metrics", ignore_result=True)
def poll_metrics() -> None:
    from .metrics import flag_idle_jobs, poll_gpu_metrics

    poll_gpu_metrics()
    flag_idle_jobs()


@shared_task(name="jobs.expire_jobs", ignore_result=True)
def expire_jobs() -> None:
    for job_id in dispatch.expire_overdue():
        stop_job.delay(job_id)


@shared_task(name="jobs.sync_inventory", ignore_result=True)
def sync_inventory() -> None:
    """Nodes come from the backends (DESIGN §2); the simulator gets the portal's inventory."""
    from .backends.registry import is_simulated
    from .inventory import push_simulated_inventory
    from .inventory import sync_inventory as sync_one

    push_simulated_inventory()
    for cluster in Cluster.objects.filter(active=True):
        if not is_simulated(cluster.kind, cluster.config or {}):
            sync_one(cluster)
