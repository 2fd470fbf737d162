"""Issue 31 item 5: a submission goes one way down — what it needs to know (the policy, the
submitter's rank, the card count) is read once into a plain value (``jobs.submission``), every
check and the approval decision work from it, and the decision is the same one an existing job
gets (``jobs.approvals.job_approval_decide``).

World (tests/conftest.py): departments A (A1 below it) and B; projects pa (A), pa1 (A1), pb (B);
flavor F on 2 × 8 GPUs."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import translation

from jobs import submission
from jobs.approvals import job_approval_decide
from jobs.models import ApprovalPolicy, PriorityClass, UsageRole
from jobs.services import job_submit
from portal.models import ApprovalRequest, ApprovalStep
from portal.texts import render_in
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"
    with translation.override("en"):
        yield


def _queries_of(queries, table: str) -> list[str]:
    return [q["sql"] for q in queries if f'FROM "{table}"' in q["sql"]]


def test_item5_a_submission_reads_its_policy_once(world):
    """Before: ``approval_reasons`` read the policy for each flavor, and ``job_approval_open``
    read it again for the request's step timeout."""
    ApprovalPolicy.objects.create(department=world.A, max_gpus=4, platform_gpus=6, max_runtime_hours=1)
    with CaptureQueriesContext(connection) as seen:
        job = job_submit(
            actor=world.users["pa1_member"], project=world.pa1, name="big", kind="training",
            flavor=world.F, priority_class=fx.priority(), image="img", workers=1, gpus_per_worker=8,
            max_runtime_seconds=7200,
        )
    assert job.state == "pending_approval"
    assert len(_queries_of(seen.captured_queries, "jobs_approvalpolicy")) == 1


def test_item5_the_submissions_decision_is_the_one_an_existing_job_gets(world):
    """The submit path decides from what it gathered; the same job, decided from its row (the
    budget hold's way), gets the same reasons, steps and card count."""
    ApprovalPolicy.objects.create(department=world.A, max_gpus=4, platform_gpus=6, max_runtime_hours=1)
    urgent = PriorityClass.objects.create(
        name="urgent", value=500, preemptible=False, grace_seconds=30, min_role=UsageRole.PLATFORM_ADMIN,
        approval_below_role=True,
    )
    actor = world.users["pa1_member"]
    job = job_submit(
        actor=actor, project=world.pa1, name="big", kind="training", flavor=world.F,
        priority_class=urgent, image="img", workers=1, gpus_per_worker=8, max_runtime_seconds=7200,
    )
    request = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    stored = [render_in("en", r) for r in request.payload["reasons"]]
    again = job_approval_decide(job, actor)
    assert stored == [render_in("en", r) for r in again.reasons]
    assert len(stored) == 3  # the class, the GPUs, the runtime
    assert "urgent needs approval" in stored[0]
    assert again.platform_step  # 8 cards over the platform's 6, and a class reserved to it
    assert ApprovalStep.objects.filter(request=request).count() == 2
    assert again.cards == Decimal("8.000") == Decimal(request.payload["cards"])


def test_item5_gather_reads_once_what_the_checks_and_the_decision_use(world):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=4)
    sub = submission.gather(
        actor=world.users["pa1_member"], project=world.pa1, kind="training", flavors=[world.F],
        priority_class=fx.priority(), shape=submission.Shape(workers=3, gpus_per_worker=2),
    )
    assert sub.may_submit and sub.policy.department == world.A
    assert sub.cards == (Decimal("6.000"),)
    assert sub.runtime_seconds is None  # no maximum for training jobs in the test settings
    decision = submission.approval(sub, class_needs_approval=False)
    assert [render_in("en", r) for r in decision.reasons] == [
        f"6 GPUs is more than the 4 a job may use in {world.A.name} without approval."
    ]
    assert not decision.platform_step
