"""The Kubernetes backend: manifests validated offline against the official schemas
(kubernetes-validate, strict), and the backend driven through the official client over real HTTP
against the stand-in API server of :mod:`tests.backends.k8s_standin`. No database."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import kubernetes_validate
import pytest

from jobs.backends.base import (
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BackendError,
    JobSpec,
    Slot,
)
from jobs.backends.kubernetes import (
    GPU_MILLI_ANNOTATION,
    KubernetesBackend,
    build_deployment,
    build_manifest,
    build_pod,
    build_training_job,
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
    return KubernetesBackend(host=k8s_api.url, namespace="gpupool", token="tok-123", cluster="ignored")


JOBS = "/apis/batch/v1/namespaces/gpupool/jobs"


def test_submit_is_idempotent(k8s_api, backend):
    spec = make_spec("training")
    assert backend.submit(spec) == "gp-42"
    assert k8s_api.calls() == [("GET", f"{JOBS}/gp-42"), ("POST", JOBS)]
    assert backend.submit(spec) == "gp-42"
    assert k8s_api.calls() == [("GET", f"{JOBS}/gp-42"), ("POST", JOBS), ("GET", f"{JOBS}/gp-42")]
    stored = k8s_api.get("jobs", "gp-42")
    assert stored["spec"]["completionMode"] == "Indexed" and stored["metadata"]["uid"]
    assert [k for k in k8s_api.objects] == [("jobs", "gpupool", "gp-42")]


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
    assert k8s_api.calls("POST") == [("POST", "/api/v1/namespaces/gpupool/pods")]


def test_submit_sends_the_bearer_token_and_kinds_land_in_their_apis(k8s_api, backend):
    backend.submit(make_spec("inference", job_id=1))
    backend.submit(make_spec("dev", job_id=2, workers=1))
    assert k8s_api.get("deployments", "gp-1")["spec"]["replicas"] == 2
    assert k8s_api.get("pods", "gp-2")["kind"] == "Pod"
    assert ("POST", "/apis/apps/v1/namespaces/gpupool/deployments") in k8s_api.calls()
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
        ("GET", "/apis/apps/v1/namespaces/gpupool/deployments", ["app.kubernetes.io/managed-by=gpupool"]),
        ("GET", "/api/v1/namespaces/gpupool/pods", ["app.kubernetes.io/managed-by=gpupool"]),
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
        RUNNING, t0 + timedelta(seconds=30), "kubernetes")
    s, h = timedelta(seconds=1), timedelta(hours=1)
    k8s_api.pod_terminated("gp-20-0-aaaaa", "gp-20", "gpu-a", t0 + 40 * s, t0 + h)
    k8s_api.pod_terminated("gp-20-1-bbbbb", "gp-20", "gpu-b", t0 + 30 * s, t0 + 2 * h)
    k8s_api.job_succeeded("gp-20")  # completionTime: now, when the controller noticed
    ended = backend.status(["gp-20"])["gp-20"]
    assert (ended.phase, ended.started_at, ended.finished_at) == (
        SUCCEEDED, t0 + timedelta(seconds=30), t0 + timedelta(hours=2))
    # A dev pod: its container's times, not the pod's scheduling time.
    backend.submit(make_spec("dev", job_id=21, workers=1))
    k8s_api.pod_terminated("gp-21", "gp-21", "gpu-a", t0, t0 + timedelta(minutes=5), exit_code=2)
    dev = backend.status(["gp-21"])["gp-21"]
    assert (dev.phase, dev.started_at, dev.finished_at, dev.exit_code) == (
        FAILED, t0, t0 + timedelta(minutes=5), 2)


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
        node("gpu-b", {"nvidia.com/gpu": "8"}, unschedulable=True),
        node("gpu-c", {"nvidia.com/gpu": "4"}, conditions=[{"type": "Ready", "status": "Unknown"}]),
        node("mig-a", {"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"}),
        node("npu-1", {"huawei.com/Ascend910": "8"}),
        node("cpu-1", {}),
    ]
    by_name = {n.name: n for n in backend.list_nodes()}
    assert set(by_name) == {"gpu-a", "gpu-b", "gpu-c", "mig-a", "npu-1"}
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
    backend = KubernetesBackend(kubeconfig=str(path), namespace="gpupool")
    assert backend.health() == "ok"
    assert backend.list_nodes() == []
    assert set(k8s_api.authorization) == {"Bearer kc-token"}


# -- resizing (the scheduler grew the job, or its owner scaled it)

DEPLOYMENTS = "/apis/apps/v1/namespaces/gpupool/deployments"


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
        backend._call(backend.apps.patch_namespaced_deployment, "gp-42", "gpupool", {"spec": {"replicas": 1}})
