"""External Kubernetes pods and ResourceQuotas (DESIGN §11), through the official client against
the API stand-in: pods users created in a namespace labelled ``gpupool.io/project`` become
external jobs of that project (list, then watches from the stored resourceVersion; a 410 lists
again), hold their GPUs in the engine's placement, end at their containers' finish and are
billed to the second; portal pods and CPU-only pods are not jobs; every project namespace gets a
schema-valid ResourceQuota of ``q + b``, replaced when the quota changes and left alone when
equal."""

from __future__ import annotations

import copy
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from django.db.models import Sum
from django.utils import timezone
from kubernetes.utils.quantity import parse_quantity

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.models import Job, JobKind
from jobs.native.models import ExternalCursor, ExternalObservation, ExternalSource
from jobs.native.native_k8s import (
    CURSOR,
    GONE_REASON,
    import_pods,
    sync_namespaces,
    sync_resource_quotas,
)
from jobs.native.tasks import import_native_k8s
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from quotas.effective import Limits
from quotas.models import Cluster, QuotaNode
from quotas.queues import FlavorRef, QuotaRef, TreeSnapshot
from quotas.resource_quota import render_resource_quotas
from tests import factories as fx
from tests.backends import k8s_standin

pytestmark = [pytest.mark.kubernetes, pytest.mark.django_db]

k8s_api = k8s_standin.k8s_api
SCHEMA = jsonschema.Draft202012Validator(
    yaml.safe_load((Path(__file__).parent / "schemas" / "core-v1-resourcequota.yaml").read_text())
)
GPU = "nvidia.com/gpu"
NS = "team-p"


@pytest.fixture
def world(k8s_api):
    """Cluster "k8s" (the stand-in) with two 8-GPU nodes; department D and project p (quota 16,
    borrow limit 4); namespace team-p labelled for p."""
    cluster = Cluster.objects.create(
        name="k8s", kind="kubernetes",
        config={"host": k8s_api.url, "namespace": "gpupool-jobs", "native_import": True},
    )
    f = fx.flavor()
    nodes = fx.nodes(f, 2, 8, cluster="k8s")
    dept = fx.department("D")
    proj = fx.project("p", dept)
    fx.quota(f, dept, 16)
    fx.quota(f, proj, 16, borrow=4)
    fx.priority()
    k8s_api.namespace(NS, {"gpupool.io/project": "p"})
    return cluster, nodes, proj, f


def _import(cluster):
    return import_pods(cluster, watch_seconds=1)


def _ago(**kw):
    return timezone.now().replace(microsecond=0) - timedelta(**kw)


def _job(k8s_api, name, namespace=NS):
    return Job.objects.get(backend_id=k8s_api.get("pods", name, namespace)["metadata"]["uid"])


def test_a_gpu_pod_in_a_labelled_namespace_is_an_external_job_of_its_project(k8s_api, world):
    cluster, nodes, proj, _f = world
    k8s_api.user_pod(NS, "train", {GPU: "2", "cpu": "4"}, service_account="trainer")
    out = _import(cluster)
    assert out["created"] == 1 and out["namespaces"]["mapped"] == 1
    assert ExternalSource.objects.get(cluster=cluster, name=NS).project == proj
    job = _job(k8s_api, "train")
    assert (job.kind, job.project, job.state, job.gpus_per_worker) == (JobKind.EXTERNAL, proj, "queued", 2)
    assert job.external_user == "team-p/trainer"
    started = _ago(minutes=5)
    k8s_api.pod_started(NS, "train", nodes[0].name, started)
    _import(cluster)
    job.refresh_from_db()
    assert (job.state, job.started_at) == (JobState.RUNNING, started)
    assert job.placement == [[[nodes[0].pk, 0, 1000], [nodes[0].pk, 1, 1000]]]
    assert job.events.get(to_state="running").time_source == "kubernetes"  # the container's start


def test_a_running_pod_holds_its_gpus_so_a_portal_job_goes_to_the_other_node(k8s_api, world):
    cluster, nodes, proj, f = world
    k8s_api.user_pod(NS, "big", {GPU: "8"})
    k8s_api.pod_started(NS, "big", nodes[0].name, _ago(minutes=1))
    _import(cluster)
    portal = fx.submit(proj, f, gpus=8, name="portal")
    schedule_once()
    portal.refresh_from_db()
    assert portal.state == JobState.ADMITTED
    assert {n for n, _g, _m in portal.placement[0]} == {nodes[1].pk}


