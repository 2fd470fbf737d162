"""Thin Celery tasks: they take ids (or nothing), call a service, and are safe to run twice —
each service claims its row with a conditional update before it calls a backend."""

import logging

from celery import shared_task
from django.core.cache import cache
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.logs import job_context
from quotas.models import Cluster

from . import dispatch
from .models import Job
from .scheduling import schedule_once
from .start_estimates import start_estimates_refresh
from .states import HOLDING, JobState

log = logging.getLogger(__name__)

ENQUEUE_GUARD_SECONDS = 60


@shared_task(name="jobs.schedule_cycle", ignore_result=True)
def schedule_cycle() -> None:
    # wait=False: if a cycle is running it will see whatever triggered this one.
    report = schedule_once(wait=False)
    if report is not None and (report.admitted or report.preempted):
        transaction.on_commit(lambda: backend_work.delay())


@shared_task(name="jobs.autoscale", ignore_result=True)
def autoscale() -> int:
    """Inference jobs follow their load (jobs.autoscale); safe to run twice: a second pass sees
    the first one's change inside the cool-down."""
    from .autoscale import autoscale_tick

    return autoscale_tick()


@shared_task(name="jobs.estimate_starts", ignore_result=True)
def estimate_starts() -> None:
    """Estimated starts of the waiting jobs (issue 24), off the request path: idempotent (a
    second run overwrites the cache; one running already makes it return at once)."""
    start_estimates_refresh()


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


@shared_task(name="jobs.sync_scheduler_queues", ignore_result=True)
def sync_scheduler_queues() -> dict:
    """Kueue / Volcano queues rendered from the quota tree at this instant (jobs.queue_sync):
    on every committed quota write, and from beat as windows open and loans end."""
    from .queue_sync import sync_all

    return sync_all()


@shared_task(name="jobs.import_slurm_cluster", ignore_result=True)
def import_slurm_cluster(cluster_id: int) -> dict:
    """One cluster's import; safe to run twice (idempotent by cluster and Slurm job id)."""
    from .native_slurm import import_slurm

    cluster = Cluster.objects.filter(pk=cluster_id, active=True, kind="slurm").first()
    if cluster is None:
        return {}
    outcome = import_slurm(cluster)
    log.info("slurm import %s: %s", cluster, outcome)
    return outcome


@shared_task(name="jobs.sync_slurm_accounts", ignore_result=True)
def sync_slurm_accounts() -> int:
    """Slurm accounts, associations and QOS from the quota tree at this instant
    (jobs.slurm_accounts): on every committed quota or membership write, and from beat."""
    from .slurm_accounts import sync_all

    return len(sync_all())
@shared_task(name="jobs.native_import", ignore_result=True)
def native_import() -> None:
    """Fan out from beat: one import per cluster that governs native submissions (DESIGN §11;
    Slurm: sbatch jobs, jobs.native_slurm; Kubernetes: external pods and ResourceQuotas,
    jobs.native_k8s)."""
    from .native_k8s import native_clusters
    from .native_slurm import importable_clusters

    for cluster in importable_clusters():
        import_slurm_cluster.delay(cluster.pk)
    for cluster in native_clusters():
        import_native_k8s.delay(cluster.pk)


@shared_task(name="jobs.import_native_k8s", ignore_result=True)
def import_native_k8s(cluster_id: int) -> dict:
    from .native_k8s import import_cluster

    return import_cluster(cluster_id)


@shared_task(name="jobs.sync_resource_quotas", ignore_result=True)
def sync_resource_quotas() -> dict:
    """ResourceQuotas of mapped namespaces after a quota write (jobs.native_k8s)."""
    from .native_k8s import sync_all_quotas

    return sync_all_quotas()


# -- the policy advisor (issue 25; jobs.advisor_services) ------------------------------------------
@shared_task(name="jobs.advisor_candidate", ignore_result=True)
def advisor_candidate(candidate_id: int) -> str:
    """One replay of one candidate; a second delivery (or a finished candidate) is skipped."""
    from .advisor_services import advisor_candidate_run

    return advisor_candidate_run(candidate_id)


@shared_task(name="jobs.advisor_advance", ignore_result=True)
def advisor_advance(search_id: int) -> str:
    from .advisor_services import advisor_search_advance

    return advisor_search_advance(search_id)


@shared_task(name="jobs.advisor_tick", ignore_result=True)
def advisor_tick() -> int:
    """Re-queue candidates whose worker died, re-send lost messages, advance running searches."""
    from .advisor_services import advisor_reap

    return advisor_reap()
