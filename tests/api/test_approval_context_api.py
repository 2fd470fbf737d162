"""The approval request's context in the API (issue 24 item 3): new ``context`` key of the
request detail (the existing keys unchanged), decimal strings, null for whoever may not see it."""

import pytest
from django.urls import reverse
from django.utils import timezone

from billing.models import Rate
from jobs.approvals import approval_policy_set
from tests.approval_scene import job_request, make_scene

pytestmark = pytest.mark.django_db

EXISTING = {
    "id", "kind", "state", "summary", "reason", "subject_id", "payload", "requester", "department",
    "project", "counterparty", "created_at", "decided_at", "current_step", "can_decide", "can_cancel",
    "steps", "audit",
}  # fmt: skip


@pytest.fixture
def req(world):
    make_scene(world, timezone.now())
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    return job_request(world)


def test_the_detail_has_the_context_for_an_approver(world, api, req):
    answer = api(world.users["a_admin"]).get(reverse("api:approval-detail", args=[req.pk]))
    assert answer.status_code == 200
    body = answer.json()
    assert set(body) == EXISTING | {"context"}
    ctx = body["context"]
    assert ctx["flavor"] == "F"
    assert ctx["usage"] == [
        {
            "role": "owner",
            "owner": str(world.pa1),
            "quota": "4.000",
            "effective_quota": "4.000",
            "in_quota": "2",
            "borrowed": "1",
        }
    ]
    assert ctx["requester_usage"] == {"owner": str(world.pa1), "in_quota": "2", "borrowed": "0"}
    assert ctx["capacity"] == {"healthy": "16", "held": "6", "free": "10"}
    assert ctx["cost"] == {
        "basis": "job",
        "cards": "4.000",
        "hours": "1.00",
        "card_hours": "4.000",
        "amount": "10.00",
        "currency": Rate.objects.first().currency,
    }
    assert ctx["history"] == {"days": 90, "approved": 1, "rejected": 1, "jobs_run": 2, "jobs_idle": 1}
    assert [(b["of"], b["card_hours"]) for b in ctx["budgets"]] == [
        ("project", "100.00"),
        ("department", "1000.00"),
    ]
    for b in ctx["budgets"]:
        assert float(b["remaining"]) == float(b["card_hours"]) - float(b["used"])
    # The department's money budget: 20.00 of 500.00 spent (8 card-hours at 2.50).
    assert [(b["amount"], b["used_amount"], b["remaining_amount"]) for b in ctx["budgets"]] == [
        (None, None, None),
        ("500.00", "20.00", "480.00"),
    ]


@pytest.mark.parametrize("persona", ["pa1_member", "pa1_admin"])
def test_who_sees_the_request_but_not_its_context_gets_null(world, api, req, persona):
    answer = api(world.users[persona]).get(reverse("api:approval-detail", args=[req.pk]))
    assert answer.status_code == 200 and answer.json()["context"] is None


def test_another_tenant_still_gets_404(world, api, req):
    answer = api(world.users["b_admin"]).get(reverse("api:approval-detail", args=[req.pk]))
    assert answer.status_code == 404
