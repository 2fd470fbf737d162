"""A mixed fleet with profiles and history, for the domestic readiness report's tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from jobs.models import Job, PriorityClass
from quotas.models import Flavor


def _coverage(**shares) -> dict:
    return {
        name: {"coverage": share, "source": f"{name} operator list", "date": "2026-06-01"}
        for name, share in shares.items()
    }


def mixed_fleet(world) -> dict[str, Flavor]:
    """The reference A100-80G; Ascend-910B at 0.8 declared (pytorch 93 %, mindspore 98 %) that
    ran one template at 0.75 of the reference's speed; Cambricon MLU370 at 0.6 (pytorch 85 %)."""
    flavors = {
        "A100-80G": Flavor.objects.create(
            name="A100-80G",
            vendor="nvidia",
            model="A100",
            memory_mib=81920,
            k8s_resource_name="nvidia.com/gpu",
        ),
        "Ascend-910B": Flavor.objects.create(
            name="Ascend-910B",
            vendor="huawei",
            model="910B",
            memory_mib=65536,
            k8s_resource_name="huawei.com/Ascend910",
            relative_throughput=Decimal("0.8"),
            relative_throughput_source="MLPerf Training v4.0",
            relative_throughput_date="2026-05-01",
            operator_coverage=_coverage(pytorch="0.93", mindspore="0.98"),
        ),
        "MLU370": Flavor.objects.create(
            name="MLU370",
            vendor="cambricon",
            model="MLU370-X8",
            memory_mib=49152,
            k8s_resource_name="cambricon.com/mlu",
            relative_throughput=Decimal("0.6"),
            relative_throughput_source="vendor datasheet",
            relative_throughput_date="2026-04-01",
            operator_coverage=_coverage(pytorch="0.85"),
        ),
    }
    prio = PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})[0]
    start = datetime(2026, 11, 2, tzinfo=UTC)
    for name, seconds in (("A100-80G", 300), ("Ascend-910B", 400)):
        Job.objects.create(
            name="bert",
            project=world.pa1,
            submitted_by=world.users["pa1_member"],
            kind="training",
            flavor=flavors[name],
            priority_class=prio,
            workers=1,
            gpus_per_worker=1,
            image="bert:1",
            command="python train.py",
            state="succeeded",
            state_changed_at=start,
            submitted_at=start,
            started_at=start,
            finished_at=start + timedelta(seconds=seconds),
        )
    return flavors
