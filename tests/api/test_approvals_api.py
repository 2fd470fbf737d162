"""The approvals API (DESIGN §6, §9): job submission into pending_approval, decisions (403 for
the requester, 409 when already decided, 404 outside the scope), bulk decisions, quota and loan
requests, policies, notifications; bad input is 400 with field errors and writes nothing."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import ApprovalPolicy, Job, PriorityClass
from portal.models import ApprovalAudit, ApprovalRequest, ApprovalStep, Notification
from quotas.models import Loan, QuotaNode

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"


@pytest.fixture
def prio(db):
    return PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})[0]


def _written():
    return (
        ApprovalRequest.objects.count(),
        ApprovalStep.objects.count(),
        ApprovalAudit.objects.count(),
        Notification.objects.count(),
        ApprovalPolicy.objects.count(),
        Loan.objects.count(),
        list(QuotaNode.objects.order_by("id").values_list("quota", flat=True)),
    )


def _submit(api, user, project, gpus=4):
    body = {
        "name": "big",
        "project": project.pk,
        "kind": "training",
        "flavor": "F",
        "priority": "training",
        "image": "img",
        "gpus_per_worker": gpus,
        "max_runtime_seconds": 3600,
    }
    return api(user).post(reverse("api:job-list"), body, format="json")


@pytest.fixture
def pending(world, api, prio):
    """A job of pa1_member over A's policy, waiting for a_admin."""
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    response = _submit(api, world.users["pa1_member"], world.pa1)
    assert response.status_code == 201, response.content
    return response.json()


def test_submitting_over_policy_answers_pending_approval_with_the_request(world, api, pending):
    assert pending["state"] == "pending_approval"
    request_id = pending["approval_request"]
    assert ApprovalRequest.objects.get(pk=request_id).subject_id == pending["id"]
    job = api(world.users["pa1_member"]).get(reverse("api:job-detail", args=[pending["id"]])).json()
    assert job["approval_request"] == request_id
    listed = api(world.users["pa1_member"]).get(reverse("api:job-list")).json()["results"]
    assert listed[0]["approval_request"] == request_id

    detail = api(world.users["pa1_member"]).get(reverse("api:approval-detail", args=[request_id])).json()
    assert detail["kind"] == "job" and detail["state"] == "pending"
    assert [s["approver_role"] for s in detail["steps"]] == ["department_admin"]
    assert detail["current_step"]["department"] == world.A.pk
    assert [a["action"] for a in detail["audit"]] == ["created", "opened"]
    assert detail["can_decide"] is False and detail["can_cancel"] is True
    assert (
        api(world.users["a_admin"])
        .get(reverse("api:approval-detail", args=[request_id]))
        .json()["can_decide"]
    )


def test_a_job_under_policy_is_queued_without_a_request(world, api, pending):
    response = _submit(api, world.users["pa1_member"], world.pa1, gpus=1)
    assert response.json()["state"] == "queued" and response.json()["approval_request"] is None


