"""The Kubernetes backend: manifests validated offline against the official schemas
(kubernetes-validate, strict), and the backend driven through the official client over real HTTP
against the stand-in API server of :mod:`tests.backends.k8s_standin`. No database."""

from __future__ import annotations

import re
import socket
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import kubernetes_validate
import pytest
from kubernetes.client.rest import ApiException

from jobs.clusters.backends.base import (
    FAILED,
    LOG_CHUNK_BYTES,
    LOST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BackendError,
    Checkpoint,
    EnvVar,
    JobSpec,
    LogTail,
    Mount,
    Slot,
)
from jobs.clusters.backends.k8s_logs import Tail
from jobs.clusters.backends.kubernetes import (
    GPU_MILLI_ANNOTATION,
    KubernetesBackend,
    build_deployment,
    build_ingress,
    build_manifest,
    build_pod,
    build_service,
    build_training_job,
    labels_for,
)
from tests.backends import k8s_standin

pytestmark = pytest.mark.kubernetes

k8s_api = k8s_standin.k8s_api  # the fixture, under this module's name

K8S_VERSION = "1.30"
LABELS = {"job": "42", "project": "pa1", "department": "A1", "user": "alice"}


def make_spec(
    kind: str = "training",
    *,
    job_id: int = 42,
    workers: int = 2,
    gpus: int = 4,
    resource: str = "nvidia.com/gpu",
    milli: int | None = None,
    nodes: tuple[str, ...] = ("gpu-a", "gpu-b"),
    max_runtime: int | None = 3600,
) -> JobSpec:
    placement = tuple(
        tuple(Slot(nodes[w % len(nodes)], g, milli or 1000) for g in range(max(gpus, 1)))
        for w in range(workers)
    )
    return JobSpec(
        job_id=job_id,
        name=f"gp-{job_id}",
        kind=kind,
        image="registry.local/train:1",
        command="python train.py",
        flavor="A100",
        k8s_resource=resource,
        slurm_gres="gpu:a100",
        workers=workers,
        gpus_per_worker=gpus,
        gpu_milli=milli,
        placement=placement,
        max_runtime_seconds=max_runtime,
        labels={**LABELS, "job": str(job_id)},
    )


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


def container(pod_spec: dict) -> dict:
    [c] = pod_spec["containers"]
    return c


def hostnames(pod_spec: dict) -> list[str]:
    [term] = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    [expr] = term["matchExpressions"]
    assert expr["key"] == "kubernetes.io/hostname" and expr["operator"] == "In"
    return expr["values"]


