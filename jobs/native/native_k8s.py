"""Kubernetes workloads that do not come through the portal (DESIGN §11; docs/backends.md,
"External Kubernetes pods and ResourceQuota"), on clusters whose config has
``"native_import": true``:

* **Namespaces** labelled ``gpupool.io/project=<project code>`` become sources of kind
  ``k8s_namespace``, mapped to that project when the code exists and nobody mapped the source
  yet (an admin's mapping is never overwritten); other namespaces' pods land unmapped.
* **Pods** asking for a flavor's accelerator resource that the portal did not create become
  external jobs (:mod:`jobs.native.backends.k8s_native` reads them, :mod:`jobs.native.external` records them).
  The API server is read the way its clients are meant to read it: one list, then watches from
  the list's ``resourceVersion`` (kept in ``ExternalCursor`` kind "pods"), each import reading
  the changes since the last one; a 410 Gone (the version was compacted away) means list again.
* **ResourceQuota** ``gpupool-quota`` in every namespace mapped to a project, rendered by
  :mod:`quotas.resource_quota` — only where no queue manager (Kueue, Volcano, YuniKorn:
  ``scheduler_integration``) admits the cluster's jobs.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

import urllib3
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone
from kubernetes import watch
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

from jobs.clusters.backends.base import BackendError
from jobs.clusters.backends.kubernetes import MANAGED_SELECTOR, TIME_SOURCE, KubernetesBackend
from jobs.native import queue_sync
from jobs.native.backends.external import ExternalRecord
from jobs.native.backends.k8s_native import NOT_PORTAL, PROJECT_LABEL, gone_without_end, pod_record
from jobs.native.external import end_missing, map_source, open_backend_ids, record_external
from jobs.native.models import ExternalCursor, ExternalObservation, ExternalSource, ExternalSourceKind
from portal.enqueue import send
from portal.models import Project
from quotas.models import Cluster, ClusterKind, Flavor
from quotas.resource_quota import NAME as QUOTA_NAME
from quotas.resource_quota import render_resource_quotas

log = logging.getLogger(__name__)

CONFIG_KEY = "native_import"
CURSOR = "pods"
SOURCE_KIND = ExternalSourceKind.K8S_NAMESPACE
# How long one import watches for changes (the API server's timeoutSeconds). Short: the import
# runs from beat and reads what happened since the last one; it does not wait for the future.
WATCH_SECONDS = 2
GONE_REASON = "pod deleted before its containers reported an end (time of the portal's observation)"
LOCK_SECONDS = 300


def native_clusters() -> list[Cluster]:
    candidates = Cluster.objects.filter(active=True, kind=ClusterKind.KUBERNETES, config__has_key=CONFIG_KEY)
    return [c for c in candidates if c.config.get(CONFIG_KEY) and not c.config.get("simulated")]


def import_cluster(cluster_id: int) -> dict:
    """The periodic work of one cluster: pods, then quotas. Two at once on one cluster would
    only repeat each other's reads: the second returns at once."""
    cluster = Cluster.objects.get(pk=cluster_id)
    if not cache.add(f"native-k8s:{cluster_id}", 1, LOCK_SECONDS):
        return {"skipped": "another import of this cluster is running"}
    try:
        return {"pods": import_pods(cluster), "quotas": sync_resource_quotas(cluster)}
    except BackendError as exc:
        log.warning("native import of %s failed: %s", cluster.name, exc)
        return {"error": str(exc)}
    finally:
        cache.delete(f"native-k8s:{cluster_id}")


# -- namespaces


def sync_namespaces(cluster: Cluster, backend: KubernetesBackend) -> dict[str, int]:
    """Sources for the labelled namespaces; a source nobody mapped yet is mapped to the project
    its label names (its observed pods become jobs). Never overwrites a mapping."""
    listed = backend._call(backend.core.list_namespace, label_selector=PROJECT_LABEL)
    labels = {ns.metadata.name: (ns.metadata.labels or {}).get(PROJECT_LABEL, "") for ns in listed.items}
    projects = {p.code: p for p in Project.objects.filter(code__in=set(labels.values()), active=True)}
    ExternalSource.objects.bulk_create(
        [ExternalSource(cluster=cluster, kind=SOURCE_KIND, name=n) for n in labels], ignore_conflicts=True
    )
    counts = {"labelled": len(labels), "mapped": 0, "unknown_project": 0, "label_differs": 0}
    sources = ExternalSource.objects.filter(cluster=cluster, kind=SOURCE_KIND, name__in=list(labels))
    for source in sources.select_related("project"):
        project = projects.get(labels[source.name])
        if source.project_id is None and project is not None:
            map_source(source=source, project=project, actor=None)
            counts["mapped"] += 1
        elif project is None:
            counts["unknown_project"] += 1
        elif source.project_id != project.pk:
            counts["label_differs"] += 1
            log.warning("namespace %s of %s is labelled %s but mapped to %s: the mapping stays",
                        source.name, cluster.name, project.code, source.project.code)
    return counts


