"""The in-cluster schedulers' queues carry the machine's resources beside the devices (DESIGN §15,
issue 33): portal pods ask cpu, memory and ephemeral-storage (requests == limits), and Kueue admits
a workload only when its ClusterQueue covers every resource it asks. Each quota node gets its
devices' share of them (the flavor's per-unit share × the devices), from the same quota, borrowing
and lending figures. Validated against the vendored CRD schemas and YuniKorn's own rules."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from quotas.effective import Limits
from quotas.queues import FlavorRef, QuotaRef, TreeSnapshot, flavor_object_name
from tests.backends.test_queues import render
from tests.backends.test_yunikorn import queues_by_path, rendered

GPU, NPU = "nvidia.com/gpu", "huawei.com/Ascend910"
NOON = datetime(2026, 6, 1, 12, tzinfo=ZoneInfo("Asia/Shanghai"))
# 12 cores, 124 GiB and 480 GiB of local disk per A100; the NPU flavor's nodes report nothing.
A100 = FlavorRef("A100", GPU, Decimal(16), per_unit=(
    ("cpu_millicores", 12_000), ("memory_mib", 126_976), ("local_disk_gib", 480)))
NPU_FLAVOR = FlavorRef("910B", NPU, Decimal(8))


def tree(*flavors: FlavorRef) -> TreeSnapshot:
    return TreeSnapshot(
        flavors=flavors,
        departments=(("d", None),),
        projects=(("p", "d"),),
        quotas=(
            QuotaRef("A100", "department", "d", Limits(Decimal(16))),
            QuotaRef("A100", "project", "p", Limits(Decimal(4), Decimal(2))),
            QuotaRef("910B", "department", "d", Limits(Decimal(8))),
            QuotaRef("910B", "project", "p", Limits(Decimal(8))),
        ),
    )


def test_kueue_covers_cpu_memory_and_disk_in_one_group_with_every_flavor():
    objects = render(tree(A100, NPU_FLAVOR), "kueue", NOON)
    [group] = objects[("ClusterQueue", "gp-p")]["spec"]["resourceGroups"]
    # Kueue: a resource belongs to one group, and a flavor names one group: one group covers all.
    assert group["coveredResources"] == [NPU, GPU, "cpu", "memory", "ephemeral-storage"]
    by_flavor = {f["name"]: f["resources"] for f in group["flavors"]}
    for resources in by_flavor.values():
        assert [r["name"] for r in resources] == group["coveredResources"]  # Kueue wants the order
    a100 = {r["name"]: r for r in by_flavor[flavor_object_name("A100")]}
    assert a100[GPU] == {"name": GPU, "nominalQuota": 4, "borrowingLimit": 2}
    assert a100["cpu"] == {"name": "cpu", "nominalQuota": "48000m", "borrowingLimit": "24000m"}
    assert a100["memory"] == {"name": "memory", "nominalQuota": "507904Mi", "borrowingLimit": "253952Mi"}
    assert a100["ephemeral-storage"]["nominalQuota"] == "1920Gi"
    assert a100[NPU]["nominalQuota"] == 0
    npu = {r["name"]: r for r in by_flavor[flavor_object_name("910B")]}
    assert npu[NPU]["nominalQuota"] == 8 and npu["cpu"]["nominalQuota"] == 0
    # The cohorts are rendered the same way (the pool's remainder, the department's).
    for cohort in ("gpupool", "gpd-d"):
        [cgroup] = objects[("Cohort", cohort)]["spec"]["resourceGroups"]
        assert cgroup["coveredResources"] == group["coveredResources"]


def test_without_machine_figures_kueue_renders_devices_only():
    objects = render(tree(FlavorRef("A100", GPU, Decimal(16)), NPU_FLAVOR), "kueue", NOON)
    groups = objects[("ClusterQueue", "gp-p")]["spec"]["resourceGroups"]
    assert [g["coveredResources"] for g in groups] == [[NPU], [GPU]]


def test_volcano_queues_deserve_and_cap_the_machine_too():
    objects = render(tree(A100, NPU_FLAVOR), "volcano", NOON)
    spec = objects[("Queue", "gp-p")]["spec"]
    assert spec["deserved"] == {GPU: 4, NPU: 8, "cpu": "48000m", "memory": "507904Mi",
                                "ephemeral-storage": "1920Gi"}
    assert spec["capability"]["cpu"] == "72000m" and spec["capability"]["memory"] == "761856Mi"


def test_yunikorn_guarantees_and_caps_vcore_and_memory():
    queues = queues_by_path(rendered(tree(A100, NPU_FLAVOR), NOON, (("ns-p", "p"),)))
    resources = queues["root.gpd-d.gp-p"]["resources"]
    assert resources["guaranteed"] == {GPU: "4", NPU: "8", "vcore": "48000m", "memory": "507904Mi",
                                       "ephemeral-storage": "1920Gi"}
    # The NPU quota has no borrow limit: no max for it; the A100's is 4 + 2 GPUs and their share.
    assert resources["max"] == {GPU: "6", "vcore": "72000m", "memory": "761856Mi",
                                "ephemeral-storage": "2880Gi"}


def test_the_sync_snapshot_carries_each_flavors_share(db):
    from jobs.native import queue_sync
    from quotas.models import Node
    from tests import factories as fx

    sized, unsized = fx.flavor("A100-q"), fx.flavor("T4-q")
    nodes = fx.nodes(sized, 2, 8) + fx.nodes(unsized, 1, 4)
    Node.objects.filter(pk__in=[n.pk for n in nodes[:2]]).update(
        cpu_millicores=96_000, memory_mib=1_015_808, local_disk_gib=3_840)
    refs = {f.name: f for f in queue_sync.snapshot(flavor_names=["A100-q", "T4-q"]).flavors}
    assert dict(refs["A100-q"].per_unit) == {
        "cpu_millicores": 12_000, "memory_mib": 126_976, "local_disk_gib": 480}
    assert refs["T4-q"].per_unit == ()


def test_the_sync_snapshot_carries_the_admins_fair_share_weights(db):
    from django.utils import timezone

    from jobs.native import queue_sync
    from quotas.models import FairShareWeight
    from tests import factories as fx

    dept = fx.department("W")
    project = fx.project("wp", dept)
    FairShareWeight.objects.create(project=project, weight="12.5", set_at=timezone.now())
    FairShareWeight.objects.create(department=dept, weight="3", set_at=timezone.now())
    weights = dict(queue_sync.snapshot().weights)
    assert weights == {("project", "wp"): Decimal("12.5"), ("department", "W"): Decimal("3")}


# -- a cpu flavor (docs/resources.md "CPU-only work"): its units are the machine's cpu, never a
# second "cpu" resource beside it

CPU = FlavorRef("cpu-epyc", "cpu", Decimal(256), per_unit=(("cpu_millicores", 1000), ("memory_mib", 3968)))


def cpu_tree() -> TreeSnapshot:
    return TreeSnapshot(
        flavors=(A100, CPU),
        departments=(("d", None),),
        projects=(("p", "d"),),
        quotas=(
            QuotaRef("A100", "department", "d", Limits(Decimal(16))),
            QuotaRef("A100", "project", "p", Limits(Decimal(4), Decimal(2))),
            QuotaRef("cpu-epyc", "department", "d", Limits(Decimal(64))),
            QuotaRef("cpu-epyc", "project", "p", Limits(Decimal(32), Decimal(8))),
        ),
    )


def test_kueue_counts_a_cpu_flavors_cores_as_the_machines_cpu():
    objects = render(cpu_tree(), "kueue", NOON)  # validated: schema and CEL rules
    [group] = objects[("ClusterQueue", "gp-p")]["spec"]["resourceGroups"]
    assert group["coveredResources"] == [GPU, "cpu", "memory", "ephemeral-storage"]
    by_flavor = {f["name"]: {r["name"]: r for r in f["resources"]} for f in group["flavors"]}
    cores = by_flavor[flavor_object_name("cpu-epyc")]
    assert cores[GPU]["nominalQuota"] == 0
    # 32 cores, borrowing 8 more, and their 3968 MiB each.
    assert cores["cpu"] == {"name": "cpu", "nominalQuota": "32000m", "borrowingLimit": "8000m"}
    assert cores["memory"]["nominalQuota"] == f"{32 * 3968}Mi"


def test_volcano_and_yunikorn_add_a_cpu_flavors_cores_to_the_machines_cpu():
    spec = render(cpu_tree(), "volcano", NOON)[("Queue", "gp-p")]["spec"]
    # Millicores throughout: 4 A100s' 12 cores each and 32 cores, capped at 6 A100s' and 40 cores.
    assert spec["deserved"]["cpu"] == f"{4 * 12_000 + 32_000}m"
    assert spec["capability"]["cpu"] == f"{6 * 12_000 + 40_000}m"
    queues = queues_by_path(rendered(cpu_tree(), NOON, (("ns-p", "p"),)))
    guaranteed = queues["root.gpd-d.gp-p"]["resources"]["guaranteed"]
    assert guaranteed["vcore"] == f"{4 * 12_000 + 32_000}m" and "cpu" not in guaranteed


def test_the_sync_snapshot_gives_a_cpu_flavor_one_core_a_unit(db):
    from jobs.native import queue_sync
    from quotas.models import Flavor, FlavorKind
    from tests import factories as fx

    cpu = Flavor.objects.create(name="cpu-q", vendor="other", model="EPYC", memory_mib=0,
                                k8s_resource_name="cpu", kind=FlavorKind.CPU)
    [node] = fx.nodes(cpu, 1, 95)  # 95 whole cores of 95.5 allocatable
    node.cpu_millicores, node.memory_mib = 95_500, 389_120
    node.save()
    [ref] = queue_sync.snapshot(flavor_names=["cpu-q"]).flavors
    assert dict(ref.per_unit) == {"cpu_millicores": 1000, "memory_mib": 389_120 // 95}