def assert_labels(meta: dict) -> None:
    labels = meta["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "gpupool"
    assert labels["gpupool.io/job"] == "42"
    assert labels["gpupool.io/project"] == "pa1"
    assert labels["gpupool.io/department"] == "A1"


# -- manifests


def test_training_manifest_is_a_valid_indexed_job():
    m = build_training_job(make_spec("training", workers=3, nodes=("gpu-b", "gpu-a")), "ml")
    validate(m)
    assert (m["apiVersion"], m["kind"]) == ("batch/v1", "Job")
    assert m["metadata"]["name"] == "gp-42" and m["metadata"]["namespace"] == "ml"
    assert_labels(m["metadata"])
    assert_labels(m["spec"]["template"]["metadata"])
    s = m["spec"]
    assert s["completionMode"] == "Indexed"
    assert s["completions"] == s["parallelism"] == 3
    assert s["backoffLimit"] == 0
    assert s["activeDeadlineSeconds"] == 3600
    pod = s["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert hostnames(pod) == ["gpu-a", "gpu-b"]
    c = container(pod)
    assert c["image"] == "registry.local/train:1"
    assert c["command"] == ["/bin/sh", "-c", "python train.py"]
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}


def test_inference_manifest_is_a_valid_deployment():
    m = build_deployment(make_spec("inference", workers=2, gpus=1, nodes=("gpu-c",)))
    validate(m)
    assert (m["apiVersion"], m["kind"]) == ("apps/v1", "Deployment")
    assert m["spec"]["replicas"] == 2
    assert_labels(m["metadata"])
    template = m["spec"]["template"]
    assert_labels(template["metadata"])
    # the selector must select the template's pods
    assert m["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert hostnames(template["spec"]) == ["gpu-c"]
    assert "activeDeadlineSeconds" not in template["spec"]
    # a resize that moves pods never starts one beyond the allocation
    assert m["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert container(template["spec"])["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_dev_manifest_is_a_valid_pod():
    m = build_pod(make_spec("dev", workers=1, gpus=2, nodes=("gpu-a",), max_runtime=7200))
    validate(m)
    assert (m["apiVersion"], m["kind"]) == ("v1", "Pod")
    assert_labels(m["metadata"])
    assert m["spec"]["activeDeadlineSeconds"] == 7200
    assert m["spec"]["restartPolicy"] == "Never"
    assert hostnames(m["spec"]) == ["gpu-a"]
    assert container(m["spec"])["resources"]["requests"] == {"nvidia.com/gpu": "2"}


@pytest.mark.parametrize("kind", ["training", "inference", "dev"])
def test_mig_resource(kind):
    m = build_manifest(make_spec(kind, gpus=1, resource="nvidia.com/mig-1g.10gb"))
    validate(m)
    pod = m["spec"]["template"]["spec"] if kind != "dev" else m["spec"]
    assert container(pod)["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}


@pytest.mark.parametrize("kind", ["training", "dev"])
def test_ascend_resource(kind):
    m = build_manifest(make_spec(kind, gpus=8, resource="huawei.com/Ascend910", nodes=("npu-1",)))
    validate(m)
    pod = m["spec"]["template"]["spec"] if kind != "dev" else m["spec"]
    res = container(pod)["resources"]
    assert res["limits"] == res["requests"] == {"huawei.com/Ascend910": "8"}
    assert hostnames(pod) == ["npu-1"]


@pytest.mark.parametrize("kind", ["training", "inference", "dev"])
def test_shared_gpu_milli_request(kind):
    m = build_manifest(make_spec(kind, workers=1, gpus=1, milli=250, nodes=("gpu-a",)))
    validate(m)
    assert m["metadata"]["annotations"] == {GPU_MILLI_ANNOTATION: "250"}
    pod = m["spec"] if kind == "dev" else m["spec"]["template"]["spec"]
    if kind != "dev":
        assert m["spec"]["template"]["metadata"]["annotations"] == {GPU_MILLI_ANNOTATION: "250"}
    assert container(pod)["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_no_runtime_limit_means_no_deadline():
    m = build_training_job(make_spec(max_runtime=None))
    validate(m)
    assert "activeDeadlineSeconds" not in m["spec"]


def test_strict_validation_catches_a_bad_manifest():
    # the validator really is strict: an unknown field fails
    m = build_pod(make_spec("dev", workers=1))
    m["spec"]["bogusField"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(m)


# -- the backend against the stand-in


@pytest.fixture
def backend(k8s_api):
    return KubernetesBackend(host=k8s_api.url, namespace="gpupool-jobs", token="tok-123", cluster="ignored")


JOBS = "/apis/batch/v1/namespaces/gpupool-jobs/jobs"


def test_submit_is_idempotent(k8s_api, backend):
    spec = make_spec("training", workers=1)  # no rendezvous Service (test_k8s_rendezvous.py)
    assert backend.submit(spec) == "gp-42"
    assert k8s_api.calls() == [("GET", f"{JOBS}/gp-42"), ("POST", JOBS)]
    assert backend.submit(spec) == "gp-42"
    assert k8s_api.calls() == [("GET", f"{JOBS}/gp-42"), ("POST", JOBS), ("GET", f"{JOBS}/gp-42")]
    stored = k8s_api.get("jobs", "gp-42")
    assert stored["spec"]["completionMode"] == "Indexed" and stored["metadata"]["uid"]
    assert [k for k in k8s_api.objects] == [("jobs", "gpupool-jobs", "gp-42")]


def test_submit_after_a_concurrent_create_returns_the_existing_object(k8s_api, backend):
    # The object appears between our GET (404) and our POST: the POST's 409 means "already there".
    spec = make_spec("dev", workers=1)
    k8s_api.add("pods", build_pod(spec))
    original = backend.core.read_namespaced_pod

    def read_missing(*args, **kwargs):
        from kubernetes.client.rest import ApiException

        raise ApiException(status=404, reason="Not Found")

    backend.core.read_namespaced_pod = read_missing
    try:
        assert backend.submit(spec) == "gp-42"
    finally:
        backend.core.read_namespaced_pod = original
    assert k8s_api.calls("POST") == [("POST", "/api/v1/namespaces/gpupool-jobs/pods")]


def test_submit_sends_the_bearer_token_and_kinds_land_in_their_apis(k8s_api, backend):
    backend.submit(make_spec("inference", job_id=1))
    backend.submit(make_spec("dev", job_id=2, workers=1))
    assert k8s_api.get("deployments", "gp-1")["spec"]["replicas"] == 2
    assert k8s_api.get("pods", "gp-2")["kind"] == "Pod"
    assert ("POST", "/apis/apps/v1/namespaces/gpupool-jobs/deployments") in k8s_api.calls()
    assert set(k8s_api.authorization) == {"Bearer tok-123"}


def _pod(name: str, owner: str, phase: str, node: str, **status) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/managed-by": "gpupool", "gpupool.io/name": owner},
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": phase, **status},
    }


def test_status_maps_phases(k8s_api, backend):
    for i in (1, 2, 3, 4):
        backend.submit(make_spec("training", job_id=i))
    k8s_api.job_succeeded("gp-1")
    k8s_api.job_failed("gp-2", message="Job has reached the specified backoff limit")
    k8s_api.set_status("jobs", "gp-3", {"active": 2, "ready": 2, "startTime": "2026-01-01T00:00:00Z"})
    k8s_api.add("pods", _pod("gp-3-0-abcde", "gp-3", "Running", "gpu-a"))
    k8s_api.add("pods", _pod("gp-3-1-fghij", "gp-3", "Running", "gpu-b"))
    seen = len(k8s_api.requests)
    got = backend.status(["gp-1", "gp-2", "gp-3", "gp-4", "gp-99"])
    assert got["gp-1"].phase == SUCCEEDED and got["gp-1"].finished_at is not None
    assert got["gp-2"].phase == FAILED and "backoff limit" in got["gp-2"].message
    assert not got["gp-2"].node_failure
    assert got["gp-3"].phase == RUNNING and got["gp-3"].nodes == ("gpu-a", "gpu-b")
    assert got["gp-3"].started_at.year == 2026
    assert got["gp-4"].phase == PENDING
    assert got["gp-99"].phase == LOST
    # one list per kind, with the managed-by selector
    # one list call per kind, each with the managed-by selector
    assert [(m, p, q.get("labelSelector")) for m, p, q in k8s_api.requests[seen:]] == [
        ("GET", JOBS, ["app.kubernetes.io/managed-by=gpupool"]),
        ("GET", DEPLOYMENTS, ["app.kubernetes.io/managed-by=gpupool"]),
        ("GET", "/api/v1/namespaces/gpupool-jobs/pods", ["app.kubernetes.io/managed-by=gpupool"]),
    ]


def test_status_times_are_the_containers_start_and_finish(k8s_api, backend):
    # The Job object was created (and its controller's startTime set) long before the image was
    # pulled: the GPUs are used from the first container's start to the last one's finish.
    backend.submit(make_spec("training", job_id=20))
    t0 = datetime(2026, 1, 1, 0, 0, tzinfo=UTC)
    k8s_api.set_status("jobs", "gp-20", {"active": 2, "startTime": "2025-12-31T23:00:00Z"})
    k8s_api.pod_running("gp-20-0-aaaaa", "gp-20", "gpu-a", t0 + timedelta(seconds=40))
    k8s_api.pod_running("gp-20-1-bbbbb", "gp-20", "gpu-b", t0 + timedelta(seconds=30))
    running = backend.status(["gp-20"])["gp-20"]
    assert (running.phase, running.started_at, running.time_source) == (
        RUNNING,
        t0 + timedelta(seconds=30),
        "kubernetes",
    )
    s, h = timedelta(seconds=1), timedelta(hours=1)
    k8s_api.pod_terminated("gp-20-0-aaaaa", "gp-20", "gpu-a", t0 + 40 * s, t0 + h)
    k8s_api.pod_terminated("gp-20-1-bbbbb", "gp-20", "gpu-b", t0 + 30 * s, t0 + 2 * h)
    k8s_api.job_succeeded("gp-20")  # completionTime: now, when the controller noticed
    ended = backend.status(["gp-20"])["gp-20"]
    assert (ended.phase, ended.started_at, ended.finished_at) == (
        SUCCEEDED,
        t0 + timedelta(seconds=30),
        t0 + timedelta(hours=2),
    )
    # A dev pod: its container's times, not the pod's scheduling time.
    backend.submit(make_spec("dev", job_id=21, workers=1))
    k8s_api.pod_terminated("gp-21", "gp-21", "gpu-a", t0, t0 + timedelta(minutes=5), exit_code=2)
    dev = backend.status(["gp-21"])["gp-21"]
    assert (dev.phase, dev.started_at, dev.finished_at, dev.exit_code) == (
        FAILED,
        t0,
        t0 + timedelta(minutes=5),
        2,
    )


def test_status_node_failure(k8s_api, backend):
    backend.submit(make_spec("training", job_id=5))
    k8s_api.job_failed("gp-5", reason="BackoffLimitExceeded")
    k8s_api.add(
        "pods",
        _pod(
            "gp-5-0-xxxxx",
            "gp-5",
            "Failed",
            "gpu-a",
            reason="NodeLost",
            message="node gpu-a which was running pod is unresponsive",
        ),
    )
    backend.submit(make_spec("dev", job_id=6, workers=1))
    k8s_api.set_status("pods", "gp-6", {"phase": "Failed", "reason": "Evicted", "message": "node drained"})
    backend.submit(make_spec("dev", job_id=7, workers=1))
    k8s_api.set_status(
        "pods",
        "gp-7",
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "x",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 3, "finishedAt": "2026-01-01T01:00:00Z"}},
                }
            ],
        },
    )
    backend.submit(make_spec("dev", job_id=8, workers=1))
    k8s_api.set_status("pods", "gp-8", {"phase": "Unknown"})
    got = backend.status(["gp-5", "gp-6", "gp-7", "gp-8"])
    assert got["gp-5"].phase == FAILED and got["gp-5"].node_failure and got["gp-5"].nodes == ("gpu-a",)
    assert got["gp-6"].phase == FAILED and got["gp-6"].node_failure
    assert got["gp-7"].phase == FAILED and not got["gp-7"].node_failure and got["gp-7"].exit_code == 3
    assert got["gp-8"].phase == LOST