# -- pods


@dataclass
class Read:
    """What one import read: the latest record of each pod (by uid), the pods that went away
    without an end, the version to watch from next, and — after a list — every uid listed."""

    version: str
    records: dict[str, ExternalRecord] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    listed: set[str] | None = None
    relisted_after_gone: bool = False

    def add(self, pod: dict, resources: set[str], *, deleted: bool = False) -> None:
        uid = (pod.get("metadata") or {}).get("uid", "")
        record = pod_record(pod, resources, deleted=deleted)
        if record is not None:
            self.records[uid] = record
        if gone_without_end(record, deleted):
            self.gone.add(uid)
        if self.listed is not None:
            self.listed.add(uid)


def import_pods(cluster: Cluster, *, watch_seconds: float = WATCH_SECONDS) -> dict:
    backend = KubernetesBackend(**cluster.config)
    namespaces = sync_namespaces(cluster, backend)
    resources = set(Flavor.objects.exclude(k8s_resource_name="").values_list("k8s_resource_name", flat=True))
    cursor = ExternalCursor.objects.filter(cluster=cluster, kind=CURSOR).first()
    read = _read(backend, resources, cursor.value if cursor else None, watch_seconds)
    outcome = record_external(cluster, SOURCE_KIND, list(read.records.values()), time_source=TIME_SOURCE)
    gone = set(read.gone)
    if read.listed is not None:  # a list shows everything: what it lacks was deleted unseen
        gone |= (set(open_backend_ids(cluster)) | _open_observations(cluster)) - read.listed
    ended = end_missing(cluster, gone, reason=GONE_REASON) if gone else 0
    ExternalCursor.objects.update_or_create(cluster=cluster, kind=CURSOR, defaults={"value": read.version})
    return {**outcome.as_dict(), "namespaces": namespaces, "ended_unseen": ended,
            "listed": read.listed is not None, "relisted_after_gone": read.relisted_after_gone}


def _read(backend: KubernetesBackend, resources: set[str], since: str | None, seconds: float) -> Read:
    if since:
        try:
            return _watch(backend, resources, since, seconds)
        except ApiException as exc:
            if exc.status != 410:
                raise BackendError(f"kubernetes watch pods: HTTP {exc.status} {exc.reason or ''}") from exc
            # https://kubernetes.io/docs/reference/using-api/api-concepts/#efficient-detection-of-changes:
            # the version was compacted away; list again and watch from the list's version.
            log.info("pod watch of %s from %s: %s; listing again", backend.api_client.configuration.host,
                     since, exc.reason)
            read = _list(backend, resources)
            read.relisted_after_gone = True
            return read
    return _list(backend, resources)


def _list(backend: KubernetesBackend, resources: set[str]) -> Read:
    """Every pod the portal did not create, as raw JSON (the records are built from the API
    server's own field names, as a watch event carries them)."""
    response = backend._call(
        backend.core.list_pod_for_all_namespaces, label_selector=NOT_PORTAL, _preload_content=False
    )
    body = json.loads(response.data)
    read = Read(version=body["metadata"]["resourceVersion"], listed=set())
    for pod in body.get("items") or []:
        read.add(pod, resources)
    return read


def _watch(backend: KubernetesBackend, resources: set[str], since: str, seconds: float) -> Read:
    watcher = watch.Watch()
    read = Read(version=since)
    stream = watcher.stream(
        backend.core.list_pod_for_all_namespaces, label_selector=NOT_PORTAL, resource_version=since,
        timeout_seconds=max(1, int(seconds)), allow_watch_bookmarks=True,
        _request_timeout=seconds + backend.timeout,
    )
    try:
        for event in stream:
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                read.add(event["raw_object"], resources, deleted=event["type"] == "DELETED")
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise BackendError(f"kubernetes watch pods: {exc}") from exc
    # The watcher follows every event's version and the bookmarks: where the next one resumes.
    read.version = str(watcher.resource_version or since)
    return read


def _open_observations(cluster: Cluster) -> set[str]:
    """Pods of unmapped namespaces last seen pending or running."""
    rows = ExternalObservation.objects.filter(source__cluster=cluster, source__kind=SOURCE_KIND)
    return {o.backend_id for o in rows if o.record.get("phase") in ("pending", "running")}


# -- ResourceQuota


def quota_manager(cluster: Cluster) -> str | None:
    """The queue manager that admits the cluster's jobs (Kueue, Volcano, YuniKorn), if any:
    there it caps native submissions, not a ResourceQuota."""
    return (cluster.config or {}).get(queue_sync.CONFIG_KEY) or None


