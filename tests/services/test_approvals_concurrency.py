"""Two approvers deciding the same step at the same moment, each on its own database
connection: exactly one decision wins, the other gets a clear "already decided", and the
audit trail holds one decision."""

import threading
import time

import pytest
from django.db import close_old_connections, connection, transaction

from jobs.models import ApprovalPolicy, Job, JobEvent
from jobs.services import job_submit
from portal.approvals import AlreadyDecided, approval_decide
from portal.models import ApprovalAudit, ApprovalRequest, Membership, Role, User
from tests import factories as fx


def _race(deciders):
    barrier = threading.Barrier(len(deciders))
    outcomes = []

    def run(decide):
        try:
            with transaction.atomic():
                barrier.wait(timeout=60)  # a hang guard
                decide()
                # Hold the winner's transaction open so the other decision surely runs while
                # this one is uncommitted: the race is real, not a matter of timing luck.
                time.sleep(0.5)
            outcomes.append("ok")
        except AlreadyDecided as exc:
            outcomes.append(("already", str(exc.messages[0])))
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=run, args=(d,)) for d in deciders]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return outcomes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("second_approves", [True, False])
def test_two_admins_deciding_at_once_give_one_outcome(world, second_approves, settings):
    settings.LANGUAGE_CODE = "en"  # both threads speak English: the message matched below
    other = User.objects.create_user(username="a_admin2")
    Membership.objects.create(user=other, role=Role.DEPARTMENT_ADMIN, department=world.A)
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name="race",
        kind="training",
        flavor=world.F,
        priority_class=fx.priority(),
        image="img",
        gpus_per_worker=4,
        max_runtime_seconds=3600,
    )
    request = ApprovalRequest.objects.get(kind="job", subject_id=job.pk)
    step = request.steps.get()

    outcomes = _race(
        [
            lambda: approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True),
            lambda: approval_decide(actor=other, step_or_request=step, approve=second_approves),
        ]
    )

    assert len(outcomes) == 2 and outcomes.count("ok") == 1, outcomes
    [(kind, message)] = [o for o in outcomes if o != "ok"]
    assert kind == "already" and "already decided" in message
    decisions = ApprovalAudit.objects.filter(request=request, action__in=["approved", "rejected"])
    assert decisions.count() == 1
    request.refresh_from_db()
    job.refresh_from_db()
    expected = "approved" if decisions.get().action == "approved" else "rejected"
    assert request.state == expected
    assert job.state == ("queued" if expected == "approved" else "rejected")
    # One transition out of pending_approval, whoever won.
    assert JobEvent.objects.filter(job=job, from_state="pending_approval").count() == 1
    assert Job.objects.filter(pk=job.pk, approved=(expected == "approved")).exists()