def test_unknown_device_indices_take_the_lowest_free_ones_of_the_node(k8s_api, world):
    cluster, nodes, proj, f = world
    portal = fx.submit(proj, f, gpus=3, name="portal")
    schedule_once()
    portal.refresh_from_db()
    node_id = portal.placement[0][0][0]
    node = next(n for n in nodes if n.pk == node_id)
    held = {g for _n, g, _m in portal.placement[0]}
    for name, gpus in (("a", 2), ("b", 2)):
        k8s_api.user_pod(NS, name, {GPU: str(gpus)})
        k8s_api.pod_started(NS, name, node.name, _ago(minutes=1))
    _import(cluster)  # both in one import: the second must not take the first one's devices
    a = {g for _n, g, _m in _job(k8s_api, "a").placement[0]}
    b = {g for _n, g, _m in _job(k8s_api, "b").placement[0]}
    free = sorted(set(range(8)) - held)
    assert sorted(a | b) == free[:4] and not a & b


def test_the_pod_ends_at_its_containers_finish_and_is_billed_exactly(k8s_api, world):
    cluster, nodes, _proj, _f = world
    start = _ago(hours=3, minutes=17, seconds=11)
    end = start + timedelta(hours=2, seconds=41)
    k8s_api.user_pod(NS, "train", {GPU: "3"})
    k8s_api.pod_started(NS, "train", nodes[0].name, start)
    _import(cluster)
    k8s_api.pod_finished(NS, "train", end)
    out = _import(cluster)
    assert out["changed"] == 1 and not out["listed"]  # read by the watch
    job = _job(k8s_api, "train")
    assert (job.state, job.started_at, job.finished_at, job.placement) == (JobState.SUCCEEDED, start, end, [])
    usage_meter(now=end + timedelta(hours=2))
    total = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    assert total == Decimal((end - start).total_seconds() * 3)


def test_a_second_import_watches_from_the_stored_version_and_sees_only_the_changes(k8s_api, world):
    cluster, nodes, _proj, _f = world
    for name in ("a", "b"):
        k8s_api.user_pod(NS, name, {GPU: "1"})
    first = _import(cluster)
    version = ExternalCursor.objects.get(cluster=cluster, kind=CURSOR).value
    assert first["listed"] and first["created"] == 2 and version == k8s_api.version()
    k8s_api.pod_started(NS, "b", nodes[0].name, _ago(minutes=2))
    second = _import(cluster)
    [(_method, path, query)] = [r for r in k8s_api.requests if r[2].get("watch")]
    assert (path, query["resourceVersion"]) == ("/api/v1/pods", [version])
    assert k8s_api.watched == [[("MODIFIED", "b")]]
    assert (second.get("created", 0), second["changed"]) == (0, 1)
    assert ExternalCursor.objects.get(cluster=cluster, kind=CURSOR).value == k8s_api.version()
    assert _job(k8s_api, "a").state == JobState.QUEUED and _job(k8s_api, "b").state == JobState.RUNNING


def test_a_deleted_pod_ends_at_its_finish_or_else_at_the_deletion_observation(k8s_api, world):
    cluster, nodes, _proj, _f = world
    start = _ago(hours=1)
    for name in ("done", "killed"):
        k8s_api.user_pod(NS, name, {GPU: "1"})
        k8s_api.pod_started(NS, name, nodes[0].name, start)
    _import(cluster)
    done, killed = _job(k8s_api, "done"), _job(k8s_api, "killed")
    k8s_api.pod_finished(NS, "done", start + timedelta(minutes=30), exit_code=0)
    k8s_api.remove("pods", "done", NS)
    k8s_api.remove("pods", "killed", NS)  # deleted before its container reported an end
    before = timezone.now()
    _import(cluster)
    done.refresh_from_db()
    killed.refresh_from_db()
    assert (done.state, done.finished_at) == (JobState.SUCCEEDED, start + timedelta(minutes=30))
    assert killed.state == JobState.CANCELLED and killed.finished_at >= before
    last = killed.events.order_by("id").last()
    assert (last.time_source, last.reason) == ("portal", GONE_REASON)