def test_approving_queues_the_job_and_a_second_decision_is_409(world, api, pending):
    url = reverse("api:approval-decide", args=[pending["approval_request"]])
    response = api(world.users["a_admin"]).post(url, {"approve": True, "comment": "ok"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["state"] == "approved"
    assert Job.objects.get(pk=pending["id"]).state == "queued"
    again = api(world.users["platform"]).post(url, {"approve": False}, format="json")
    assert again.status_code == 409
    assert "already decided" in again.json()["detail"]
    assert ApprovalAudit.objects.filter(action__in=["approved", "rejected"]).count() == 1


def test_the_requester_gets_403_even_as_platform_admin(world, api, prio):
    ApprovalPolicy.objects.create(department=world.A, max_gpus=2)
    job = _submit(api, world.users["platform"], world.pa).json()
    response = api(world.users["platform"]).post(
        reverse("api:approval-decide", args=[job["approval_request"]]), {"approve": True}, format="json"
    )
    assert response.status_code == 403
    assert "segregation of duties" in response.json()["detail"]
    assert Job.objects.get(pk=job["id"]).state == "pending_approval"


@pytest.mark.parametrize(
    ("persona", "status"),
    [("b_admin", 404), ("outsider", 404), ("pa1_admin", 403), ("auditor", 403), ("a_finance", 403)],
)
def test_who_cannot_decide(world, api, pending, persona, status):
    before = _written()
    url = reverse("api:approval-decide", args=[pending["approval_request"]])
    response = api(world.users[persona]).post(url, {"approve": True}, format="json")
    assert response.status_code == status, response.content
    assert _written() == before
    detail = api(world.users[persona]).get(reverse("api:approval-detail", args=[pending["approval_request"]]))
    assert detail.status_code == (404 if status == 404 else 200)


@pytest.mark.parametrize("body", [{}, {"approve": "maybe"}, {"approve": True, "comment": "x" * 2001}])
def test_bad_decisions_are_400_and_change_nothing(world, api, pending, body):
    before = _written()
    url = reverse("api:approval-decide", args=[pending["approval_request"]])
    response = api(world.users["a_admin"]).post(url, body, format="json")
    assert response.status_code == 400
    assert set(response.json()) <= {"approve", "comment"} and response.json()
    assert _written() == before


def test_reject_then_the_job_is_rejected(world, api, pending):
    url = reverse("api:approval-decide", args=[pending["approval_request"]])
    response = api(world.users["a_admin"]).post(url, {"approve": False, "comment": "too big"}, format="json")
    assert response.json()["state"] == "rejected"
    assert Job.objects.get(pk=pending["id"]).state == "rejected"


def test_bulk_decide_reports_per_id(world, api, pending):
    second = _submit(api, world.users["pa1_member"], world.pa1, gpus=3).json()
    ApprovalPolicy.objects.create(department=world.B, max_gpus=2)
    foreign = _submit(api, world.users["pb_member"], world.pb).json()
    ids = [pending["approval_request"], second["approval_request"], foreign["approval_request"], 999999]
    response = api(world.users["a_admin"]).post(
        reverse("api:approval-bulk-decide"), {"ids": ids, "approve": True}, format="json"
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert [(r["id"], r["ok"]) for r in results] == [
        (ids[0], True),
        (ids[1], True),
        (ids[2], False),
        (ids[3], False),
    ]
    assert results[2]["error"] == results[3]["error"] == "Not found."  # another tenant's reads as missing
    assert Job.objects.get(pk=foreign["id"]).state == "pending_approval"
    bad = api(world.users["a_admin"]).post(
        reverse("api:approval-bulk-decide"), {"ids": [], "approve": True}, format="json"
    )
    assert bad.status_code == 400 and "ids" in bad.json()


def test_list_filters(world, api, pending):
    ApprovalPolicy.objects.create(department=world.B, max_gpus=2)
    _submit(api, world.users["pb_member"], world.pb)

    def ids(user, query=""):
        response = api(world.users[user]).get(reverse("api:approval-list") + query)
        assert response.status_code == 200
        return [r["id"] for r in response.json()["results"]]

    mine = pending["approval_request"]
    assert ids("a_admin", "?inbox=1") == [mine]
    assert ids("pa1_member", "?inbox=1") == []
    assert ids("pa1_member", "?mine=1") == [mine]
    assert ids("a_admin", "?mine=1") == []
    assert len(ids("platform", "?kind=job&state=pending")) == 2
    assert ids("platform", "?inbox=true") == []  # department steps are not addressed to the platform
    assert ids("platform", "?state=approved") == []


def test_cancel_and_comment(world, api, pending):
    request_id = pending["approval_request"]
    comment = api(world.users["a_admin"]).post(
        reverse("api:approval-comment", args=[request_id]), {"comment": "why?"}, format="json"
    )
    assert comment.status_code == 201 and comment.json()["action"] == "comment"
    empty = api(world.users["a_admin"]).post(
        reverse("api:approval-comment", args=[request_id]), {}, format="json"
    )
    assert empty.status_code == 400 and "comment" in empty.json()
    refused = api(world.users["a_admin"]).post(
        reverse("api:approval-cancel", args=[request_id]), {}, format="json"
    )
    assert refused.status_code == 403
    response = api(world.users["pa1_member"]).post(
        reverse("api:approval-cancel", args=[request_id]), {}, format="json"
    )
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    assert Job.objects.get(pk=pending["id"]).state == "cancelled"
    again = api(world.users["pa1_member"]).post(
        reverse("api:approval-cancel", args=[request_id]), {}, format="json"
    )
    assert again.status_code == 409


# --- quota and loan requests ----------------------------------------------------------------------


def test_quota_request_and_its_two_entry_points(world, api):
    client = api(world.users["pa1_member"])
    response = client.post(
        reverse("api:quota-request"), {"flavor": "F", "project": world.pa1.pk, "quota": "2"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["kind"] == "quota" and response.json()["payload"]["quota"] == "2"
    generic = api(world.users["pb_member"]).post(
        reverse("api:approval-list"),
        {"kind": "quota", "flavor": "F", "project": world.pb.pk, "quota": "3", "reason": "more"},
        format="json",
    )
    assert generic.status_code == 201, generic.content
    assert generic.json()["reason"] == "more"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "job", "flavor": "F"}, "kind"),
        ({"kind": "nope"}, "kind"),
        ({"flavor": "F", "project": "PA1", "quota": "2"}, "kind"),
        ({"kind": "quota", "flavor": "F", "quota": "2"}, "project"),
        ({"kind": "quota", "flavor": "nope", "project": "PA1", "quota": "2"}, "flavor"),
        ({"kind": "quota", "flavor": "F", "project": "PA1", "quota": "-1"}, "quota"),
        ({"kind": "quota", "flavor": "F", "project": "PA1", "quota": "2.5"}, "quota"),  # F is not shareable
        ({"kind": "quota", "flavor": "F", "project": "PB", "quota": "2"}, "project"),  # invisible: 400
        (
            {
                "kind": "loan",
                "borrower": "QA1",
                "lender": "B",
                "amount": "99",
                "starts_at": "NOW",
                "ends_at": "SOON",
            },
            "amount",
        ),
        (
            {
                "kind": "loan",
                "borrower": "QA1",
                "lender": "ZZ",
                "amount": "1",
                "starts_at": "NOW",
                "ends_at": "SOON",
            },
            "lender",
        ),
        (
            {
                "kind": "loan",
                "borrower": "QA1",
                "lender": "B",
                "amount": "1",
                "starts_at": "SOON",
                "ends_at": "NOW",
            },
            "ends_at",
        ),
        (
            {
                "kind": "loan",
                "borrower": "QPB",
                "lender": "B",
                "amount": "1",
                "starts_at": "NOW",
                "ends_at": "SOON",
            },
            "borrower",
        ),  # pb's node is invisible to A's admin
    ],
)
def test_bad_requests_are_400_and_write_nothing(world, api, body, field):
    now = timezone.now()
    refs = {
        "PA1": world.pa1.pk,
        "PB": world.pb.pk,
        "QA1": world.quota["A1"].pk,
        "QPB": world.quota["pb"].pk,
        "NOW": now.isoformat(),
        "SOON": (now + timedelta(hours=2)).isoformat(),
    }
    body = {k: refs.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    before = _written()
    response = api(world.users["a_admin"]).post(reverse("api:approval-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert _written() == before


def test_a_member_asking_for_another_projects_quota_is_refused(world, api):
    response = api(world.users["pa1_member"]).post(
        reverse("api:quota-request"), {"flavor": "F", "department": world.A1.pk, "quota": "5"}, format="json"
    )
    assert response.status_code == 403


def test_loan_request_to_active_loan_through_the_api(world, api):
    now = timezone.now()
    body = {
        "borrower": world.quota["A1"].pk,
        "lender": "B",
        "amount": "2",
        "starts_at": now.isoformat(),
        "ends_at": (now + timedelta(days=2)).isoformat(),
        "reason": "deadline",
    }
    response = api(world.users["a_admin"]).post(reverse("api:loan-request"), body, format="json")
    assert response.status_code == 201, response.content
    request_id = response.json()["id"]
    assert response.json()["counterparty"] == world.B.pk
    # The lender's admin sees it in the inbox and approves it.
    inbox = api(world.users["b_admin"]).get(reverse("api:approval-list") + "?inbox=1").json()["results"]
    assert [r["id"] for r in inbox] == [request_id]
    decided = api(world.users["b_admin"]).post(
        reverse("api:approval-decide", args=[request_id]), {"approve": True}, format="json"
    )
    assert decided.status_code == 200, decided.content
    loan = Loan.objects.get(pk=decided.json()["subject_id"])
    assert loan.state == "active"
    assert (
        api(world.users["a_admin"]).get(reverse("api:loan-detail", args=[loan.pk])).json()["state"]
        == "active"
    )


# --- policies -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "dept", "status"),
    [
        ("platform", "A", 201),
        ("a_admin", "A", 403),
        ("a_admin", "A1", 201),
        ("b_admin", "A1", 400),
        ("pa1_member", "A1", 403),
        ("auditor", "A1", 403),
    ],
)
def test_who_writes_policies(world, api, persona, dept, status):
    before = _written()
    response = api(world.users[persona]).post(
        reverse("api:approvalpolicy-list"),
        {"department": getattr(world, dept).pk, "max_gpus": 8, "flavors": ["F"]},
        format="json",
    )
    assert response.status_code == status, response.content
    if status == 201:
        assert response.json()["flavors"] == ["F"] and response.json()["updated_by"] == persona
    else:
        assert _written() == before


def test_policy_update_delete_and_bad_input(world, api):
    client = api(world.users["platform"])
    created = client.post(
        reverse("api:approvalpolicy-list"), {"department": world.A.pk, "max_gpus": 8}, format="json"
    ).json()
    url = reverse("api:approvalpolicy-detail", args=[created["id"]])
    before = _written()
    for body, field in [
        ({"platform_gpus": 4}, "platform_gpus"),  # below max_gpus 8
        ({"max_runtime_hours": 0}, "max_runtime_hours"),
        ({"flavors": ["nope"]}, "flavors"),
        ({"department": world.B.pk}, "department"),
    ]:
        response = client.patch(url, body, format="json")
        assert response.status_code == 400 and field in response.json(), (body, response.content)
    assert _written() == before
    duplicate = client.post(reverse("api:approvalpolicy-list"), {"department": world.A.pk}, format="json")
    assert duplicate.status_code == 400 and "department" in duplicate.json()
    assert client.patch(url, {"platform_gpus": 16}, format="json").json()["platform_gpus"] == 16
    assert api(world.users["a_admin"]).delete(url).status_code == 403
    assert client.delete(url).status_code == 204
    assert not ApprovalPolicy.objects.exists()


# --- notifications ---------------------------------------------------------------------------------------


def test_notifications_are_private_and_can_be_marked_read(world, api, pending):
    admin = api(world.users["a_admin"])
    notes = admin.get(reverse("api:notification-list") + "?unread=1").json()["results"]
    assert len(notes) == 1 and notes[0]["request"] == pending["approval_request"] and not notes[0]["read"]
    assert api(world.users["b_admin"]).get(reverse("api:notification-list")).json()["results"] == []
    other = api(world.users["b_admin"]).post(reverse("api:notification-read", args=[notes[0]["id"]]))
    assert other.status_code == 404
    read = admin.post(reverse("api:notification-read", args=[notes[0]["id"]]))
    assert read.status_code == 200 and read.json()["read"] is True
    assert admin.get(reverse("api:notification-list") + "?unread=1").json()["results"] == []
    admin.post(
        reverse("api:approval-decide", args=[pending["approval_request"]]), {"approve": True}, format="json"
    )
    member = api(world.users["pa1_member"])
    assert member.post(reverse("api:notification-read-all")).json() == {"marked": 1}
    assert member.post(reverse("api:notification-read-all")).json() == {"marked": 0}