def test_status_of_deployments_and_dev_pods(k8s_api, backend):
    backend.submit(make_spec("inference", job_id=10, workers=2))
    backend.submit(make_spec("inference", job_id=11, workers=2))
    backend.submit(make_spec("dev", job_id=12, workers=1))
    backend.submit(make_spec("dev", job_id=13, workers=1))
    k8s_api.set_status(
        "deployments",
        "gp-10",
        {
            "replicas": 2,
            "availableReplicas": 2,
            "conditions": [
                {"type": "Available", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}
            ],
        },
    )
    k8s_api.set_status("deployments", "gp-11", {"replicas": 2, "availableReplicas": 1})
    k8s_api.set_status("pods", "gp-12", {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"})
    k8s_api.set_status("pods", "gp-13", {"phase": "Succeeded"})
    got = backend.status(["gp-10", "gp-11", "gp-12", "gp-13"])
    assert [got[n].phase for n in ("gp-10", "gp-11", "gp-12", "gp-13")] == [
        RUNNING,
        PENDING,
        RUNNING,
        SUCCEEDED,
    ]


def test_cancel_deletes_and_second_cancel_is_a_noop(k8s_api, backend):
    backend.submit(make_spec("training"))
    backend.cancel("gp-42", grace_seconds=30)
    assert k8s_api.get("jobs", "gp-42") is None
    deletes = [(p, q) for m, p, q in k8s_api.requests if m == "DELETE"]
    assert deletes[0][0] == f"{JOBS}/gp-42"
    assert deletes[0][1]["propagationPolicy"] == ["Background"]
    assert deletes[0][1]["gracePeriodSeconds"] == ["30"]
    backend.cancel("gp-42")  # already gone: no error
    assert backend.status(["gp-42"])["gp-42"].phase == LOST


def test_list_nodes(k8s_api, backend):
    ready = [{"type": "Ready", "status": "True"}]

    def node(name, capacity, labels=None, conditions=ready, unschedulable=None):
        return {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": unschedulable} if unschedulable else {},
            "status": {"capacity": {"cpu": "64", "memory": "512Gi", **capacity}, "conditions": conditions},
        }

    k8s_api.nodes = [
        node(
            "gpu-a",
            {"nvidia.com/gpu": "8"},
            {"topology.kubernetes.io/zone": "z1", "gpupool.io/spine": "s1", "gpupool.io/leaf": "l1"},
        ),
        node("gpu-b", {"nvidia.com/gpu": "8"}, unschedulable=True, conditions=[
            *ready, {"type": "DiskPressure", "status": "True", "message": "ephemeral storage low"}]),
        node("gpu-c", {"nvidia.com/gpu": "4"}, conditions=[{"type": "Ready", "status": "Unknown"}]),
        node("mig-a", {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}),
        node("npu-1", {"huawei.com/Ascend910": "8"}),
        node("cpu-1", {}),
    ]
    by_name = {n.name: n for n in backend.list_nodes()}
    assert set(by_name) == {"gpu-a", "gpu-b", "gpu-c", "mig-a", "npu-1", "cpu-1"}
    # Without accelerators: a CPU node, its units its cores (capacity here: no allocatable given).
    assert (by_name["cpu-1"].flavor_hint, by_name["cpu-1"].gpus) == ("cpu", 64)
    a = by_name["gpu-a"]
    assert (a.gpus, a.flavor_hint, a.state, a.zone, a.spine, a.leaf) == (
        8,
        "nvidia.com/gpu",
        "ready",
        "z1",
        "s1",
        "l1",
    )
    assert by_name["gpu-b"].state == "cordoned"
    assert by_name["gpu-c"].state == "down"
    # Node conditions are health signals (jobs.clusters.health), in Kubernetes' words.
    assert by_name["gpu-a"].problem == ""
    assert by_name["gpu-b"].problem == "Kubernetes DiskPressure=True: ephemeral storage low"
    assert by_name["gpu-c"].problem == "Kubernetes Ready=Unknown"
    assert (by_name["mig-a"].flavor_hint, by_name["mig-a"].gpus) == ("nvidia.com/mig-1g.10gb", 7)
    assert (by_name["npu-1"].flavor_hint, by_name["npu-1"].gpus) == ("huawei.com/Ascend910", 8)


def test_health(k8s_api, backend):
    assert backend.health() == "ok"
    assert k8s_api.calls()[-1][1].rstrip("/") == "/version"


def test_server_errors_raise_backend_error(k8s_api, backend):
    k8s_api.fail_with = 503
    with pytest.raises(BackendError, match="503"):
        backend.submit(make_spec())
    with pytest.raises(BackendError):
        backend.status(["gp-42"])
    assert backend.health() != "ok"


def test_connection_refused_raises_backend_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    dead = KubernetesBackend(host=f"http://127.0.0.1:{port}", token="t")
    with pytest.raises(BackendError, match="unreachable"):
        dead.submit(make_spec())
    with pytest.raises(BackendError):
        dead.list_nodes()
    with pytest.raises(BackendError):
        dead.cancel("gp-1")
    assert dead.health() != "ok"


def test_kubeconfig(tmp_path, k8s_api):
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: '{k8s_api.url}'}}}}]\n"
        "users: [{name: u, user: {token: kc-token}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    backend = KubernetesBackend(kubeconfig=str(path), namespace="gpupool-jobs")
    assert backend.health() == "ok"
    assert backend.list_nodes() == []
    assert set(k8s_api.authorization) == {"Bearer kc-token"}


