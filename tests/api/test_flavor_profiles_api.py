"""Flavor profiles through the API (DESIGN §14): platform admins edit them, the rules of
``quotas.profiles`` answer bad input with a 400 naming the field, and the measured throughput
from job history is shown next to the declared value."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import translation

from jobs.models import Job, PriorityClass
from jobs.throughput import measured_throughput
from quotas.models import Flavor

pytestmark = pytest.mark.django_db
PROFILE = {
    "sharing_mode": "vnpu",
    "relative_throughput": "0.800",
    "relative_throughput_source": "MLPerf Training v4.0, BERT",
    "relative_throughput_date": "2026-05-01",
    "operator_coverage": {
        "pytorch": {"coverage": "0.93", "source": "torch_npu operator list 6.0", "date": "2026-06-01"},
    },
}


def _url(flavor) -> str:
    return f"/api/v1/flavors/{flavor.pk}/"


def test_a_platform_admin_edits_the_profile(world, api):
    response = api(world.users["platform"]).patch(_url(world.F), PROFILE, format="json")
    assert response.status_code == 200, response.content
    world.F.refresh_from_db()
    assert world.F.relative_throughput == Decimal("0.8")
    assert world.F.operator_coverage["pytorch"]["coverage"] == "0.93"
    assert response.json()["sharing_mode"] == "vnpu"


@pytest.mark.parametrize(
    "persona", ["a_admin", "a_finance", "auditor", "pa1_admin", "pa1_member", "outsider"]
)
def test_nobody_else_edits_a_profile(world, api, persona):
    response = api(world.users[persona]).patch(_url(world.F), PROFILE, format="json")
    assert response.status_code in (403, 404)
    world.F.refresh_from_db()
    assert world.F.relative_throughput == Decimal(1) and world.F.operator_coverage == {}


@pytest.mark.parametrize(
    ("change", "field", "text"),
    [
        (
            {"operator_coverage": {"pytorch": {"coverage": "1.2", "source": "x", "date": "2026-06-01"}}},
            "operator_coverage",
            "decimal string from 0 to 1",
        ),
        (
            {"operator_coverage": {"pytorch": {"coverage": "0.9", "date": "2026-06-01"}}},
            "operator_coverage",
            "exactly coverage, source and date",
        ),
        (
            {"operator_coverage": {"pytorch": {"coverage": "0.9", "source": "x", "date": "2999-01-01"}}},
            "operator_coverage",
            "in the future",
        ),
        ({"relative_throughput_source": ""}, "relative_throughput_source", "where the value comes from"),
    ],
)
def test_a_bad_profile_is_a_400_naming_the_field(world, api, change, field, text):
    response = api(world.users["platform"]).patch(_url(world.F), {**PROFILE, **change}, format="json")
    assert response.status_code == 400
    assert text in str(response.json()[field])
    world.F.refresh_from_db()
    assert world.F.operator_coverage == {}


def _runs(flavor, image, seconds_each, *, state="succeeded", project, user, prio):
    start = datetime(2026, 11, 1, tzinfo=UTC)
    for seconds in seconds_each:
        Job.objects.create(
            name="t",
            project=project,
            submitted_by=user,
            kind="training",
            flavor=flavor,
            priority_class=prio,
            workers=1,
            gpus_per_worker=1,
            image=image,
            command="python train.py",
            state=state,
            state_changed_at=start,
            submitted_at=start,
            started_at=start,
            finished_at=start + timedelta(seconds=seconds),
        )


def test_measured_throughput_is_the_median_template_ratio_with_its_samples(world, api):
    reference = Flavor.objects.create(
        name="A100-80G", vendor="nvidia", model="A100", memory_mib=81920, k8s_resource_name="nvidia.com/gpu"
    )
    ascend = Flavor.objects.create(
        name="Ascend-910B",
        vendor="huawei",
        model="910B",
        memory_mib=65536,
        k8s_resource_name="huawei.com/Ascend910",
    )
    prio = PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})[0]
    kw = {"project": world.pa1, "user": world.users["pa1_member"], "prio": prio}
    _runs(reference, "bert:1", [100, 120], **kw)  # median 110
    _runs(ascend, "bert:1", [125, 150], **kw)  # median 137.5 → 0.8
    _runs(reference, "resnet:1", [90], **kw)
    _runs(ascend, "resnet:1", [100], **kw)  # 0.9
    _runs(reference, "gpt:1", [70], **kw)
    _runs(ascend, "gpt:1", [100], **kw)  # 0.7
    _runs(ascend, "gpt:1", [10], state="failed", **kw)  # did not finish the work: not counted
    _runs(ascend, "only-here:1", [50], **kw)  # never ran on the reference: no ratio
    found = measured_throughput([ascend.pk])[ascend.pk]
    assert (found.ratio, found.templates, found.runs) == (Decimal("0.800"), 3, 4)
    body = api(world.users["platform"]).get(_url(ascend)).json()
    assert body["measured_throughput"] == {"ratio": "0.800", "templates": 3, "runs": 4}
    assert body["relative_throughput"] == "1.000"  # the declared value, beside it
    assert api(world.users["platform"]).get(_url(world.F)).json()["measured_throughput"] is None


def test_the_admin_form_checks_the_profile_too(world):
    from quotas.admin import FlavorAdminForm

    fields = {
        "name": "Ascend-910B",
        "vendor": "huawei",
        "model": "910B",
        "memory_mib": 65536,
        "fraction": "1",
        "k8s_resource_name": "huawei.com/Ascend910",
        "pool_overcommit_ratio": "1",
        "active": True,
        "sharing_mode": "vnpu",
        "relative_throughput": "0.8",
        "relative_throughput_source": "MLPerf Training v4.0",
        "relative_throughput_date": "2026-05-01",
    }
    good = FlavorAdminForm(
        data={
            **fields,
            "operator_coverage": '{"pytorch": {"coverage": "0.93", '
            '"source": "torch_npu list", "date": "2026-06-01"}}',
        }
    )
    assert good.is_valid(), good.errors
    bad = FlavorAdminForm(
        data={
            **fields,
            "operator_coverage": '{"pytorch": {"coverage": "93%", '
            '"source": "torch_npu list", "date": "2026-06-01"}}',
        }
    )
    assert not bad.is_valid()
    assert "0 到 1 之间的小数字符串" in str(bad.errors["operator_coverage"])  # the site language
    with translation.override("en"):
        assert "decimal string from 0 to 1" in str(FlavorAdminForm(data=bad.data).errors["operator_coverage"])



def test_board_power_is_part_of_the_profile(world, api):
    """DESIGN §18: a flavor's board power (W per card) is read and set with its profile; a
    negative value is a 400 and changes nothing."""
    client = api(world.users["platform"])
    assert client.get(_url(world.F)).json()["board_watts"] is None
    assert client.patch(_url(world.F), {"board_watts": 700}, format="json").status_code == 200
    world.F.refresh_from_db()
    assert world.F.board_watts == 700
    assert client.patch(_url(world.F), {"board_watts": -5}, format="json").status_code == 400
    world.F.refresh_from_db()
    assert world.F.board_watts == 700
