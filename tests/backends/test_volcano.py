"""Training jobs as Volcano Jobs (``{"training_api": "volcano"}``): every manifest is validated
against Volcano's own CRD schema (vendored from volcano-sh/volcano, see the file's header) made
strict, and its pod template against Kubernetes' PodSpec; the backend is driven through the
official client's CustomObjectsApi over real HTTP against the stand-in API server. No database."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from jobs.clusters.backends import rendezvous
from jobs.clusters.backends.base import FAILED, PENDING, RUNNING, SUCCEEDED, JobSpec
from jobs.clusters.backends.kubernetes import (
    KubernetesBackend,
    build_manifest,
    build_training_job,
    build_volcano_job,
)
from jobs.clusters.backends.registry import backend_for
from jobs.clusters.backends.volcano import queue_name
from tests.backends import k8s_standin
from tests.backends.test_kubernetes import K8S_VERSION, container, hostnames, make_spec, workenv_spec

pytestmark = pytest.mark.kubernetes

k8s_api = k8s_standin.k8s_api
SCHEMA_FILE = Path(__file__).parent / "schemas" / "volcano-batch-v1alpha1-job.yaml"
VCJOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/gpupool-jobs/jobs"


def _strict(schema: dict) -> dict:
    """Unknown fields fail, as with the API server's strict field validation (a CRD would
    otherwise prune them silently): every object schema that lists its properties is closed."""
    schema = copy.deepcopy(schema)
    stack = [schema]
    while stack:
        node = stack.pop()
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        stack.extend(node.get("properties", {}).values())
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                stack.append(node[key])
    return schema


VALIDATOR = jsonschema.Draft7Validator(_strict(yaml.safe_load(SCHEMA_FILE.read_text())))


def validate(manifest: dict) -> None:
    VALIDATOR.validate(manifest)
    assert (manifest["apiVersion"], manifest["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    for task in manifest["spec"]["tasks"]:
        template = task["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "worker", **template["metadata"]},
            "spec": template["spec"],
        }
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def without_rendezvous(env: list[dict]) -> list[dict]:
    return [e for e in env if e["name"] not in rendezvous.VARIABLES]


def elastic_spec(**kw) -> JobSpec:
    spec = make_spec("training", workers=4, gpus=8, nodes=("gpu-a", "gpu-b", "gpu-c", "gpu-d"), **kw)
    return replace(spec, min_workers=2, checkpointing=True)


# -- manifests


def test_volcano_pods_carry_the_working_environment():
    spec = workenv_spec("training")
    m = build_volcano_job(spec, "ml")
    validate(m)
    pod = m["spec"]["tasks"][0]["template"]["spec"]
    batch_pod = build_training_job(spec, "ml")["spec"]["template"]["spec"]
    for key in ("volumes", "imagePullSecrets"):
        assert pod[key] == batch_pod[key]
    assert container(pod)["volumeMounts"] == container(batch_pod)["volumeMounts"]
    assert container(pod)["env"] == without_rendezvous(container(batch_pod)["env"])
    assert [v["name"] for v in pod["volumes"]] == ["datasets", "scratch", "models", "ckpt-checkpoint"]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "pa1-tokens", "key": "hf"}}} in (
        container(pod)["env"]
    )


def test_volcano_training_manifest_is_valid_and_carries_the_batch_jobs_pod():
    spec = make_spec("training", workers=3, nodes=("gpu-b", "gpu-a"))
    m = build_volcano_job(spec, "ml")
    validate(m)
    s = m["spec"]
    assert m["metadata"]["name"] == "gp-42" and m["metadata"]["namespace"] == "ml"
    assert s["schedulerName"] == "volcano"
    assert s["minAvailable"] == 3  # a plain gang: all workers or none
    assert s["queue"] == "gp-a1"  # department A1
    assert s["maxRetry"] == 0
    assert s["plugins"] == {"env": [], "svc": []}
    [task] = s["tasks"]
    assert task["replicas"] == 3
    pod, batch_pod = task["template"]["spec"], build_training_job(spec, "ml")["spec"]["template"]["spec"]
    # Same image, command, GPU limits; a Volcano Job's pods are named by its own svc plugin, without
    # the batch Job's rendezvous variables (DESIGN §17: Indexed Job, headless Service).
    batch_pod["containers"][0]["env"] = without_rendezvous(batch_pod["containers"][0]["env"])
    assert pod["containers"] == batch_pod["containers"]
    assert pod["affinity"] == batch_pod["affinity"] and hostnames(pod) == ["gpu-a", "gpu-b"]
    assert pod["restartPolicy"] == "Never"
    assert pod["activeDeadlineSeconds"] == 3600  # no job-level deadline in a Volcano Job
    batch = build_training_job(spec, "ml")
    assert task["template"]["metadata"] == batch["spec"]["template"]["metadata"]
    assert m["metadata"]["labels"] == batch["metadata"]["labels"]


def test_elastic_checkpointing_job_gangs_on_its_minimum_and_restarts_on_eviction():
    m = build_volcano_job(elastic_spec())
    validate(m)
    assert m["spec"]["minAvailable"] == 2 and m["spec"]["tasks"][0]["replicas"] == 4
    assert m["spec"]["maxRetry"] == 3
    assert {"event": "PodEvicted", "action": "RestartJob"} in m["spec"]["policies"]
    plain = build_volcano_job(make_spec("training"))
    assert {"event": "PodEvicted", "action": "AbortJob"} in plain["spec"]["policies"]


@pytest.mark.parametrize(
    ("department", "fixed", "queue"),
    [
        ("A1", None, "gp-a1"),
        ("Dept_X.y", None, "gp-dept-x-y"),
        ("", None, "default"),
        ("A1", "shared", "shared"),
    ],
)
def test_queue_is_derived_from_the_department(department, fixed, queue):
    spec = replace(make_spec(), labels={"department": department} if department else {})
    assert queue_name(spec, fixed) == queue
    validate(build_volcano_job(spec, queue=fixed))


def test_shared_and_mig_requests_are_valid_volcano_jobs():
    for spec in (
        make_spec("training", workers=1, gpus=1, milli=250, nodes=("gpu-a",)),
        make_spec("training", gpus=1, resource="nvidia.com/mig-1g.10gb"),
        make_spec("training", max_runtime=None),
    ):
        validate(build_manifest(spec, training_api="volcano"))


def test_other_kinds_are_not_volcano_jobs():
    assert build_manifest(make_spec("inference"), training_api="volcano")["kind"] == "Deployment"
    assert build_manifest(make_spec("dev", workers=1), training_api="volcano")["kind"] == "Pod"


@pytest.mark.parametrize(
    "breakage",
    [
        lambda m: m["spec"].update(bogus=1),  # unknown field
        lambda m: m["spec"]["tasks"][0].update(replicas=-1),
        lambda m: m["spec"].update(queue="Not_A_Name"),
        lambda m: m["spec"]["policies"].append({"event": "PodExploded", "action": "AbortJob"}),
        lambda m: m["spec"].update(tasks=[]),
        lambda m: m["spec"]["tasks"][0]["template"]["spec"].update(bogusField=1),  # PodSpec part
    ],
)
def test_validation_is_strict(breakage):
    m = build_volcano_job(make_spec("training"))
    breakage(m)
    with pytest.raises((jsonschema.ValidationError, kubernetes_validate.ValidationError)):
        validate(m)


# -- the backend against the stand-in


@pytest.fixture
def backend(k8s_api):
    return backend_for("kubernetes", {"host": k8s_api.url, "token": "t", "training_api": "volcano"})


def test_registry_passes_the_training_api_and_refuses_unknown_ones(k8s_api):
    assert isinstance(
        backend_for("kubernetes", {"host": k8s_api.url, "training_api": "volcano"}), KubernetesBackend
    )
    with pytest.raises(ValueError, match="training_api"):
        KubernetesBackend(host=k8s_api.url, training_api="kueue")


def test_submit_creates_a_volcano_job_once(k8s_api, backend):
    spec = elastic_spec()
    assert backend.submit(spec) == "gp-42"
    assert backend.submit(spec) == "gp-42"  # look before create
    assert k8s_api.calls() == [("GET", f"{VCJOBS}/gp-42"), ("POST", VCJOBS), ("GET", f"{VCJOBS}/gp-42")]
    stored = k8s_api.get("vcjobs", "gp-42")
    assert k8s_api.get("jobs", "gp-42") is None  # not a batch/v1 Job
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        stored["metadata"].pop(key)
    validate(stored)
    assert stored["spec"]["minAvailable"] == 2


def _vc_state(k8s_api, name, phase, **state):
    k8s_api.set_status(
        "vcjobs", name, {"state": {"phase": phase, "lastTransitionTime": "2026-02-01T10:00:00Z", **state}}
    )


def test_status_follows_the_volcano_phase(k8s_api, backend):
    for i in range(1, 7):
        backend.submit(make_spec("training", job_id=i))
    _vc_state(k8s_api, "gp-1", "Running")
    _vc_state(k8s_api, "gp-2", "Completed")
    _vc_state(k8s_api, "gp-3", "Aborted", reason="PodEvicted", message="pod gp-3-worker-0 evicted")
    _vc_state(k8s_api, "gp-4", "Failed", reason="PodFailed")
    _vc_state(k8s_api, "gp-5", "Restarting")
    seen = len(k8s_api.requests)
    got = backend.status([f"gp-{i}" for i in range(1, 7)])
    assert got["gp-1"].phase == RUNNING and got["gp-1"].started_at.year == 2026
    assert got["gp-2"].phase == SUCCEEDED and got["gp-2"].exit_code == 0 and got["gp-2"].finished_at
    assert got["gp-3"].phase == FAILED and got["gp-3"].node_failure
    assert got["gp-4"].phase == FAILED and not got["gp-4"].node_failure and "PodFailed" in got["gp-4"].message
    assert got["gp-5"].phase == RUNNING  # still holds its GPUs while Volcano recreates the pods
    assert got["gp-6"].phase == PENDING  # no status yet
    listed = [(m, p, q.get("labelSelector")) for m, p, q in k8s_api.requests[seen:]]
    assert ("GET", VCJOBS, ["app.kubernetes.io/managed-by=gpupool"]) in listed


def test_status_reads_the_pods_of_a_volcano_job(k8s_api, backend):
    backend.submit(make_spec("training", job_id=7))
    _vc_state(k8s_api, "gp-7", "Running")
    for w, node in enumerate(("gpu-a", "gpu-b")):
        k8s_api.add(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"gp-7-worker-{w}",
                    "labels": {"app.kubernetes.io/managed-by": "gpupool", "gpupool.io/name": "gp-7"},
                },
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
                "status": {"phase": "Running", "startTime": f"2026-02-01T09:0{w}:00Z"},
            },
        )
    st = backend.status(["gp-7"])["gp-7"]
    assert st.nodes == ("gpu-a", "gpu-b") and st.started_at.minute == 0


def test_cancel_deletes_the_volcano_job(k8s_api, backend):
    backend.submit(make_spec("training"))
    backend.cancel("gp-42", grace_seconds=20)
    assert k8s_api.get("vcjobs", "gp-42") is None
    [(path, query)] = [(p, q) for m, p, q in k8s_api.requests if m == "DELETE" and p.startswith(VCJOBS)]
    assert path == f"{VCJOBS}/gp-42" and query["propagationPolicy"] == ["Background"]
    backend.cancel("gp-42")  # gone already: no error


def test_resize_restarts_a_volcano_job_with_the_new_size(k8s_api, backend):
    spec = elastic_spec()
    backend.submit(make_spec("training", workers=2, gpus=8, nodes=("gpu-a", "gpu-b")))
    old_uid = k8s_api.get("vcjobs", "gp-42")["metadata"]["uid"]
    backend.resize(spec)
    stored = k8s_api.get("vcjobs", "gp-42")
    assert stored["metadata"]["uid"] != old_uid  # recreated: the template is immutable
    assert stored["spec"]["tasks"][0]["replicas"] == 4
    assert hostnames(stored["spec"]["tasks"][0]["template"]["spec"]) == ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
    calls = len(k8s_api.requests)
    backend.resize(spec)  # a retried task: already that size, nothing is touched
    assert [m for m, _ in k8s_api.calls()[calls:]] == ["GET"]
    _vc_state(k8s_api, "gp-42", "Completed")
    backend.resize(make_spec("training", workers=1, gpus=8, nodes=("gpu-a",)))
    stored = k8s_api.get("vcjobs", "gp-42")
    assert stored["status"]["state"]["phase"] == "Completed"  # ended meanwhile: never restarted
    assert stored["spec"]["tasks"][0]["replicas"] == 4