# -- resizing (the scheduler grew the job, or its owner scaled it)

DEPLOYMENTS = "/apis/apps/v1/namespaces/gpupool-jobs/deployments"


def test_resize_patches_the_deployments_replicas(k8s_api, backend):
    backend.submit(make_spec("inference", workers=2, gpus=1, nodes=("gpu-a", "gpu-b")))
    uid = k8s_api.get("deployments", "gp-42")["metadata"]["uid"]
    backend.resize(make_spec("inference", workers=4, gpus=1, nodes=("gpu-a", "gpu-b")))
    stored = k8s_api.get("deployments", "gp-42")
    assert stored["spec"]["replicas"] == 4 and stored["metadata"]["uid"] == uid  # patched in place
    assert hostnames(stored["spec"]["template"]["spec"]) == ["gpu-a", "gpu-b"]  # same nodes: no rollout
    [(_, path, _)] = [r for r in k8s_api.requests if r[0] == "PATCH"]
    assert path == f"{DEPLOYMENTS}/gp-42"
    calls = len(k8s_api.requests)
    backend.resize(make_spec("inference", workers=4, gpus=1, nodes=("gpu-a", "gpu-b")))
    assert [m for m, _ in k8s_api.calls()[calls:]] == ["GET"]  # already that size


def test_cordon_and_uncordon_patch_spec_unschedulable_with_the_reason(k8s_api, backend):
    ready = [{"type": "Ready", "status": "True"}]
    k8s_api.nodes = [
        {
            "metadata": {"name": name, "labels": {}},
            "spec": {},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "conditions": ready},
        }
        for name in ("gpu-a", "gpu-b")
    ]
    backend.set_node_schedulable("gpu-a", False, reason="XID 79 on GPU 3")
    states = {n.name: n.state for n in backend.list_nodes()}
    assert states == {"gpu-a": "cordoned", "gpu-b": "ready"}
    stored = k8s_api.nodes[0]
    assert stored["spec"]["unschedulable"] is True
    assert stored["metadata"]["annotations"] == {"gpupool.io/cordon-reason": "XID 79 on GPU 3"}
    assert stored["status"]["capacity"] == {"nvidia.com/gpu": "8"}  # a merge patch keeps the rest
    patches = [p for m, p, _q in k8s_api.requests if m == "PATCH"]
    assert patches == ["/api/v1/nodes/gpu-a"]
    backend.set_node_schedulable("gpu-a", False, reason="XID 79 on GPU 3")  # idempotent
    backend.set_node_schedulable("gpu-a", True)
    assert {n.name: n.state for n in backend.list_nodes()}["gpu-a"] == "ready"
    assert "unschedulable" not in k8s_api.nodes[0]["spec"]
    assert k8s_api.nodes[0]["metadata"]["annotations"] == {}
    with pytest.raises(BackendError, match="404"):
        backend.set_node_schedulable("gpu-zz", False, reason="no such node")


def test_resize_onto_new_nodes_patches_the_affinity_too(k8s_api, backend):
    backend.submit(make_spec("inference", workers=2, gpus=1, nodes=("gpu-a",)))
    backend.resize(make_spec("inference", workers=3, gpus=1, nodes=("gpu-a", "gpu-c")))
    stored = k8s_api.get("deployments", "gp-42")
    assert stored["spec"]["replicas"] == 3
    assert hostnames(stored["spec"]["template"]["spec"]) == ["gpu-a", "gpu-c"]
    assert container(stored["spec"]["template"]["spec"])["image"] == "registry.local/train:1"  # merged
    stored.pop("status", None)
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        stored["metadata"].pop(key)
    validate(stored)  # still a valid Deployment after the merge patch
    backend.resize(make_spec("inference", workers=1, gpus=1, nodes=("gpu-c",)))  # scale down
    stored = k8s_api.get("deployments", "gp-42")
    assert stored["spec"]["replicas"] == 1 and hostnames(stored["spec"]["template"]["spec"]) == ["gpu-c"]


