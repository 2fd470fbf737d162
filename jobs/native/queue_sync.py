"""Keep Kueue / Volcano queues and YuniKorn's queue configuration in step with the quota tree
(docs/backends.md, "Scheduler integration" and "YuniKorn"). A Kubernetes cluster whose config has
``"scheduler_integration": "kueue"`` or ``"volcano"`` gets the tree rendered by
:mod:`quotas.queues` at ``now`` and applied by :mod:`jobs.native.backends.queues`; with ``"yunikorn"``
it is rendered by :mod:`quotas.yunikorn` and written into YuniKorn's ConfigMap by
:mod:`jobs.native.backends.yunikorn`.

When: after every committed write of a quota node, loan, window, department or project (model
signals, so the admin, the approvals and the services alike trigger it), and from beat every
minute, because windows open and loans end on the clock, not on a write.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs.clusters.backends.base import BackendError
from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.native.backends.queues import QueueSync
from jobs.native.backends.yunikorn import DEFAULT_NAMESPACE, YuniKornSync
from jobs.native.models import ExternalSource, ExternalSourceKind
from jobs.requests import flavor_share
from jobs.scheduler.footprint import DIMENSIONS
from portal.enqueue import send
from portal.models import Department, Project, Queueing
from quotas.effective import Limits, LoanSpan, Window
from quotas.models import (
    Cluster,
    ClusterKind,
    FairShareWeight,
    Flavor,
    FlavorKind,
    Loan,
    LoanState,
    QuotaNode,
    QuotaWindow,
)
from quotas.queues import FORMATS, JOBS_NAMESPACE, FlavorRef, QuotaRef, TreeSnapshot, render
from quotas.selectors import capacity_by_flavor, site_zone
from quotas.yunikorn import dump, render_yunikorn

log = logging.getLogger(__name__)
CONFIG_KEY = "scheduler_integration"
YUNIKORN = "yunikorn"
INTEGRATIONS = (*FORMATS, YUNIKORN)


def integration_of(cluster: Cluster) -> str | None:
    config = cluster.config or {}
    mode = config.get(CONFIG_KEY)
    if cluster.kind != ClusterKind.KUBERNETES or config.get("simulated") or mode not in INTEGRATIONS:
        return None
    return mode


def integration_clusters() -> list[Cluster]:
    candidates = Cluster.objects.filter(active=True, kind=ClusterKind.KUBERNETES, config__has_key=CONFIG_KEY)
    return [c for c in candidates if integration_of(c)]


# -- the snapshot


def per_unit(flavor) -> tuple[tuple[str, int], ...]:
    """What one unit of the flavor comes with (``jobs.requests.flavor_share``): pods ask it, so the
    queues hold it too."""
    share = flavor_share(flavor)
    if flavor.kind == FlavorKind.CPU:
        # A cpu flavor's unit is one core, whatever its nodes' cores over their units say: the
        # renderings count its quota as cpu through this figure (quotas.queues.device_resource).
        share = replace(share, cpu_millicores=1000)
    return tuple((dim, share.get(dim)) for dim in DIMENSIONS if share.get(dim) is not None)


def snapshot(*, flavor_names: list[str] | None = None, namespace: str = JOBS_NAMESPACE) -> TreeSnapshot:
    """The whole quota tree (all tenants: the cluster's scheduler serves them all), of the
    named flavors or of every active one."""
    flavors = Flavor.objects.filter(active=True)
    if flavor_names is not None:
        flavors = flavors.filter(name__in=flavor_names)
    capacity = capacity_by_flavor()
    refs = tuple(
        FlavorRef(f.name, f.k8s_resource_name, capacity.get(f.pk, 0), f.shareable, per_unit(f),
                  f.relative_throughput * f.fraction_numerator / f.fraction_denominator)
        for f in flavors.order_by("name")
    )
    nodes = list(
        QuotaNode.objects.filter(flavor__in=flavors)
        .filter(Q(project__isnull=True) | Q(project__active=True))
        .select_related("flavor", "department", "project")
    )
    return TreeSnapshot(
        flavors=refs,
        departments=tuple(Department.objects.values_list("code", "parent__code")),
        projects=tuple(Project.objects.filter(active=True).values_list("code", "department__code")),
        quotas=_quota_refs(nodes),
        zone=site_zone(),
        namespace=namespace,
        strict_fifo=frozenset(
            Project.objects.filter(active=True, queueing=Queueing.STRICT_FIFO).values_list("code", flat=True)
        ),
        weights=tuple(sorted(
            (("project", w.project.code) if w.project_id else ("department", w.department.code), w.weight)
            for w in FairShareWeight.objects.select_related("department", "project")
        )),
    )


def _quota_refs(nodes: list[QuotaNode]) -> tuple[QuotaRef, ...]:
    ids = [n.pk for n in nodes]
    windows: dict[int, list[Window]] = {i: [] for i in ids}
    for w in QuotaWindow.objects.filter(quota_node_id__in=ids, active=True).order_by("id"):
        days = frozenset(int(d) for d in w.weekdays)
        windows[w.quota_node_id].append(Window(days, w.start_time, w.end_time, w.quota, w.lend_limit))
    loans_in: dict[int, list[LoanSpan]] = {i: [] for i in ids}
    loans_out: dict[int, list[LoanSpan]] = {i: [] for i in ids}
    live = Loan.objects.filter(Q(lender_id__in=ids) | Q(borrower_id__in=ids), state=LoanState.ACTIVE)
    for loan in live:
        span = LoanSpan(loan.amount, loan.starts_at, loan.ends_at)
        loans_out.get(loan.lender_id, []).append(span)
        loans_in.get(loan.borrower_id, []).append(span)
    return tuple(
        QuotaRef(
            flavor=n.flavor.name,
            kind="project" if n.project_id else "department",
            code=n.project.code if n.project_id else n.department.code,
            base=Limits(n.quota, n.borrow_limit, n.lend_limit),
            windows=tuple(windows[n.pk]),
            loans_in=tuple(loans_in[n.pk]),
            loans_out=tuple(loans_out[n.pk]),
        )
        for n in nodes
    )


def render_queues(
    fmt: str, *, flavor_names=None, namespace=JOBS_NAMESPACE, now: datetime | None = None
) -> list[dict]:
    return render(snapshot(flavor_names=flavor_names, namespace=namespace), now or timezone.now(), fmt)


# -- syncing


def cluster_flavors(cluster: Cluster) -> list[str]:
    """``queue_flavors`` from the config, else the flavors the cluster has nodes of."""
    configured = (cluster.config or {}).get("queue_flavors")
    if configured:
        return list(configured)
    return sorted(set(cluster.nodes.values_list("flavor__name", flat=True)))


def mapped_namespaces(cluster: Cluster) -> list[tuple[str, str]]:
    """(namespace, project code) of the cluster's namespaces mapped to an active project
    (DESIGN §11: the mapping external pods are recorded by)."""
    sources = ExternalSource.objects.filter(
        cluster=cluster, kind=ExternalSourceKind.K8S_NAMESPACE, project__active=True
    )
    return list(sources.order_by("name").values_list("name", "project__code"))


def render_yunikorn_config(cluster: Cluster, now: datetime | None = None) -> str:
    """The text of YuniKorn's ``queues.yaml`` for one cluster: its flavors, its namespaces."""
    backend_namespace = (cluster.config or {}).get("namespace") or JOBS_NAMESPACE
    tree = snapshot(flavor_names=cluster_flavors(cluster), namespace=backend_namespace)
    return dump(render_yunikorn(tree, now or timezone.now(), mapped_namespaces(cluster)))


def sync_cluster_queues(cluster: Cluster, now: datetime | None = None) -> dict[str, int]:
    mode = integration_of(cluster)
    if mode is None:
        return {}
    backend = KubernetesBackend(**cluster.config)
    if mode == YUNIKORN:
        config = cluster.config or {}
        sync = YuniKornSync(
            backend,
            namespace=config.get("yunikorn_namespace") or DEFAULT_NAMESPACE,
            policy_group=config.get("yunikorn_policy_group") or "queues",
        )
        return sync.apply(render_yunikorn_config(cluster, now))
    objects = render_queues(mode, flavor_names=cluster_flavors(cluster), namespace=backend.namespace, now=now)
    return QueueSync(backend).apply(mode, objects)


def sync_all(now: datetime | None = None) -> dict[str, dict]:
    """Every integration cluster; one that cannot be reached is reported and retried by the
    next sync, without holding the others back."""
    results: dict[str, dict] = {}
    for cluster in integration_clusters():
        try:
            results[cluster.name] = sync_cluster_queues(cluster, now)
        except BackendError as exc:
            log.warning("scheduler queues of %s not synced: %s", cluster.name, exc)
            results[cluster.name] = {"error": str(exc)}
    return results


# -- triggers


def _enqueue() -> None:
    if integration_clusters():
        send("jobs.sync_scheduler_queues", expires=60)


def request_sync(**_signal_kwargs) -> None:
    """After the current transaction commits, once however many rows it wrote."""
    if any(entry[1] is _enqueue for entry in connection.run_on_commit):
        return
    transaction.on_commit(_enqueue, robust=True)


def connect_signals() -> None:
    from django.db.models.signals import post_delete, post_save

    for model in (QuotaNode, Loan, QuotaWindow, Department, Project):
        post_save.connect(request_sync, sender=model, dispatch_uid=f"queue-sync-save-{model.__name__}")
        post_delete.connect(request_sync, sender=model, dispatch_uid=f"queue-sync-delete-{model.__name__}")
