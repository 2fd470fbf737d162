"""A pod as an external job (jobs.native.backends.k8s_native): what it holds is Kubernetes' effective
request (init containers one at a time, sidecars alongside, app containers together), its times
are its containers', and a deleted pod ends at its containers' end when they reported one."""

from __future__ import annotations

from datetime import UTC, datetime

from jobs.native.backends.external import UNKNOWN_DEVICE
from jobs.native.backends.k8s_native import accelerator, effective_request, gone_without_end, pod_record

GPU = "nvidia.com/gpu"


def _c(name: str, gpus: int | None = None, *, limits_only: bool = False, sidecar: bool = False) -> dict:
    container: dict = {"name": name, "image": "x"}
    if gpus is not None:
        container["resources"] = {"limits": {GPU: str(gpus)}} if limits_only else {
            "requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def test_app_containers_add_up_and_a_limit_alone_counts_as_the_request():
    assert effective_request({"containers": [_c("a", 2), _c("b", 3, limits_only=True), _c("c")]}, GPU) == 5


def test_the_largest_init_container_wins_over_smaller_app_containers():
    spec = {"initContainers": [_c("i1", 4), _c("i2", 1)], "containers": [_c("a", 2)]}
    assert effective_request(spec, GPU) == 4


def test_sidecars_run_alongside_later_init_containers_and_the_app():
    # sidecar 1 → init 4 runs with it (5); the app's 2 runs with it (3): the pod needs 5.
    spec = {"initContainers": [_c("side", 1, sidecar=True), _c("init", 4)], "containers": [_c("a", 2)]}
    assert effective_request(spec, GPU) == 5
    spec = {"initContainers": [_c("init", 1), _c("side", 2, sidecar=True)], "containers": [_c("a", 3)]}
    assert effective_request(spec, GPU) == 5  # the init before the sidecar runs alone


def test_the_accelerator_asked_most_decides_and_none_without_one():
    spec = {"containers": [{"name": "a", "resources": {"limits": {GPU: "1", "nvidia.com/mig-1g.10gb": "2"}}}]}
    assert accelerator(spec, [GPU, "nvidia.com/mig-1g.10gb"]) == ("nvidia.com/mig-1g.10gb", 2)
    assert accelerator({"containers": [_c("a")]}, [GPU]) is None


def _pod(phase: str, statuses: list[dict], **meta) -> dict:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1", **meta,
                     "creationTimestamp": "2024-05-01T09:00:00Z"},
        "spec": {"nodeName": "n1", "containers": [_c("a", 2), _c("b")]},
        "status": {"phase": phase, "containerStatuses": statuses},
    }


def _running(at: str) -> dict:
    return {"name": "a", "state": {"running": {"startedAt": at}}}


def _ended(start: str, end: str, code: int = 0) -> dict:
    return {"name": "a", "state": {"terminated": {"startedAt": start, "finishedAt": end, "exitCode": code}}}


def test_a_running_pod_holds_unknown_devices_on_its_node_from_its_first_container():
    record = pod_record(_pod("Running", [_running("2024-05-01T10:00:05Z"), _running("2024-05-01T10:00:01Z")]),
                        [GPU])
    assert record is not None and record.phase == "running" and record.user == "ns/default"
    assert record.started_at == datetime(2024, 5, 1, 10, 0, 1, tzinfo=UTC)
    assert record.slots == (("n1", UNKNOWN_DEVICE), ("n1", UNKNOWN_DEVICE)) and record.problem() is None


def test_an_ended_pod_ends_at_its_last_container():
    record = pod_record(_pod("Failed", [_ended("2024-05-01T10:00:00Z", "2024-05-01T11:00:00Z", 0),
                                         _ended("2024-05-01T10:00:02Z", "2024-05-01T11:30:00Z", 137)]), [GPU])
    assert (record.phase, record.exit_code, record.slots) == ("failed", 137, ())
    assert record.finished_at == datetime(2024, 5, 1, 11, 30, tzinfo=UTC)


def test_a_deleted_pod_ends_at_its_containers_end_if_known_else_at_the_observation():
    finished = pod_record(_pod("Running", [_ended("2024-05-01T10:00:00Z", "2024-05-01T10:20:00Z")]), [GPU],
                          deleted=True)
    assert (finished.phase, finished.finished_at) == ("succeeded", datetime(2024, 5, 1, 10, 20, tzinfo=UTC))
    assert not gone_without_end(finished, True)
    killed = pod_record(_pod("Running", [_running("2024-05-01T10:00:00Z")]), [GPU], deleted=True)
    assert killed.phase == "running" and gone_without_end(killed, True)


def test_portal_pods_are_not_external_jobs():
    labels = {"app.kubernetes.io/managed-by": "gpupool"}
    pod = _pod("Running", [_running("2024-05-01T10:00:00Z")], labels=labels)
    assert pod_record(pod, [GPU]) is None


def test_an_external_pod_holds_its_cpu_and_memory_requests():
    """Counted like a portal job's (DESIGN §15): the pod's effective cpu and memory requests."""
    pod = _pod("Running", [_running("2024-05-01T09:00:05Z")])
    pod["spec"]["containers"] = [
        {"name": "a", "image": "x", "resources": {"requests": {GPU: "2", "cpu": "11500m", "memory": "64Gi"},
                                                  "limits": {GPU: "2"}}},
        {"name": "b", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}},
    ]
    pod["spec"]["initContainers"] = [
        {"name": "i", "image": "x", "resources": {"requests": {"cpu": "20", "memory": "1Gi"}}}]
    record = pod_record(pod, [GPU])
    # cpu: the init container's 20 cores beat the app's 12.5; memory: the app's 64.5 GiB.
    assert (record.cpu_millicores, record.memory_mib) == (20_000, 66_048)
    bare = pod_record(_pod("Running", [_running("2024-05-01T09:00:05Z")]), [GPU])
    assert (bare.cpu_millicores, bare.memory_mib) == (None, None)