def test_resize_restarts_a_training_job_and_leaves_finished_ones_alone(k8s_api, backend):
    backend.submit(make_spec("training", workers=2, gpus=4, nodes=("gpu-a",)))
    uid = k8s_api.get("jobs", "gp-42")["metadata"]["uid"]
    backend.resize(make_spec("training", workers=3, gpus=4, nodes=("gpu-a", "gpu-b")))
    stored = k8s_api.get("jobs", "gp-42")
    assert stored["metadata"]["uid"] != uid  # deleted and created again: the template is immutable
    assert stored["spec"]["completions"] == stored["spec"]["parallelism"] == 3
    assert hostnames(stored["spec"]["template"]["spec"]) == ["gpu-a", "gpu-b"]
    k8s_api.job_succeeded("gp-42")
    backend.resize(make_spec("training", workers=1, gpus=4, nodes=("gpu-a",)))
    assert k8s_api.get("jobs", "gp-42")["spec"]["parallelism"] == 3  # finished: not restarted


def test_resize_of_a_missing_deployment_or_a_dev_pod_is_refused(k8s_api, backend):
    with pytest.raises(BackendError, match="does not exist"):
        backend.resize(make_spec("inference"))
    with pytest.raises(BackendError, match="one worker"):
        backend.resize(make_spec("dev", workers=1))


def test_the_stand_in_refuses_a_json_patch_content_type_with_an_object_body(k8s_api, backend):
    # What the client would send without _content_type: the real API server refuses it too.
    backend.submit(make_spec("inference"))
    with pytest.raises(BackendError, match="415"):
        backend._call(
            backend.apps.patch_namespaced_deployment, "gp-42", "gpupool-jobs", {"spec": {"replicas": 1}}
        )


# -- the working environment (DESIGN §13): storage, env, pull secret, checkpoint

NFS = Mount("datasets", "nfs", "/data", nfs_server="nfs.local", nfs_path="/exports/pa1", read_only=True)
HOST = Mount("scratch", "hostpath", "/scratch", host_path="/gpfs/pa1/scratch")
PVC = Mount("models", "pvc", "/models", claim_name="pa1-models", read_only=True)
CHECKPOINTS = Mount(
    "ckpt", "nfs", "/ckpt", host_path="/gpfs/ckpt", nfs_server="nfs.local", nfs_path="/exports/ckpt"
)
HOSTILE = 'say "hi"\nto $(HOME) and $$ $'
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def workenv_spec(kind: str = "training", **kw) -> JobSpec:
    spec = make_spec(kind, workers=1 if kind == "dev" else 2, **kw)
    return replace(
        spec,
        mounts=(NFS, HOST, PVC),
        env=(EnvVar("LR", "0.1"), EnvVar("HF_TOKEN", secret="pa1-tokens", key="hf"), EnvVar("NOTE", HOSTILE)),
        checkpoint=Checkpoint(CHECKPOINTS, "pa1/42"),
        pull_secret="pa1-pull",
    )


def pod_of(manifest: dict) -> dict:
    if manifest["kind"] == "Pod":
        return manifest["spec"]
    if manifest["apiVersion"].startswith("batch.volcano.sh"):
        return manifest["spec"]["tasks"][0]["template"]["spec"]
    return manifest["spec"]["template"]["spec"]


def expand(value: str, env: dict[str, str]) -> str:
    """What the kubelet makes of an env value: Kubernetes' ``$(VAR)`` expansion
    (third_party/forked/golang/expansion/expand.go), ported line for line."""
    out, checkpoint, cursor = [], 0, 0
    while cursor < len(value):
        if value[cursor] == "$" and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            rest = value[cursor + 1 :]
            if rest[0] == "$":
                read, advance = "$", 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    read, advance = "$(", 1
                else:
                    name = rest[1:close]
                    read, advance = env.get(name, f"$({name})"), close + 1
            else:
                read, advance = "$" + rest[0], 1
            out.append(read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + value[checkpoint:]


def test_expand_is_kubernetes_expansion():
    assert expand("$(A)-$$(A)-$$-$x-$", {"A": "1"}) == "1-$(A)-$-$x-$"


@pytest.mark.parametrize("kind", ["training", "inference", "dev"])
def test_every_builder_mounts_the_storage_and_the_checkpoint(kind):
    m = build_manifest(workenv_spec(kind))
    validate(m)
    pod = pod_of(m)
    assert pod["volumes"] == [
        {"name": "datasets", "nfs": {"server": "nfs.local", "path": "/exports/pa1", "readOnly": True}},
        {"name": "scratch", "hostPath": {"path": "/gpfs/pa1/scratch", "type": "Directory"}},
        {"name": "models", "persistentVolumeClaim": {"claimName": "pa1-models", "readOnly": True}},
        {
            "name": "ckpt-checkpoint",
            "nfs": {"server": "nfs.local", "path": "/exports/ckpt", "readOnly": False},
        },
    ]
    assert container(pod)["volumeMounts"] == [
        {"name": "datasets", "mountPath": "/data", "readOnly": True},
        {"name": "scratch", "mountPath": "/scratch", "readOnly": False},
        {"name": "models", "mountPath": "/models", "readOnly": True},
        # the kubelet creates a missing subPath: the directory exists when the job starts
        {"name": "ckpt-checkpoint", "mountPath": "/ckpt/pa1/42", "readOnly": False, "subPath": "pa1/42"},
    ]
    assert pod["imagePullSecrets"] == [{"name": "pa1-pull"}]


@pytest.mark.parametrize("kind", ["training", "inference", "dev"])
def test_every_builder_passes_the_env_and_secret_references(kind):
    m = build_manifest(workenv_spec(kind))
    env = container(pod_of(m))["env"]
    assert env[:3] == [
        {"name": "GPUPOOL_JOB_ID", "value": "42"},
        {"name": "GPUPOOL_WORKERS", "value": "1" if kind == "dev" else "2"},
        {"name": "GPUPOOL_CHECKPOINT_DIR", "value": "/ckpt/pa1/42"},
    ]
    assert env[3:5] == [
        {"name": "LR", "value": "0.1"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "pa1-tokens", "key": "hf"}}},
    ]
    [note] = [e for e in env if e["name"] == "NOTE"]
    assert note["value"] == 'say "hi"\nto $$(HOME) and $$$$ $$'
    assert expand(note["value"], {"HOME": "/root", "LR": "0.1"}) == HOSTILE  # what the container sees