def mapped_namespaces(cluster: Cluster, portal_namespace: str) -> dict[str, str]:
    """Namespace → project code, for the namespaces mapped to an active project (never the
    portal's own namespace: its jobs are admitted by the portal)."""
    sources = ExternalSource.objects.filter(
        cluster=cluster, kind=SOURCE_KIND, project__isnull=False, project__active=True
    ).exclude(name=portal_namespace)
    return dict(sources.values_list("name", "project__code"))


def sync_resource_quotas(cluster: Cluster, now: datetime | None = None) -> dict:
    if quota_manager(cluster):
        return {"skipped": f"queues of {quota_manager(cluster)} cap this cluster"}
    backend = KubernetesBackend(**cluster.config)
    flavors = queue_sync.cluster_flavors(cluster)
    snapshot = queue_sync.snapshot(flavor_names=flavors, namespace=backend.namespace)
    objects = render_resource_quotas(
        snapshot, now or timezone.now(), mapped_namespaces(cluster, backend.namespace)
    )
    return ResourceQuotaSync(backend).apply(objects)


class ResourceQuotaSync:
    """Make the managed ResourceQuotas equal the rendered ones: create the missing, replace the
    different (with the read resourceVersion: a concurrent writer makes this one fail and the
    next sync retry), leave the equal untouched, delete those no longer rendered. Quotas without
    gpupool's label are never touched."""

    def __init__(self, backend: KubernetesBackend):
        self.backend = backend
        self.core = backend.core

    def apply(self, objects: list[dict]) -> dict[str, int]:
        counts = {"created": 0, "replaced": 0, "unchanged": 0, "deleted": 0}
        listed = self.backend._call(
            self.core.list_resource_quota_for_all_namespaces, label_selector=MANAGED_SELECTOR
        )
        current = {q.metadata.namespace: q for q in listed.items if q.metadata.name == QUOTA_NAME}
        for obj in objects:
            counts[self._put(obj, current.get(obj["metadata"]["namespace"]))] += 1
        wanted = {o["metadata"]["namespace"] for o in objects}
        for namespace in sorted(set(current) - wanted):
            delete = self.core.delete_namespaced_resource_quota
            self.backend._call(delete, QUOTA_NAME, namespace, missing_ok=True)
            counts["deleted"] += 1
        return counts

    def _put(self, obj: dict, current) -> str:
        namespace = obj["metadata"]["namespace"]
        if current is None:
            self.backend._call(self.core.create_namespaced_resource_quota, namespace, obj)
            return "created"
        if _same(current, obj):
            return "unchanged"
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": current.metadata.resource_version}}
        self.backend._call(self.core.replace_namespaced_resource_quota, QUOTA_NAME, namespace, body)
        return "replaced"


def _same(current, wanted: dict) -> bool:
    """Equal limits (as quantities: the API server writes them in canonical form), labels and
    no other spec fields."""
    spec = current.spec
    hard = {k: parse_quantity(v) for k, v in ((spec.hard if spec else None) or {}).items()}
    want = {k: parse_quantity(v) for k, v in wanted["spec"]["hard"].items()}
    extra = spec is not None and (spec.scopes or spec.scope_selector)
    labels = current.metadata.labels or {}
    same_labels = all(labels.get(k) == v for k, v in wanted["metadata"]["labels"].items())
    return hard == want and not extra and same_labels


# -- triggers


def _enqueue() -> None:
    if native_clusters():
        send("jobs.sync_resource_quotas", expires=60)


def request_quota_sync(**_signal_kwargs) -> None:
    """After the current transaction commits, once however many rows it wrote."""
    if any(entry[1] is _enqueue for entry in connection.run_on_commit):
        return
    transaction.on_commit(_enqueue, robust=True)


def sync_all_quotas() -> dict[str, dict]:
    results: dict[str, dict] = {}
    for cluster in native_clusters():
        try:
            results[cluster.name] = sync_resource_quotas(cluster)
        except BackendError as exc:
            log.warning("ResourceQuotas of %s not synced: %s", cluster.name, exc)
            results[cluster.name] = {"error": str(exc)}
    return results


def connect_signals() -> None:
    from django.db.models.signals import post_delete, post_save

    from quotas.models import Loan, QuotaNode, QuotaWindow

    for model in (QuotaNode, Loan, QuotaWindow, ExternalSource, Project):
        uid = f"resource-quota-{model.__name__}"
        post_save.connect(request_quota_sync, sender=model, dispatch_uid=f"{uid}-save")
        post_delete.connect(request_quota_sync, sender=model, dispatch_uid=f"{uid}-delete")
