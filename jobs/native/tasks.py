"""Thin Celery tasks of native work: imports of jobs submitted to the clusters directly, and the
account, queue and ResourceQuota syncs (task names unchanged: ``jobs.…``)."""

import logging

from celery import shared_task

from quotas.models import Cluster

log = logging.getLogger(__name__)


@shared_task(name="jobs.sync_scheduler_queues", ignore_result=True)
def sync_scheduler_queues() -> dict:
    """Kueue / Volcano queues rendered from the quota tree at this instant (jobs.native.queue_sync):
    on every committed quota write, and from beat as windows open and loans end."""
    from jobs.native.queue_sync import sync_all

    return sync_all()


@shared_task(name="jobs.import_slurm_cluster", ignore_result=True)
def import_slurm_cluster(cluster_id: int) -> dict:
    """One cluster's import; safe to run twice (idempotent by cluster and Slurm job id)."""
    from jobs.native.native_slurm import import_slurm

    cluster = Cluster.objects.filter(pk=cluster_id, active=True, kind="slurm").first()
    if cluster is None:
        return {}
    outcome = import_slurm(cluster)
    log.info("slurm import %s: %s", cluster, outcome)
    return outcome


@shared_task(name="jobs.sync_slurm_accounts", ignore_result=True)
def sync_slurm_accounts() -> int:
    """Slurm accounts, associations and QOS from the quota tree at this instant
    (jobs.native.slurm_accounts): on every committed quota or membership write, and from beat."""
    from jobs.native.slurm_accounts import sync_all

    return len(sync_all())


@shared_task(name="jobs.sync_slurm_reservations", ignore_result=True)
def sync_slurm_reservations() -> int:
    """Reservations and maintenance windows as Slurm reservations (jobs.native.slurm_reservations):
    after every change, and from beat."""
    from jobs.native.slurm_reservations import sync_all

    return len(sync_all())


@shared_task(name="jobs.native_import", ignore_result=True)
def native_import() -> None:
    """Fan out from beat: one import per cluster that governs native submissions (DESIGN §11;
    Slurm: sbatch jobs, jobs.native.native_slurm; Kubernetes: external pods and ResourceQuotas,
    jobs.native.native_k8s)."""
    from jobs.native.native_k8s import native_clusters
    from jobs.native.native_slurm import importable_clusters

    for cluster in importable_clusters():
        import_slurm_cluster.delay(cluster.pk)
    for cluster in native_clusters():
        import_native_k8s.delay(cluster.pk)


@shared_task(name="jobs.import_native_k8s", ignore_result=True)
def import_native_k8s(cluster_id: int) -> dict:
    from jobs.native.native_k8s import import_cluster

    return import_cluster(cluster_id)


@shared_task(name="jobs.sync_resource_quotas", ignore_result=True)
def sync_resource_quotas() -> dict:
    """ResourceQuotas of mapped namespaces after a quota write (jobs.native.native_k8s)."""
    from jobs.native.native_k8s import sync_all_quotas

    return sync_all_quotas()