def test_a_410_lists_again_without_duplicates_and_ends_what_went_away_unseen(k8s_api, world):
    cluster, nodes, _proj, _f = world
    for name in ("a", "b", "gone"):
        k8s_api.user_pod(NS, name, {GPU: "1"})
        k8s_api.pod_started(NS, name, nodes[0].name, _ago(minutes=9))
    _import(cluster)
    stale = ExternalCursor.objects.get(cluster=cluster, kind=CURSOR).value
    k8s_api.pod_finished(NS, "a", _ago(minutes=1))
    k8s_api.remove("pods", "gone", NS)
    k8s_api.user_pod(NS, "new", {GPU: "2"})
    k8s_api.compact()  # the history since `stale` is gone
    out = _import(cluster)
    assert out["relisted_after_gone"] and out["created"] == 1
    assert [e[0][0] for e in k8s_api.watched] == ["ERROR"]
    watch_at = next(i for i, r in enumerate(k8s_api.requests) if r[2].get("watch"))
    assert k8s_api.requests[watch_at][2]["resourceVersion"] == [stale]
    assert any(p == "/api/v1/pods" and not q.get("watch") for _m, p, q in k8s_api.requests[watch_at + 1:])
    assert Job.objects.filter(cluster=cluster, kind=JobKind.EXTERNAL).count() == 4  # no duplicate
    assert _job(k8s_api, "a").state == JobState.SUCCEEDED
    assert Job.objects.get(name="gone").state == JobState.CANCELLED
    assert ExternalCursor.objects.get(cluster=cluster, kind=CURSOR).value == k8s_api.version()


def test_a_pod_of_an_unlabelled_namespace_lands_unmapped_until_the_label_maps_it(k8s_api, world):
    cluster, _nodes, proj, _f = world
    k8s_api.namespace("stray")
    k8s_api.user_pod("stray", "x", {GPU: "1"})
    out = _import(cluster)
    assert out["unmapped_sources"] == ["stray"] and out["observed"] == 1
    assert ExternalObservation.objects.filter(source__name="stray").count() == 1
    assert not Job.objects.filter(kind=JobKind.EXTERNAL).exists()
    k8s_api.namespace("stray", {"gpupool.io/project": "p"})
    _import(cluster)
    assert _job(k8s_api, "x", "stray").project == proj
    assert not ExternalObservation.objects.exists()


def test_a_label_never_overwrites_a_mapping_and_an_unknown_code_stays_unmapped(k8s_api, world):
    cluster, _nodes, proj, _f = world
    other = fx.project("q", proj.department)
    k8s_api.namespace(NS, {"gpupool.io/project": "q"})  # relabelled after an admin mapped it to p
    ExternalSource.objects.create(cluster=cluster, kind="k8s_namespace", name=NS, project=proj)
    k8s_api.namespace("typo", {"gpupool.io/project": "no-such-project"})
    counts = sync_namespaces(cluster, KubernetesBackend(**cluster.config))
    assert counts == {"labelled": 2, "mapped": 0, "unknown_project": 1, "label_differs": 1}
    assert ExternalSource.objects.get(name=NS).project == proj != other
    assert ExternalSource.objects.get(name="typo").project is None


def test_portal_pods_and_cpu_only_pods_are_not_external_jobs(k8s_api, world):
    cluster, _nodes, _proj, _f = world
    portal = {"app.kubernetes.io/managed-by": "gpupool", "gpupool.io/name": "gp-7"}
    k8s_api.user_pod(NS, "gp-7", {GPU: "4"}, labels=portal)
    k8s_api.user_pod(NS, "web", {"cpu": "2", "memory": "1Gi"})
    k8s_api.user_pod(NS, "gpu", {GPU: "1"})
    out = _import(cluster)
    assert out["created"] == 1 and not ExternalObservation.objects.exists()
    assert list(Job.objects.filter(kind=JobKind.EXTERNAL).values_list("name", flat=True)) == ["gpu"]
    [query] = [q for _m, p, q in k8s_api.requests if p == "/api/v1/pods"]
    assert query["labelSelector"] == ["app.kubernetes.io/managed-by!=gpupool"]


def test_the_task_is_idempotent(k8s_api, world):
    cluster, nodes, _proj, _f = world
    k8s_api.user_pod(NS, "train", {GPU: "2"})
    k8s_api.pod_started(NS, "train", nodes[0].name, _ago(minutes=3))
    first = import_native_k8s(cluster.pk)  # the Celery task, run in place
    second = import_native_k8s(cluster.pk)
    assert first["pods"]["created"] == 1 and first["quotas"]["created"] == 1
    assert second["pods"].get("created", 0) == second["pods"].get("changed", 0) == 0
    assert second["quotas"] == {"created": 0, "replaced": 0, "unchanged": 1, "deleted": 0}
    assert Job.objects.filter(kind=JobKind.EXTERNAL).count() == 1


# -- ResourceQuota


