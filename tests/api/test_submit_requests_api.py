"""Issue 33 item 2 through ``POST /api/v1/jobs/``: per-worker CPU, memory and local disk (DESIGN
§15). A job stores what it asked and the share per unit it was submitted with; every bad figure an
attacker could send (a string, a float, a boolean, zero, negative, huge, more than the flavor's
biggest node can give one worker, more than one unit's share for a shared worker) is a 400 on its
field that creates nothing — never clamped; a job asking more per card than the department's
``max_request_ratio`` × the share waits for approval, with a reason that names it."""

from decimal import Decimal

import pytest

from jobs.approvals import job_approval_decide
from jobs.models import ApprovalPolicy, Job
from jobs.states import JobState
from portal.models import ApprovalRequest
from portal.texts import render_in
from quotas.models import Node
from tests import factories as fx
from tests.job_posts import post_job as _post
from tests.job_posts import refused as _refused
from tests.job_posts import written as _written

pytestmark = pytest.mark.django_db

# Two nodes of 8 GPUs, 96 cores, 768 GiB and 3,500 GiB of disk: a GPU's share is 12 cores, 96 GiB
# and 437 GiB; one worker may ask at most 8 × that.
SHARE = {"cpu_millicores": 12_000, "memory_mib": 98_304, "local_disk_gib": 437}


@pytest.fixture(autouse=True)
def _sized(world):
    fx.priority("training", 100)
    Node.objects.filter(flavor__name="F").update(
        cpu_millicores=96_000, memory_mib=786_432, local_disk_gib=3_500
    )


def test_a_job_stores_its_request_and_the_share_it_was_submitted_with(world, api):
    response = _post(api, world, gpus_per_worker=2, cpu_millicores=30_000, min_cuda_version="12.4")
    assert response.status_code == 201, response.content
    job = Job.objects.get()
    assert (job.cpu_millicores, job.memory_mib, job.local_disk_gib) == (30_000, None, None)
    assert job.unit_share == SHARE
    assert job.min_cuda_version == "12.4"
    body = response.json()
    assert (body["cpu_millicores"], body["memory_mib"], body["unit_share"]) == (30_000, None, SHARE)


def test_a_job_that_asks_nothing_keeps_the_share_and_no_figures(world, api):
    assert _post(api, world).status_code == 201
    job = Job.objects.get()
    assert (job.cpu_millicores, job.memory_mib, job.local_disk_gib, job.min_cuda_version) == (
        None, None, None, "")
    assert job.unit_share == SHARE


@pytest.mark.parametrize("value", ["16384", "16Gi", 1.5, 16384.0, True, [1], {"n": 1}, ""])
def test_a_figure_that_is_not_a_json_integer_is_a_400(world, api, value):
    message = _refused(_post(api, world, memory_mib=value), "memory_mib")
    assert "whole number" in message


@pytest.mark.parametrize("value", [0, -1, -(10**12)])
def test_zero_or_negative_is_a_400(world, api, value):
    message = _refused(_post(api, world, cpu_millicores=value), "cpu_millicores")
    assert "greater than or equal to 1" in message


@pytest.mark.parametrize("value", [10**9 + 1, 2**63, 10**100])
def test_an_absurd_figure_is_a_400_not_an_overflow(world, api, value):
    message = _refused(_post(api, world, local_disk_gib=value), "local_disk_gib")
    assert "less than or equal to 1000000000" in message


def test_more_than_the_biggest_node_can_give_one_worker_is_a_400_naming_the_limit(world, api):
    Node.objects.filter(name="n1").update(gpu_count=4, cpu_millicores=48_000, memory_mib=393_216)
    message = _refused(_post(api, world, gpus_per_worker=8, cpu_millicores=96_001), "cpu_millicores")
    assert message == (
        "More than any node of F can give one worker: at most 96 cores (its biggest node, n0, has 8 "
        "units at 12 cores each)."
    )
    # The limit itself is accepted, and is not clamped when one over is asked (nothing was written).
    assert _post(api, world, gpus_per_worker=8, cpu_millicores=96_000).status_code == 201
    assert Job.objects.get().cpu_millicores == 96_000


