"""Whole-machine requests on Kubernetes (DESIGN §15, issue 33): every pod the portal creates asks
its worker's CPU, memory and ephemeral storage with requests equal to limits (Guaranteed QoS),
valid against the official schemas (and Volcano's CRD); the inventory reads a node's allocatable
and capacity, and GPU feature discovery's driver and CUDA labels. Through the official client
against the stand-in API server; no database."""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobs.clusters.backends.kubernetes import (
    KubernetesBackend,
    build_manifest,
    machine_quantities,
    with_kueue_queue,
    with_yunikorn,
)
from tests.backends import k8s_standin
from tests.backends import test_volcano as volcano_tests
from tests.backends.test_kubernetes import container, make_spec, validate

pytestmark = pytest.mark.kubernetes

k8s_api = k8s_standin.k8s_api

ASKED = {"cpu_millicores": 48_000, "memory_mib": 507_904, "local_disk_gib": 1_920}
WANT = {"cpu": "48", "memory": "507904Mi", "ephemeral-storage": "1920Gi"}


def pod_specs(manifest: dict) -> list[dict]:
    if manifest["kind"] == "Pod":
        return [manifest["spec"]]
    if manifest["kind"] == "Job" and manifest["apiVersion"].startswith("batch.volcano.sh"):
        return [task["template"]["spec"] for task in manifest["spec"]["tasks"]]
    return [manifest["spec"]["template"]["spec"]]


def guaranteed(pod: dict) -> bool:
    """Kubernetes' Guaranteed QoS class: every container sets cpu and memory limits, and its
    requests equal them (pkg/apis/core/helper/qos)."""
    for c in pod["containers"]:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if not {"cpu", "memory"} <= limits.keys() or requests != limits:
            return False
    return True


CASES = [
    ("training", "batch", {}),
    ("inference", "batch", {}),
    ("dev", "batch", {}),
    ("training", "volcano", {}),
    ("training", "batch", {"milli": 250}),  # a shared card without a sharing mode
]


@pytest.mark.parametrize(("kind", "api", "extra"), CASES)
def test_every_pod_asks_its_worker_with_requests_equal_to_limits(kind, api, extra):
    spec = replace(make_spec(kind, workers=1 if kind == "dev" else 2, **extra), **ASKED)
    manifest = build_manifest(spec, training_api=api)
    (volcano_tests.validate if api == "volcano" else validate)(manifest)
    for pod in pod_specs(manifest):
        res = container(pod)["resources"]
        assert {k: res["limits"][k] for k in WANT} == WANT
        assert res["requests"] == res["limits"] and guaranteed(pod)
        assert res["limits"]["nvidia.com/gpu"] == ("1" if extra else "4")


@pytest.mark.parametrize("mode", ["vgpu", "shard", "mig"])
def test_shared_cards_keep_their_device_resources_beside_cpu_and_memory(mode):
    spec = replace(make_spec("training", milli=500), sharing_mode=mode, gpu_memory_mib=81920, **ASKED)
    manifest = build_manifest(spec)
    validate(manifest)
    [pod] = pod_specs(manifest)
    res = container(pod)["resources"]
    assert guaranteed(pod) and len(res["limits"]) > len(WANT)


def test_the_scheduler_integrations_keep_the_requests():
    spec = replace(make_spec("training"), **ASKED)
    for manifest in (with_kueue_queue(build_manifest(spec), spec), with_yunikorn(build_manifest(spec), spec)):
        validate(manifest)
        [pod] = pod_specs(manifest)
        assert guaranteed(pod)


def test_quantities():
    spec = make_spec()
    assert machine_quantities(spec) == {}  # asked nothing: the backend's defaults, as before
    assert machine_quantities(replace(spec, cpu_millicores=1500, memory_mib=1000)) == {
        "cpu": "1500m", "memory": "1000Mi"}
    unasked = build_manifest(spec)
    assert set(container(pod_specs(unasked)[0])["resources"]["limits"]) == {"nvidia.com/gpu"}


# -- through the official client and the stand-in


@pytest.fixture
def backend(k8s_api):
    return KubernetesBackend(host=k8s_api.url, namespace="gpupool-jobs", token="tok-123", cluster="ignored")


@pytest.mark.parametrize("kind", ["training", "inference", "dev"])
def test_the_objects_the_portal_creates_have_guaranteed_pods(k8s_api, backend, kind):
    spec = replace(make_spec(kind, workers=1), **ASKED)
    backend.submit(spec)
    resource = {"training": "jobs", "inference": "deployments", "dev": "pods"}[kind]
    stored = k8s_api.get(resource, spec.name)
    [pod] = pod_specs(stored)
    assert guaranteed(pod)
    assert {k: container(pod)["resources"]["requests"][k] for k in WANT} == WANT