def _validate(obj: dict) -> None:
    SCHEMA.validate(obj)
    kubernetes_validate.validate(obj, "1.30", strict=True)
    for key, value in obj["spec"]["hard"].items():
        assert key.startswith("requests.")  # the only form Kubernetes accepts for extended resources
        assert parse_quantity(value) == int(value) >= 0


def test_resource_quota_is_q_plus_b_in_whole_devices_and_schema_valid():
    now = timezone.now()
    flavors = (FlavorRef("A100", GPU, Decimal(16)), FlavorRef("H800", GPU, Decimal(8)),
               FlavorRef("T4s", "nvidia.com/t4", Decimal(4), shareable=True),
               FlavorRef("MLU", "cambricon.com/mlu", Decimal(8)))
    quotas = (
        QuotaRef("A100", "project", "p", Limits(Decimal(8), Decimal(4))),
        QuotaRef("H800", "project", "p", Limits(Decimal(2), Decimal(0))),
        QuotaRef("T4s", "project", "p", Limits(Decimal("1.5"), Decimal("0.75"))),
        QuotaRef("MLU", "project", "p", Limits(Decimal(4))),  # no borrow limit: no cap
        QuotaRef("A100", "project", "free", Limits(Decimal(8))),
    )
    snapshot = TreeSnapshot(flavors=flavors, departments=(("D", None),), projects=(("p", "D"), ("free", "D")),
                            quotas=quotas)
    objects = render_resource_quotas(snapshot, now, {"team-p": "p", "team-free": "free", "other": "p"})
    assert [o["metadata"]["namespace"] for o in objects] == ["other", "team-p"]  # "free" has no cap
    quota = objects[1]
    assert quota["metadata"]["name"] == "gpupool-quota"
    assert quota["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpupool"
    # A100 8 + 4 and H800 2 + 0 share nvidia.com/gpu; 1.5 + 0.75 shared T4 → 2 whole devices.
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "14", "requests.nvidia.com/t4": "2"}
    for obj in objects:
        _validate(obj)
    broken = {**quota, "spec": {"hard": {"requests.nvidia.com/gpu": "14"}, "hardd": {}}}
    with pytest.raises(jsonschema.ValidationError):
        SCHEMA.validate(broken)


def test_resource_quotas_are_applied_replaced_on_a_quota_change_and_left_alone_when_equal(k8s_api, world):
    cluster, _nodes, proj, f = world
    sync_namespaces(cluster, KubernetesBackend(**cluster.config))
    foreign = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "team-own"},
               "spec": {"hard": {"pods": "10"}}}
    k8s_api.add("resourcequotas", foreign, NS)
    assert sync_resource_quotas(cluster)["created"] == 1
    stored = copy.deepcopy(k8s_api.get("resourcequotas", "gpupool-quota", NS))
    assert stored["spec"]["hard"] == {"requests.nvidia.com/gpu": "20"}
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        stored["metadata"].pop(key)
    _validate(stored)
    writes = len([m for m, _p in k8s_api.calls() if m != "GET"])
    assert sync_resource_quotas(cluster) == {"created": 0, "replaced": 0, "unchanged": 1, "deleted": 0}
    assert len([m for m, _p in k8s_api.calls() if m != "GET"]) == writes  # equal: no write at all
    node = QuotaNode.objects.get(project=proj, flavor=f)
    node.borrow_limit = Decimal(6)
    node.save()
    assert sync_resource_quotas(cluster)["replaced"] == 1
    stored = k8s_api.get("resourcequotas", "gpupool-quota", NS)
    assert stored["spec"]["hard"] == {"requests.nvidia.com/gpu": "22"}
    node.borrow_limit = None  # no cap any more: the quota goes
    node.save()
    assert sync_resource_quotas(cluster)["deleted"] == 1
    assert k8s_api.get("resourcequotas", "gpupool-quota", NS) is None
    assert k8s_api.get("resourcequotas", "team-own", NS)["spec"]["hard"] == {"pods": "10"}  # not ours


def test_no_resource_quota_where_a_queue_manager_caps_the_cluster(k8s_api, world):
    cluster, _nodes, _proj, _f = world
    cluster.config = {**cluster.config, "scheduler_integration": "kueue"}
    cluster.save()
    sync_namespaces(cluster, KubernetesBackend(**cluster.config))
    calls = len(k8s_api.requests)
    assert "skipped" in sync_resource_quotas(cluster)
    assert len(k8s_api.requests) == calls and k8s_api.get("resourcequotas", "gpupool-quota", NS) is None
