"""Issue 18 items 4–6 through ``POST /api/v1/jobs/``: a job that could never run, a priority class
the submitter may not use, a runtime over the centre's maximum — each a 400 naming the field and
the numbers, with nothing created; the allowed cases still answer 201."""

from decimal import Decimal

import pytest

from jobs.models import PriorityClass
from quotas.models import QuotaNode
from tests import factories as fx
from tests.job_posts import post_job as _post
from tests.job_posts import refused as _refused

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _training(db):
    fx.priority("training", 100)


@pytest.fixture
def classes(db):
    PriorityClass.objects.create(
        name="inference-online", value=1000, preemptible=False, allowed_kinds=["inference"]
    )
    PriorityClass.objects.create(
        name="training-high", value=500, min_role="project_admin", approval_below_role=True
    )
    PriorityClass.objects.create(name="admins-only", value=700, min_role="department_admin")


def test_item4_a_job_larger_than_any_cluster_is_a_400(world, api):
    message = _refused(_post(api, world, workers=3, gpus_per_worker=8), "workers")
    assert message == (
        "The job needs 24 × F at once, more than the 16 that the largest cluster has "
        "(a job runs within one cluster)."
    )


def test_item4_a_job_over_the_projects_cap_is_a_400(world, api):
    QuotaNode.objects.filter(pk=world.quota["pa1"].pk).update(borrow_limit=Decimal(2))
    message = _refused(_post(api, world, gpus_per_worker=8), "workers")
    assert (
        message == "The job needs 8 × F at once, more than pa1 may ever hold: 6 (quota 4 + borrow limit 2)."
    )
    message = _refused(_post(api, world, workers=3, gpus_per_worker=3, min_workers=3), "min_workers")
    assert message.startswith("The job needs 9 × F at once")
    elastic = _post(api, world, workers=3, gpus_per_worker=3, min_workers=2)  # starts at 6: the cap
    assert elastic.status_code == 201, elastic.content


def test_item5_a_class_for_another_kind_is_a_400_on_priority(world, api, classes):
    message = _refused(_post(api, world, priority="inference-online"), "priority")
    assert message == "The priority class inference-online is for Inference jobs only."
    assert _post(api, world, priority="inference-online", kind="inference").status_code == 201


def test_item5_a_class_above_the_role_is_a_400_or_an_approval(world, api, classes):
    message = _refused(_post(api, world, priority="admins-only"), "priority")
    assert message == "The priority class admins-only is for the role Department admin or above in pa1."
    assert _post(api, world, user="a_admin", priority="admins-only").status_code == 201
    waiting = _post(api, world, priority="training-high", name="urgent")
    assert waiting.status_code == 201 and waiting.json()["state"] == "pending_approval"
    assert waiting.json()["approval_request"] is not None


def test_item6_a_runtime_over_the_centres_maximum_is_a_400(world, api):
    message = _refused(_post(api, world, kind="dev", max_runtime_seconds=7 * 86400), "max_runtime_seconds")
    assert message == "Development jobs may run at most 72 h here (the centre's maximum); 168 h was asked."
    ok = _post(api, world, kind="dev", max_runtime_seconds=None)
    assert ok.status_code == 201 and ok.json()["max_runtime_seconds"] == 86400