def test_a_job_variable_never_replaces_the_portals():
    spec = replace(workenv_spec("dev"), env=(EnvVar("GPUPOOL_JOB_ID", "7"), EnvVar("X", "1")))
    env = container(pod_of(build_manifest(spec)))["env"]
    assert [e["name"] for e in env] == ["GPUPOOL_JOB_ID", "GPUPOOL_WORKERS", "GPUPOOL_CHECKPOINT_DIR", "X"]
    assert env[0]["value"] == "42"


def test_a_checkpoint_on_a_mounted_writable_storage_shares_its_volume():
    scratch_ckpt = Checkpoint(HOST, "ckpt/42")
    spec = replace(make_spec("dev", workers=1), mounts=(HOST,), checkpoint=scratch_ckpt)
    m = build_manifest(spec)
    validate(m)
    pod = pod_of(m)
    assert [v["name"] for v in pod["volumes"]] == ["scratch"]
    assert container(pod)["volumeMounts"][1] == {
        "name": "scratch",
        "mountPath": "/scratch/ckpt/42",
        "readOnly": False,
        "subPath": "ckpt/42",
    }
    # the same storage mounted read-only: the checkpoint gets a writable volume of its own
    read_only = replace(HOST, read_only=True)
    pod = pod_of(build_manifest(replace(spec, mounts=(read_only,), checkpoint=Checkpoint(read_only, "c"))))
    assert [v["name"] for v in pod["volumes"]] == ["scratch", "scratch-checkpoint"]
    assert [m["readOnly"] for m in container(pod)["volumeMounts"]] == [True, False]


def test_no_working_environment_adds_nothing():
    pod = pod_of(build_manifest(make_spec("dev", workers=1)))
    assert "volumes" not in pod and "imagePullSecrets" not in pod and "volumeMounts" not in container(pod)
    assert [e["name"] for e in container(pod)["env"]] == ["GPUPOOL_JOB_ID", "GPUPOOL_WORKERS"]


def test_odd_storage_names_give_valid_unique_volume_names():
    names = ["Data Set/ü 1", "data-set-1", "data set 1", "---", "", "x" * 100, "x" * 100, "ÄÖÜ"]
    mounts = tuple(replace(HOST, name=n, mount_path=f"/m{i}") for i, n in enumerate(names))
    m = build_manifest(replace(make_spec("dev", workers=1), mounts=mounts))
    validate(m)
    volumes = [v["name"] for v in pod_of(m)["volumes"]]
    assert len(set(volumes)) == len(names)
    assert all(DNS_LABEL.match(v) and len(v) <= 63 for v in volumes), volumes
    assert volumes[:3] == ["data-set-1", "data-set-1-2", "data-set-1-3"]


def test_the_stand_in_keeps_a_hostile_env_value_literal(k8s_api, backend):
    backend.submit(workenv_spec("dev"))
    env = container(k8s_api.get("pods", "gp-42")["spec"])["env"]
    [note] = [e for e in env if e["name"] == "NOTE"]
    assert expand(note["value"], {"HOME": "/root"}) == HOSTILE


# -- a dev job's port: Service + Ingress behind the portal's sign-in

PORTAL = "https://portal.example.org"
DEV_CONFIG = {"ingress_domain": "dev.example.org", "portal_url": PORTAL + "/", "ingress_class": "nginx-dev"}


def dev_spec(port: int = 8888) -> JobSpec:
    return replace(make_spec("dev", workers=1, nodes=("gpu-a",)), expose_port=port)


def test_service_is_valid_and_selects_the_dev_pod():
    spec = dev_spec()
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "gp-42", "uid": "u-1"}
    s = build_service(spec, "ml", labels=labels_for(spec), owner=owner)
    validate(s)
    assert (s["apiVersion"], s["kind"], s["metadata"]["name"], s["metadata"]["namespace"]) == (
        "v1",
        "Service",
        "gp-42",
        "ml",
    )
    assert s["metadata"]["ownerReferences"] == [owner]
    assert s["spec"]["type"] == "ClusterIP"
    assert s["spec"]["selector"] == {"gpupool.io/name": "gp-42"}
    assert s["spec"]["selector"].items() <= build_pod(spec)["metadata"]["labels"].items()
    assert s["spec"]["ports"] == [{"name": "dev", "protocol": "TCP", "port": 8888, "targetPort": 8888}]


def test_ingress_is_valid_and_authenticates_through_the_portal():
    spec = dev_spec()
    i = build_ingress(
        spec,
        "ml",
        labels=labels_for(spec),
        domain="dev.example.org",
        portal_url=PORTAL + "/",
        ingress_class="nginx",
        tls_secret="wildcard-dev",
    )
    validate(i)
    assert (i["apiVersion"], i["kind"]) == ("networking.k8s.io/v1", "Ingress")
    assert i["metadata"]["annotations"] == {
        "nginx.ingress.kubernetes.io/auth-url": f"{PORTAL}/jobs/42/access/auth/",
        "nginx.ingress.kubernetes.io/auth-signin": f"{PORTAL}/accounts/login/?next=https://$host$escaped_request_uri",
    }
    assert i["spec"]["ingressClassName"] == "nginx"
    [rule] = i["spec"]["rules"]
    assert rule["host"] == "gp-42.dev.example.org"
    [path] = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    assert path["backend"] == {"service": {"name": "gp-42", "port": {"number": 8888}}}
    assert i["spec"]["tls"] == [{"hosts": ["gp-42.dev.example.org"], "secretName": "wildcard-dev"}]
    with pytest.raises(ValueError, match="portal_url"):
        build_ingress(spec, "ml", labels={}, domain="dev.example.org", portal_url="")


