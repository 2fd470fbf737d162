"""Kubernetes resource names per sharing mode of the flavor (DESIGN §14, issue 23): HAMi vGPU
memory/core limits, time-sliced replicas, MIG slices, Ascend vNPU templates. Every builder's
manifest (batch Job, Deployment, Pod, Volcano Job) for every mode is validated against the
official schemas, every quantity parsed as the API server does; the cluster config's settings
reach the objects the backend creates through the official client over HTTP."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kubernetes.utils.quantity import parse_quantity

from jobs.clusters.backends.base import JobSpec
from jobs.clusters.backends.k8s_sharing import (
    HAMI_CORES,
    HAMI_MEMORY,
    HAMI_MEMORY_PERCENT,
    HAMI_USE_UUID,
    sharing_from_config,
)
from jobs.clusters.backends.kubernetes import (
    GPU_MILLI_ANNOTATION,
    KubernetesBackend,
    build_manifest,
    resources_for,
)
from jobs.clusters.backends.simserver import gpu_uuid
from tests.backends import k8s_standin
from tests.backends import test_volcano as volcano_schema
from tests.backends.test_kubernetes import container, make_spec
from tests.backends.test_kubernetes import validate as validate_k8s

pytestmark = pytest.mark.kubernetes

k8s_api = k8s_standin.k8s_api

A100_MIB = 81920


def shared(mode: str, milli: int | None, resource: str, *, kind: str = "training", **kw) -> JobSpec:
    gpus = kw.pop("gpus", 1)
    spec = make_spec(kind, workers=1, gpus=gpus, milli=milli, resource=resource, nodes=("gpu-a",), **kw)
    return replace(spec, sharing_mode=mode, gpu_memory_mib=A100_MIB if mode == "vgpu" else 0)


def limits(spec: JobSpec, **config) -> dict[str, str]:
    res = resources_for(spec, sharing_from_config(**config))
    assert res["limits"] == res["requests"]  # extended resources: the API server wants them equal
    return res["limits"]


def test_vgpu_asks_hami_for_one_card_with_memory_and_core_limits():
    assert limits(shared("vgpu", 250, "nvidia.com/gpu")) == {
        "nvidia.com/gpu": "1",
        HAMI_MEMORY: "20480",  # 250/1000 of 81920 MiB
        HAMI_CORES: "25",  # percent of the card
    }
    # A share that does not divide the memory evenly is floored (never above the card's share).
    assert limits(shared("vgpu", 333, "nvidia.com/gpu"))[HAMI_MEMORY] == str(333 * A100_MIB // 1000)
    assert limits(shared("vgpu", 333, "nvidia.com/gpu"))[HAMI_CORES] == "33"
    # The flavor's memory unknown: HAMi's percentage of the card's memory instead.
    unknown = replace(shared("vgpu", 500, "nvidia.com/gpu"), gpu_memory_mib=0)
    assert limits(unknown) == {"nvidia.com/gpu": "1", HAMI_CORES: "50", HAMI_MEMORY_PERCENT: "50"}


@pytest.mark.parametrize(
    ("milli", "replicas", "count"),
    [
        (250, 4, 1),
        (500, 4, 2),
        (600, 4, 3),
        (1000, 4, 4),
        (100, 4, 1),
        (600, 10, 6),
        (333, 3, 1),
        (334, 3, 2),
    ],
)
def test_time_slicing_asks_for_enough_replicas_of_the_shared_resource(milli, replicas, count):
    spec = shared("shard", milli, "nvidia.com/gpu.shared")
    assert limits(spec, time_slicing_replicas=replicas) == {"nvidia.com/gpu.shared": str(count)}


def test_time_slicing_replicas_default_to_four():
    assert limits(shared("shard", 500, "nvidia.com/gpu.shared")) == {"nvidia.com/gpu.shared": "2"}


def test_whole_cards_on_a_time_sliced_flavor_take_every_replica_of_them():
    spec = shared("shard", None, "nvidia.com/gpu.shared", gpus=2)
    assert limits(spec, time_slicing_replicas=4) == {"nvidia.com/gpu.shared": "8"}


def test_mig_slices_are_whole():
    assert limits(shared("mig", None, "nvidia.com/mig-1g.10gb", gpus=2)) == {"nvidia.com/mig-1g.10gb": "2"}
    assert limits(shared("mig", 1000, "nvidia.com/mig-1g.10gb")) == {"nvidia.com/mig-1g.10gb": "1"}


@pytest.mark.parametrize(
    ("resource", "milli", "expected"),
    [
        # Ascend 910 (32 AI cores): 250 -> 8 cores -> vir08; 300 -> 10 -> vir16; 60 -> 2 -> vir02.
        ("huawei.com/Ascend910", 250, "huawei.com/Ascend910-8c"),
        ("huawei.com/Ascend910", 300, "huawei.com/Ascend910-16c"),
        ("huawei.com/Ascend910", 60, "huawei.com/Ascend910-2c"),
        ("huawei.com/Ascend910", 125, "huawei.com/Ascend910-4c"),
        ("huawei.com/Ascend910", 600, "huawei.com/Ascend910"),  # above vir16: the whole card
        # Ascend 310P (8 AI cores): 250 -> 2 cores -> vir02; 500 -> 4 -> vir04.
        ("huawei.com/Ascend310P", 250, "huawei.com/Ascend310P-2c"),
        ("huawei.com/Ascend310P", 500, "huawei.com/Ascend310P-4c"),
        ("huawei.com/Ascend310P", 100, "huawei.com/Ascend310P-1c"),
    ],
)
def test_vnpu_takes_the_smallest_template_holding_the_share(resource, milli, expected):
    assert limits(shared("vnpu", milli, resource)) == {expected: "1"}


def test_a_cluster_config_overrides_the_vnpu_templates_of_a_card():
    table = {"huawei.com/Ascend910": {"cores": 20, "templates": {"5c": 5, "10c": 10}}}
    spec = shared("vnpu", 250, "huawei.com/Ascend910")
    assert limits(spec, vnpu_templates=table) == {"huawei.com/Ascend910-5c": "1"}
    assert limits(replace(spec, gpu_milli=300), vnpu_templates=table) == {"huawei.com/Ascend910-10c": "1"}
    # Other cards keep the default table; a card without one gets whole devices.
    assert limits(shared("vnpu", 250, "huawei.com/Ascend310P"), vnpu_templates=table) == {
        "huawei.com/Ascend310P-2c": "1"
    }
    assert limits(shared("vnpu", 250, "example.com/npu")) == {"example.com/npu": "1"}


def test_a_bad_time_slicing_setting_is_refused():
    with pytest.raises(ValueError):
        sharing_from_config(time_slicing_replicas=-1)


MODES = [
    ("", 250, "nvidia.com/gpu"),
    ("", None, "nvidia.com/gpu"),
    ("vgpu", 250, "nvidia.com/gpu"),
    ("vgpu", None, "nvidia.com/gpu"),
    ("shard", 250, "nvidia.com/gpu.shared"),
    ("shard", None, "nvidia.com/gpu.shared"),
    ("mig", None, "nvidia.com/mig-1g.10gb"),
    ("vnpu", 250, "huawei.com/Ascend910"),
    ("vnpu", None, "huawei.com/Ascend910"),
]


def _pods(manifest: dict) -> list[dict]:
    if manifest["kind"] == "Pod":
        return [manifest["spec"]]
    if manifest["apiVersion"].startswith("batch.volcano.sh"):
        return [t["template"]["spec"] for t in manifest["spec"]["tasks"]]
    return [manifest["spec"]["template"]["spec"]]


@pytest.mark.parametrize(("mode", "milli", "resource"), MODES)
@pytest.mark.parametrize(
    ("kind", "api"),
    [("training", "batch"), ("training", "volcano"), ("inference", "batch"), ("dev", "batch")],
)
def test_every_builder_and_mode_is_schema_valid_with_whole_number_quantities(
    kind, api, mode, milli, resource
):
    spec = shared(mode, milli, resource, kind=kind)
    uuids = {"gpu-a": [gpu_uuid("gpu-a", i) for i in range(8)]}
    manifest = build_manifest(spec, training_api=api, sharing=sharing_from_config(gpu_uuids=uuids))
    (volcano_schema.validate if api == "volcano" else validate_k8s)(manifest)
    for pod in _pods(manifest):
        res = container(pod)["resources"]
        assert (
            res["limits"] == res["requests"] == resources_for(spec, sharing_from_config())["limits"] and res
        )
        for value in res["limits"].values():
            # Extended resources must be whole numbers: the API server parses and refuses fractions.
            quantity = parse_quantity(value)
            assert quantity == int(quantity) and quantity >= 1


def test_vgpu_pins_the_placements_cards_by_uuid_when_the_cluster_maps_them():
    spec = replace(shared("vgpu", 500, "nvidia.com/gpu", kind="inference"), placement=((_slot("gpu-a", 3),),))
    uuids = {"gpu-a": [gpu_uuid("gpu-a", i) for i in range(8)]}
    m = build_manifest(spec, sharing=sharing_from_config(gpu_uuids=uuids))
    validate_k8s(m)
    expected = {GPU_MILLI_ANNOTATION: "500", HAMI_USE_UUID: gpu_uuid("gpu-a", 3)}
    assert m["spec"]["template"]["metadata"]["annotations"] == expected  # the pods carry it (HAMi reads pods)
    # Without the map, no pin (HAMi pins by UUID, not by index): the node affinity only.
    assert HAMI_USE_UUID not in build_manifest(spec)["spec"]["template"]["metadata"]["annotations"]
    # A card the map does not know: no partial pin.
    short = sharing_from_config(gpu_uuids={"gpu-a": uuids["gpu-a"][:2]})
    assert (
        HAMI_USE_UUID
        not in build_manifest(spec, sharing=short)["spec"]["template"]["metadata"]["annotations"]
    )
    # Other modes never carry HAMi's annotation.
    shard = replace(spec, sharing_mode="shard", k8s_resource="nvidia.com/gpu.shared")
    assert HAMI_USE_UUID not in build_manifest(shard, sharing=sharing_from_config(gpu_uuids=uuids))[
        "metadata"
    ].get("annotations", {})


def _slot(node: str, gpu: int, milli: int = 500):
    from jobs.clusters.backends.base import Slot

    return Slot(node, gpu, milli)


def test_the_cluster_config_reaches_the_objects_the_backend_creates(k8s_api):
    backend = KubernetesBackend(
        host=k8s_api.url,
        namespace="gpupool-jobs",
        token="t",
        time_slicing_replicas=10,
        vnpu_templates={"huawei.com/Ascend910": {"cores": 20, "templates": {"5c": 5, "10c": 10}}},
        gpu_uuids={"gpu-a": [gpu_uuid("gpu-a", 0)]},
    )
    backend.submit(replace(shared("shard", 600, "nvidia.com/gpu.shared"), job_id=1, name="gp-1"))
    backend.submit(replace(shared("vnpu", 250, "huawei.com/Ascend910", kind="dev"), job_id=2, name="gp-2"))
    backend.submit(replace(shared("vgpu", 250, "nvidia.com/gpu", kind="inference"), job_id=3, name="gp-3"))
    shard = container(k8s_api.get("jobs", "gp-1")["spec"]["template"]["spec"])
    assert shard["resources"]["limits"] == {"nvidia.com/gpu.shared": "6"}
    assert container(k8s_api.get("pods", "gp-2")["spec"])["resources"]["limits"] == {
        "huawei.com/Ascend910-5c": "1"
    }
    vgpu = k8s_api.get("deployments", "gp-3")["spec"]["template"]
    assert container(vgpu["spec"])["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        HAMI_MEMORY: "20480",
        HAMI_CORES: "25",
    }
    assert vgpu["metadata"]["annotations"][HAMI_USE_UUID] == gpu_uuid("gpu-a", 0)


def test_a_time_sliced_node_counts_its_physical_cards(k8s_api):
    """With time-slicing a node advertises cards × replicas; GPU Feature Discovery's
    nvidia.com/gpu.count label says how many cards there are, and the pool counts cards."""
    ready = [{"type": "Ready", "status": "True"}]

    def node(name, capacity, labels):
        return {
            "metadata": {"name": name, "labels": labels},
            "spec": {},
            "status": {"capacity": {"cpu": "64", **capacity}, "conditions": ready},
        }

    k8s_api.nodes = [
        node(
            "shared-a",
            {"nvidia.com/gpu.shared": "32"},
            {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.replicas": "4"},
        ),
        node(
            "sliced-b",
            {"nvidia.com/gpu": "16"},
            {"nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"},
        ),
        node("plain-c", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.count": "8"}),
        node("no-gfd-d", {"nvidia.com/gpu.shared": "12"}, {}),
        node("bad-label-e", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.count": "64"}),
    ]
    backend = KubernetesBackend(host=k8s_api.url, namespace="gpupool-jobs", token="t")
    found = {n.name: (n.flavor_hint, n.gpus) for n in backend.list_nodes()}
    assert found == {
        "shared-a": ("nvidia.com/gpu.shared", 8),
        "sliced-b": ("nvidia.com/gpu", 4),
        "plain-c": ("nvidia.com/gpu", 8),
        "no-gfd-d": ("nvidia.com/gpu.shared", 12),  # no label: what the node advertises
        "bad-label-e": ("nvidia.com/gpu", 8),  # a label above the capacity is not believed
    }