def test_every_refused_figure_is_named_at_once(world, api):
    response = _post(api, world, cpu_millicores=10**6, memory_mib=0, min_cuda_version="twelve")
    assert response.status_code == 400
    assert set(response.json()) == {"memory_mib"}  # the body's types and bounds come first
    response = _post(api, world, cpu_millicores=10**6, memory_mib=10**8, min_cuda_version="twelve")
    assert set(response.json()) == {"cpu_millicores", "memory_mib", "min_cuda_version"}
    assert _written() == (0, 0, 0)


def test_a_shared_worker_may_ask_at_most_one_units_share(world, api):
    world.F.shareable = True
    world.F.save()
    message = _refused(_post(api, world, gpu_milli=250, memory_mib=98_305), "memory_mib")
    assert message == "A shared worker may ask at most one F unit's share: 96 GiB."
    response = _post(api, world, gpu_milli=250, memory_mib=98_304)
    assert response.status_code == 201, response.content


@pytest.mark.parametrize("version", ["12", "12.4.1", "v12.4", "12,4", "1234.1", "12.4 beta", "１２.４"])
def test_a_min_cuda_version_that_is_not_n_dot_n_is_a_400(world, api, version):
    message = _refused(_post(api, world, min_cuda_version=version), "min_cuda_version")
    assert message == "A CUDA version such as 12.4."


def test_asking_more_per_card_than_the_policys_ratio_needs_approval_with_the_reason(world, api):
    ApprovalPolicy.objects.create(department=world.A, max_request_ratio=Decimal("1.5"))
    # 2 GPUs × 12 cores × 1.5 = 36 cores: at the ratio no approval, above it one.
    assert _post(api, world, gpus_per_worker=2, cpu_millicores=36_000).json()["state"] == JobState.QUEUED
    response = _post(api, world, name="big", gpus_per_worker=2, cpu_millicores=36_001)
    assert response.json()["state"] == JobState.PENDING_APPROVAL
    request = ApprovalRequest.objects.get()
    texts = [render_in("en", r) for r in request.payload["reasons"]]
    assert texts == [
        "Asks 1.51× a card's share of CPU per card (12 cores); more than 1.5× needs approval in Dept A."
    ]
    # The same job decided from its row (jobs.approvals.job_approval_decide) gets the same reason.
    job = Job.objects.get(name="big")
    again = job_approval_decide(job, job.submitted_by)
    assert [render_in("en", r) for r in again.reasons] == texts


def test_without_a_ratio_a_big_request_needs_no_approval(world, api):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=100)
    response = _post(api, world, gpus_per_worker=1, memory_mib=786_432)
    assert response.json()["state"] == JobState.QUEUED


def test_a_template_carries_the_request_and_its_figures_are_checked_on_save(world):
    from django.core.exceptions import ValidationError

    from jobs import templates_service as templates

    values = {"kind": "training", "flavor": "F", "priority": "training", "image": "pytorch:2.3",
              "gpus_per_worker": 2, "max_runtime_seconds": 3600}
    user, project = world.users["pa1_member"], world.pa1
    refusals = [
        ({"memory_mib": "16Gi"}, "memory_mib"),
        ({"cpu_millicores": 1.5}, "cpu_millicores"),
        ({"cpu_millicores": 192_001}, "cpu_millicores"),  # at most 96 cores: the biggest node, 8 × 12
        ({"min_cuda_version": "x"}, "min_cuda_version"),
    ]
    for bad, field in refusals:
        with pytest.raises(ValidationError) as refused:
            templates.template_save(actor=user, project=project, name="t", values=values | bad)
        assert list(refused.value.message_dict) == [field]
    template = templates.template_save(actor=user, project=project, name="t", values=values | {
        "cpu_millicores": 30_000, "memory_mib": None, "min_cuda_version": "12.4"})
    job = templates.template_submit(actor=user, template=template, overrides={"name": "from-t"})
    assert (job.cpu_millicores, job.memory_mib, job.min_cuda_version, job.unit_share) == (
        30_000, None, "12.4", SHARE)
    assert templates.job_values(job)[0]["cpu_millicores"] == 30_000