def test_an_ingress_domain_without_the_portal_is_refused(k8s_api):
    with pytest.raises(ValueError, match="portal_url"):
        KubernetesBackend(host=k8s_api.url, ingress_domain="dev.example.org")


@pytest.fixture
def dev_backend(k8s_api):
    return KubernetesBackend(host=k8s_api.url, namespace="gpupool-jobs", token="t", **DEV_CONFIG)


def test_submit_of_a_dev_port_creates_pod_service_and_ingress_once(k8s_api, dev_backend):
    assert dev_backend.submit(dev_spec()) == "gp-42"
    pod, service, ingress = (k8s_api.get(r, "gp-42") for r in ("pods", "services", "ingresses"))
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "gp-42", "uid": pod["metadata"]["uid"]}
    assert service["metadata"]["ownerReferences"] == [owner]
    assert ingress["metadata"]["ownerReferences"] == [owner]
    assert service["spec"]["clusterIP"]  # allocated by the API server
    assert ingress["spec"]["ingressClassName"] == "nginx-dev"
    assert ingress["spec"]["rules"][0]["host"] == "gp-42.dev.example.org"
    assert "tls" not in ingress["spec"]  # the controller's default certificate serves it
    assert k8s_api.calls("POST") == [
        ("POST", "/api/v1/namespaces/gpupool-jobs/pods"),
        ("POST", "/api/v1/namespaces/gpupool-jobs/services"),
        ("POST", "/apis/networking.k8s.io/v1/namespaces/gpupool-jobs/ingresses"),
    ]
    uids = {key: obj["metadata"]["uid"] for key, obj in k8s_api.objects.items()}
    assert dev_backend.submit(dev_spec()) == "gp-42"  # a retried dispatch
    assert len(k8s_api.calls("POST")) == 3
    assert {key: obj["metadata"]["uid"] for key, obj in k8s_api.objects.items()} == uids


def test_cancel_deletes_the_dev_pod_service_and_ingress(k8s_api, dev_backend):
    dev_backend.submit(dev_spec())
    dev_backend.cancel("gp-42")
    assert list(k8s_api.objects) == []
    dev_backend.cancel("gp-42")  # all gone already: no error


def test_submit_recreates_a_missing_service(k8s_api, dev_backend):
    dev_backend.submit(dev_spec())
    k8s_api.remove("services", "gp-42")
    dev_backend.submit(dev_spec())
    assert k8s_api.get("services", "gp-42")["spec"]["ports"][0]["port"] == 8888


def test_jobs_without_a_port_get_no_service(k8s_api, dev_backend):
    dev_backend.submit(make_spec("dev", workers=1))
    dev_backend.submit(replace(make_spec("inference", job_id=43), expose_port=80))  # ports are for dev jobs
    assert {r for r, _, _ in k8s_api.objects} == {"pods", "deployments"}


def test_access_is_the_ingress_url(dev_backend):
    got = dev_backend.access("gp-42", 8888, nodes=("gpu-a",), user="alice")
    assert got.url == "https://gp-42.dev.example.org/" and not got.command


def test_without_an_ingress_domain_only_the_service_and_a_port_forward(k8s_api, backend):
    backend.submit(dev_spec(port=22))
    assert {r for r, _, _ in k8s_api.objects} == {"pods", "services"}
    got = backend.access("gp-42", 22, nodes=("gpu-a",), user="alice")
    assert got.command == "kubectl -n gpupool-jobs port-forward pod/gp-42 22" and not got.url
    assert "127.0.0.1:22" in got.note


# -- logs, through the official client


def running_dev(k8s_api, backend, job_id: int = 42) -> str:
    spec = make_spec("dev", job_id=job_id, workers=1, nodes=("gpu-a",))
    backend.submit(spec)
    k8s_api.pod_started("gpupool-jobs", spec.name, "gpu-a", datetime(2026, 1, 1, tzinfo=UTC))
    return spec.name


