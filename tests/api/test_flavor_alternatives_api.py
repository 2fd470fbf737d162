"""``POST /api/v1/jobs/`` with acceptable flavors ``"A|B"`` and a framework requirement (DESIGN
§14): 201 with the order kept; 400 naming the field, nothing written, for an unknown, inactive
or repeated flavor in the list and for a framework requirement no listed flavor meets."""

from decimal import Decimal

import pytest
from django.urls import reverse

from jobs.models import Job, JobEvent
from quotas.models import Cluster, Flavor, Node
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def npu(world):
    """An Ascend flavor with nodes beside the world's F; F is profiled for pytorch at 0.95."""
    fx.priority("training", 100)
    f = Flavor.objects.get(name="F")
    f.operator_coverage = {"pytorch": {"coverage": "0.95", "source": "vendor", "date": "2026-06-01"}}
    f.save()
    npu = Flavor.objects.create(
        name="Ascend-910B",
        vendor="huawei",
        model="910B",
        memory_mib=65536,
        k8s_resource_name="huawei.com/Ascend910",
        operator_coverage={"pytorch": {"coverage": "0.85"}},
    )
    cluster = Cluster.objects.first()
    Node.objects.create(
        cluster=cluster, name="npu-0", flavor=npu, gpu_count=8, zone="z", spine="s", leaf="l9"
    )
    return npu


def _post(api, world, **changes):
    body = {
        "name": "job",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": "F",
        "priority": "training",
        "image": "pytorch:2.3",
        "max_runtime_seconds": 3600,
        **changes,
    }
    return api(world.users["pa1_member"]).post(reverse("api:job-list"), body, format="json")


def _refused(response, field) -> str:
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body) == [field], body
    assert (Job.objects.count(), JobEvent.objects.count()) == (0, 0)
    return " ".join(body[field])


def test_acceptable_flavors_are_kept_in_order(api, world, npu):
    response = _post(api, world, flavor="Ascend-910B|F")
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert response.json()["flavor"] == "Ascend-910B"
    assert job.flavor_choices == [npu.pk, Flavor.objects.get(name="F").pk]
    assert response.json()["flavors"] == ["Ascend-910B", "F"]
    listed = api(world.users["pa1_member"]).get("/api/v1/jobs/").json()["results"]
    assert [j["flavors"] for j in listed] == [["Ascend-910B", "F"]]  # the list's row plan too


def test_a_framework_requirement_picks_the_flavors_that_meet_it(api, world, npu):
    response = _post(api, world, flavor="Ascend-910B|F", framework="pytorch", min_operator_coverage="0.9")
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert (job.flavor.name, job.flavor_choices, job.framework) == ("F", [], "pytorch")
    assert job.min_operator_coverage == Decimal("0.9")


def test_an_unknown_flavor_in_the_list_is_a_400(api, world, npu):
    assert "H800" in _refused(_post(api, world, flavor="F|H800"), "flavor")


def test_a_repeated_flavor_is_a_400(api, world, npu):
    assert "F" in _refused(_post(api, world, flavor="F|Ascend-910B|F"), "flavor")


def test_an_empty_part_is_a_400(api, world, npu):
    _refused(_post(api, world, flavor="F||Ascend-910B"), "flavor")


def test_an_inactive_flavor_in_the_list_is_a_400(api, world, npu):
    npu.active = False
    npu.save()
    assert "Ascend-910B" in _refused(_post(api, world, flavor="F|Ascend-910B"), "flavor")


def test_a_framework_requirement_no_flavor_meets_is_a_400(api, world, npu):
    text = _refused(
        _post(api, world, flavor="F|Ascend-910B", framework="pytorch", min_operator_coverage="0.99"),
        "framework",
    )
    assert "99 %" in text and "F 95 %" in text and "Ascend-910B 85 %" in text


def test_a_minimum_coverage_without_a_framework_is_a_400(api, world, npu):
    _refused(_post(api, world, min_operator_coverage="0.5"), "framework")


def test_the_schema_documents_the_separator(api, world):
    schema = api(world.users["pa1_member"]).get(reverse("schema"), {"format": "json"}).json()
    flavor = schema["components"]["schemas"]["JobInRequest"]["properties"]["flavor"]
    assert "A100-80G|Ascend-910B" in flavor["description"]