def test_the_inventory_reads_allocatable_capacity_and_the_software(k8s_api, backend):
    k8s_api.nodes = [
        {
            "metadata": {"name": "gpu-a", "labels": {
                "nvidia.com/gpu.count": "8",
                "nvidia.com/cuda.driver-version.major": "550",
                "nvidia.com/cuda.driver-version.minor": "54",
                "nvidia.com/cuda.driver-version.revision": "15",
                "nvidia.com/cuda.driver.major": "550",
                "nvidia.com/cuda.driver.minor": "54",
                "nvidia.com/cuda.driver.rev": "15",
                "nvidia.com/cuda.runtime.major": "12",
                "nvidia.com/cuda.runtime.minor": "4",
                "topology.kubernetes.io/zone": "z1",
            }},
            "spec": {},
            "status": {
                "capacity": {"cpu": "96", "memory": "1056768000Ki", "ephemeral-storage": "3840Gi",
                             "nvidia.com/gpu": "8"},
                "allocatable": {"cpu": "95500m", "memory": "1040187392Ki",
                                "ephemeral-storage": "3500Gi", "nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "nodeInfo": {"kubeletVersion": "v1.30.2", "kernelVersion": "6.1.0",
                             "osImage": "Ubuntu 22.04", "containerRuntimeVersion": "containerd://1.7",
                             "architecture": "amd64", "bootID": "", "machineID": "", "systemUUID": "",
                             "kubeProxyVersion": "v1.30.2", "operatingSystem": "linux"},
            },
        },
        {
            "metadata": {"name": "gpu-b", "labels": {}},
            "spec": {},
            "status": {"capacity": {"nvidia.com/gpu": "8"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        },
    ]
    a, b = backend.list_nodes()
    assert (a.cpu_millicores, a.cpu_millicores_capacity) == (95_500, 96_000)
    assert (a.memory_mib, a.memory_mib_capacity) == (1_040_187_392 // 1024, 1_056_768_000 // 1024)
    assert (a.local_disk_gib, a.local_disk_gib_capacity) == (3500, 3840)
    assert (a.driver_version, a.cuda_version) == ("550.54.15", "12.4")
    assert ("topology.kubernetes.io/zone", "z1") in a.labels
    # The kubelet's nodeInfo: the node's kernel, OS image and runtime, beside its labels.
    info = {k: v for k, v in a.labels if k.startswith("status.nodeInfo.")}
    assert info == {"status.nodeInfo.kernelVersion": "6.1.0", "status.nodeInfo.osImage": "Ubuntu 22.04",
                    "status.nodeInfo.containerRuntimeVersion": "containerd://1.7",
                    "status.nodeInfo.kubeletVersion": "v1.30.2", "status.nodeInfo.architecture": "amd64"}
    # A node that reports nothing of its machine: nothing is made up.
    assert (b.cpu_millicores, b.memory_mib, b.local_disk_gib, b.driver_version, b.labels) == (
        None, None, None, "", ())


def test_software_versions_from_each_gfd_label_style():
    from jobs.clusters.backends.k8s_status import machine_of

    newer = {"nvidia.com/cuda.driver-version.full": "570.86.15",
             "nvidia.com/cuda.runtime-version.full": "12.8"}
    older = {"nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "104",
             "nvidia.com/cuda.driver.rev": "05", "nvidia.com/cuda.runtime.major": "12",
             "nvidia.com/cuda.runtime.minor": "2"}
    for labels, want in ((newer, ("570.86.15", "12.8")), (older, ("535.104.05", "12.2")), ({}, ("", ""))):
        got = machine_of(None, labels)
        assert (got["driver_version"], got["cuda_version"]) == want


# -- through the portal: inventory sync, scheduling, dispatch


def _node(name: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.count": "8"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "96", "memory": "1Ti", "ephemeral-storage": "3840Gi", "nvidia.com/gpu": "8"},
            "allocatable": {"cpu": "96", "memory": "992Gi", "ephemeral-storage": "3840Gi",
                            "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_portal_job_on_kubernetes_asks_its_gpus_share_and_its_pods_are_guaranteed(k8s_api, db):
    from jobs.clusters import dispatch
    from jobs.clusters.inventory import sync_inventory
    from jobs.scheduling.cycle import schedule_once
    from quotas.models import Cluster
    from tests import factories as fx

    k8s_api.nodes = [_node("gpu-a"), _node("gpu-b")]
    flavor = fx.flavor("A100-k8s")
    cluster = Cluster.objects.create(name="k8s-res", kind="kubernetes", config={"host": k8s_api.url})
    assert sync_inventory(cluster)["created"] == 2
    node = cluster.nodes.get(name="gpu-a")
    assert (node.cpu_millicores, node.memory_mib, node.local_disk_gib) == (96_000, 992 * 1024, 3840)
    dept = fx.department("K")
    project = fx.project("k1", dept)
    fx.quota(flavor, dept, 16)
    fx.quota(flavor, project, 16)
    job = fx.submit(project, flavor, workers=2, gpus=4, name="k8s-defaults", command="python train.py")
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    stored = k8s_api.get("jobs", f"gp-{job.pk}")
    validate(stored)
    [pod] = pod_specs(stored)
    assert guaranteed(pod)
    # Four GPUs' share of a 96-core, 992 GiB, 3840 GiB node of eight, for each worker.
    limits = container(pod)["resources"]["limits"]
    assert {k: limits[k] for k in WANT} == {"cpu": "48", "memory": "507904Mi", "ephemeral-storage": "1920Gi"}


# -- CPU-only work (docs/resources.md "CPU-only work")


def _cpu_node(name: str, labels: dict | None = None) -> dict:
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "128", "memory": "512Gi", "ephemeral-storage": "1024Gi"},
            "allocatable": {"cpu": "126", "memory": "504Gi", "ephemeral-storage": "1000Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_node_without_accelerators_is_a_cpu_node_of_its_allocatable_cores(k8s_api, backend):
    k8s_api.nodes = [_node("gpu-a"), _cpu_node("cpu-1"),
                     _cpu_node("master-1", {"node-role.kubernetes.io/control-plane": ""}),
                     {"metadata": {"name": "joining", "labels": {}}, "spec": {}}]
    by_name = {n.name: n for n in backend.list_nodes()}
    # The control plane runs the cluster, not jobs; a node with no status yet has no cores to offer.
    assert set(by_name) == {"gpu-a", "cpu-1"}
    cpu = by_name["cpu-1"]
    assert (cpu.flavor_hint, cpu.gpus) == ("cpu", 126)
    assert (cpu.cpu_millicores, cpu.memory_mib) == (126_000, 504 * 1024)
    assert (by_name["gpu-a"].flavor_hint, by_name["gpu-a"].gpus) == ("nvidia.com/gpu", 8)


def test_a_cpu_only_pod_asks_cores_and_memory_and_no_device_and_is_guaranteed():
    spec = replace(make_spec("training", workers=2), cpu_only=True, k8s_resource="cpu", gpus_per_worker=6,
                   cpu_millicores=6000, memory_mib=6 * 4032)
    for api in ("batch", "volcano"):
        manifest = build_manifest(spec, training_api=api)
        (volcano_tests.validate if api == "volcano" else validate)(manifest)
        for pod in pod_specs(manifest):
            res = container(pod)["resources"]
            assert res["limits"] == {"cpu": "6", "memory": "24192Mi"} and guaranteed(pod)


def test_a_portal_cpu_job_on_kubernetes_runs_on_the_cpu_node_in_cores(k8s_api, db):
    from jobs.clusters import dispatch
    from jobs.clusters.inventory import sync_inventory
    from jobs.scheduling.cycle import schedule_once
    from quotas.models import Cluster, Flavor, FlavorKind
    from tests import factories as fx

    k8s_api.nodes = [_node("gpu-a"), _cpu_node("cpu-1")]
    fx.flavor("A100-k8s")
    cpu = Flavor.objects.create(name="cpu-k8s", vendor="other", model="Xeon", memory_mib=0,
                                k8s_resource_name="cpu", kind=FlavorKind.CPU)
    cluster = Cluster.objects.create(name="k8s-cpu", kind="kubernetes", config={"host": k8s_api.url})
    assert sync_inventory(cluster)["created"] == 2
    node = cluster.nodes.get(name="cpu-1")
    assert (node.flavor, node.gpu_count) == (cpu, 126)
    dept = fx.department("K")
    project = fx.project("k1", dept)
    fx.quota(cpu, dept, 64)
    fx.quota(cpu, project, 64)
    job = fx.submit(project, cpu, workers=1, gpus=12, name="prep", command="python prep.py")
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    stored = k8s_api.get("jobs", f"gp-{job.pk}")
    validate(stored)
    [pod] = pod_specs(stored)
    # Twelve cores and their share of the node (504 GiB over 126 cores: 4 GiB a core), no device.
    assert container(pod)["resources"]["limits"] == {"cpu": "12", "memory": "49152Mi",
                                                     "ephemeral-storage": "84Gi"}
    assert guaranteed(pod)
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    term = required["nodeSelectorTerms"][0]
    assert term["matchExpressions"][0]["values"] == ["cpu-1"]
