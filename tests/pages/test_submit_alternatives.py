"""The submission form with other acceptable flavors and a framework requirement (DESIGN §14)."""

import pytest

from jobs.models import Job
from quotas.models import Cluster, Flavor, Node
from tests.pages.test_submit import _body

pytestmark = pytest.mark.django_db


@pytest.fixture
def npu(world):
    npu = Flavor.objects.create(
        name="Ascend-910B",
        vendor="huawei",
        model="910B",
        memory_mib=65536,
        k8s_resource_name="huawei.com/Ascend910",
        operator_coverage={"pytorch": {"coverage": "0.85"}},
    )
    Node.objects.create(
        cluster=Cluster.objects.first(), name="npu-0", flavor=npu, gpu_count=8, zone="z", spine="s", leaf="l9"
    )
    return npu


def test_the_form_submits_acceptable_flavors_in_order(page_client, world, prio, npu):
    response = page_client("pa1_member").post(
        "/jobs/new/", _body(world, prio, alternatives="Ascend-910B", workers="1"), follow=True
    )
    assert response.redirect_chain, response.context["form"].errors
    job = Job.objects.get()
    assert response.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert (job.flavor, job.flavor_choices) == (world.F, [world.F.pk, npu.pk])


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"alternatives": "H800"}, "alternatives"),
        ({"alternatives": "F"}, "flavor"),  # F twice
        (
            {"alternatives": "Ascend-910B", "framework": "pytorch", "min_operator_coverage": "0.9"},
            "framework",
        ),
    ],
)
def test_bad_alternatives_show_errors_and_write_nothing(page_client, world, prio, npu, changes, field):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, **changes))
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert not Job.objects.exists()