def three_mb_log() -> bytes:
    return b"".join(b"step %07d loss 0.%06d\n" % (i, i) for i in range(3 * 1024 * 1024 // 27 + 1))


def test_log_tail_of_a_long_log_is_its_end_within_max_bytes(k8s_api, backend):
    name = running_dev(k8s_api, backend)
    log = three_mb_log()
    assert len(log) > 3 * 1024 * 1024
    k8s_api.append_log(name, log)
    tail = backend.log_tail(name, max_bytes=10_000)
    assert tail.truncated and not tail.missing
    data = tail.text.encode()
    assert len(data) == 10_000 and log.endswith(data)  # the last max_bytes, as `tail -c` has them
    [(_, path, query)] = [r for r in k8s_api.requests if r[1].endswith("/log")]
    assert path == "/api/v1/namespaces/gpupool-jobs/pods/gp-42/log"
    assert query["container"] == ["main"] and int(query["tailLines"][0]) < 10_000  # not the whole log


def test_log_tail_of_a_short_log_is_all_of_it(k8s_api, backend):
    name = running_dev(k8s_api, backend)
    k8s_api.append_log(name, "épo 1\népo 2\nno newline")
    tail = backend.log_tail(name, max_bytes=4096)
    assert (tail.text, tail.truncated, tail.missing) == ("épo 1\népo 2\nno newline", False, "")


def test_log_stream_is_the_whole_log_in_bounded_chunks(k8s_api, backend):
    name = running_dev(k8s_api, backend)
    log = three_mb_log()
    k8s_api.append_log(name, log)
    chunks = list(backend.log_stream(name))
    assert b"".join(chunks) == log
    assert len(chunks) >= len(log) // LOG_CHUNK_BYTES and max(map(len, chunks)) <= LOG_CHUNK_BYTES


def test_the_log_is_the_first_workers(k8s_api, backend):
    backend.submit(make_spec("training", job_id=7))
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for index in ("1", "0"):
        pod = _pod(f"gp-7-{index}-abcde", "gp-7", "Running", f"gpu-{index}")
        pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] = index
        k8s_api.add("pods", pod)
        k8s_api.pod_started("gpupool-jobs", pod["metadata"]["name"], f"gpu-{index}", t0)
        k8s_api.append_log(pod["metadata"]["name"], f"worker {index}\n")
    assert backend.log_tail("gp-7", max_bytes=100).text == "worker 0\n"
    assert b"".join(backend.log_stream("gp-7")) == b"worker 0\n"


def test_log_missing_reasons(k8s_api, backend):
    backend.submit(make_spec("training", job_id=1))  # the Job exists, no pod yet
    assert backend.log_tail("gp-1", max_bytes=100).missing == "the pod has not been scheduled"
    backend.submit(make_spec("dev", job_id=2, workers=1))  # pending, not on a node
    assert backend.log_tail("gp-2", max_bytes=100).missing == "the pod has not been scheduled"
    k8s_api.pod_waiting("gpupool-jobs", "gp-2", "gpu-a")  # bound, the image being pulled
    assert backend.log_tail("gp-2", max_bytes=100).missing == "container not started: ContainerCreating"
    name = running_dev(k8s_api, backend, job_id=3)
    k8s_api.append_log(name, "bye\n")
    backend.cancel(name)
    assert backend.log_tail(name, max_bytes=100) == LogTail(
        "", missing="the pod was deleted: its log went with it"
    )
    with pytest.raises(BackendError, match="the pod was deleted"):
        backend.log_stream(name)
    with pytest.raises(BackendError, match="container not started"):
        backend.log_stream("gp-2")


def test_log_missing_when_the_container_waits_although_the_pod_said_running(k8s_api, backend):
    # The pod was listed running, then its container restarted: the API server's 400 is the reason.
    name = running_dev(k8s_api, backend)
    listed = backend.core.list_namespaced_pod(backend.namespace)
    k8s_api.pod_waiting("gpupool-jobs", name, "gpu-a", reason="CrashLoopBackOff")
    original = backend.core.list_namespaced_pod
    backend.core.list_namespaced_pod = lambda *a, **kw: listed
    try:
        tail = backend.log_tail(name, max_bytes=100)
    finally:
        backend.core.list_namespaced_pod = original
    assert (
        tail.missing
        == 'container not started: container "main" in pod "gp-42" is waiting to start: CrashLoopBackOff'
    )


@pytest.mark.parametrize(
    ("pieces", "max_bytes", "lines", "text", "truncated"),
    [
        ([b"a\nb\nc\n"], 100, 7, "a\nb\nc\n", False),  # fewer lines than asked: the whole log
        ([b"a\nb\n", b"c\n"], 100, 3, "b\nc\n", True),  # as many as asked: the first is the extra one
        ([b"0123456789\n"] * 3, 15, 100, "789\n0123456789\n", True),  # cut to the last bytes
        ([b"x" * 10] * 5, 12, 100, "x" * 12, True),  # whole pieces dropped, one cut
        (["né\n".encode()], 2, 100, "\n", True),  # a cut inside a character drops its remains
    ],
)
def test_tail_keeps_the_last_bytes(pieces, max_bytes, lines, text, truncated):
    tail = Tail(max_bytes, lines)
    for piece in pieces:
        tail.feed(piece)
    assert tail.result() == (text, truncated)
    assert len(tail.result()[0].encode()) <= max_bytes


def test_the_stand_in_serves_pod_logs_as_the_api_does(k8s_api, backend):
    # What the backend relies on: limitBytes keeps the beginning, tailLines the end (an
    # unterminated last line counts), refusals carry the API server's codes.
    name = running_dev(k8s_api, backend)
    k8s_api.append_log(name, "one\ntwo\nthree")

    def read(pod=name, **params):
        # Unread (_preload_content=False), as the backend reads logs: the 36.x client's own
        # decoding of a ``str`` answer returns the bytes' repr ("b'...'").
        return backend.core.read_namespaced_pod_log(
            pod, "gpupool-jobs", _preload_content=False, **params
        ).data

    assert read(limit_bytes=5) == b"one\nt"
    assert read(tail_lines=2) == b"two\nthree"
    assert read(tail_lines=2, limit_bytes=3) == b"two"
    assert read(tail_lines=0) == b""
    k8s_api.append_log(name, "\n")
    assert read(tail_lines=1) == b"three\n"
    with pytest.raises(ApiException) as missing:
        read("gp-404")
    assert missing.value.status == 404
    with pytest.raises(ApiException) as wrong:
        read(container="sidecar")
    assert wrong.value.status == 400 and "not valid" in wrong.value.body


def test_a_log_stream_left_early_frees_its_connection(k8s_api, backend):
    name = running_dev(k8s_api, backend)
    k8s_api.append_log(name, three_mb_log())
    pieces = backend.log_stream(name)
    assert len(next(pieces)) <= LOG_CHUNK_BYTES
    pieces.close()  # the download page was closed
    assert backend.log_tail(name, max_bytes=30).text.endswith("\n")  # the client still works


def test_the_command_reaches_the_shell_as_typed():
    # Kubernetes expands $(VAR) in command and args as in env values: "echo $$" must stay the pid.
    spec = replace(workenv_spec("training"), command="echo $$ $(HOME) ${X}")
    command = container(pod_of(build_manifest(spec)))["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    assert expand(command[2], {"HOME": "/root"}) == "echo $$ $(HOME) ${X}"
