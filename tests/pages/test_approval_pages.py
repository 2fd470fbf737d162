"""The approval pages for every persona: the inbox and lists, a request's page with decisions,
cancel and comments, bulk decisions, the quota and loan request forms, the approval policies
page and the notifications — on real PostgreSQL through the Django test client.

World (tests/conftest.py): departments A (sub-department A1) and B; projects pa (A), pa1 (A1),
pb (B); flavor F on 2 × 8 GPUs; quota A 8 (A1 4, pa 4; pa1 4), B 8 (pb 8). a_admin administers
A (and so A1), b_admin B. A's policy below asks approval for jobs over 2 cards."""

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone, translation

from jobs.approvals import approval_policy_set
from jobs.models import ApprovalPolicy, Job
from jobs.services import job_submit
from portal.context import nav_counts
from portal.models import ApprovalAudit, ApprovalRequest, Notification
from portal.selectors import scope_for
from quotas.approvals import quota_request_create
from quotas.models import Cluster, Flavor, Loan, Node, QuotaNode

pytestmark = pytest.mark.django_db

ALL = [
    "platform",
    "auditor",
    "a_admin",
    "b_admin",
    "a_finance",
    "b_finance",
    "pa1_admin",
    "pa1_member",
    "pb_member",
    "outsider",
]
# Who sees a request about project pa1 (department A1 under A).
SEES_PA1 = {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}


@pytest.fixture(autouse=True)
def _english(settings):
    # Stored texts (summaries, notifications) are written in the site language; read them in English.
    settings.LANGUAGE_CODE = "en"
    with translation.override("en"):
        yield


@pytest.fixture
def policy(world):
    return approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)


def _job(world, prio, actor="pa1_member", name="big-train", gpus=4):
    return job_submit(
        actor=world.users[actor],
        project=world.pa1,
        name=name,
        kind="training",
        flavor=world.F,
        priority_class=prio,
        image="pytorch:2.3",
        gpus_per_worker=gpus,
        max_runtime_seconds=3600,
    )


def _request_of(job) -> ApprovalRequest:
    return ApprovalRequest.objects.get(kind="job", subject_id=job.pk)


@pytest.fixture
def job_request(world, prio, policy) -> ApprovalRequest:
    return _request_of(_job(world, prio))


@pytest.fixture
def pb_request(world) -> ApprovalRequest:
    """A quota request of project pb (department B): invisible to A's people."""
    return quota_request_create(
        actor=world.users["pb_member"], flavor=world.F, project=world.pb, quota=Decimal(6)
    )


def _text(response) -> str:
    return response.content.decode()


def _audit_count(req) -> int:
    return ApprovalAudit.objects.filter(request=req).count()


# --- visibility ----------------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ALL)
def test_request_page_is_404_outside_the_scope(page_client, job_request, persona):
    client = page_client(persona)
    response = client.get(f"/approvals/{job_request.pk}/")
    assert response.status_code == (200 if persona in SEES_PA1 else 404)
    if persona not in SEES_PA1:
        # Every action URL answers 404 as well, and changes nothing.
        for action, body in [
            ("decide", {"decision": "approve"}),
            ("cancel", {}),
            ("comment", {"comment": "x"}),
        ]:
            assert client.post(f"/approvals/{job_request.pk}/{action}/", body).status_code == 404
        job_request.refresh_from_db()
        assert job_request.state == "pending" and _audit_count(job_request) == 2


@pytest.mark.parametrize("persona", ALL)
def test_the_lists_show_exactly_the_visible_requests(page_client, job_request, pb_request, persona):
    client = page_client(persona)
    page = _text(client.get("/approvals/?tab=all"))
    assert ("big-train" in page) == (persona in SEES_PA1)
    assert ("Quota of" in page) == (persona in {"platform", "auditor", "b_admin", "b_finance", "pb_member"})
    inbox = _text(client.get("/approvals/"))
    # The job's step is addressed to A's admins; pb's to B's. Platform steps: none yet.
    assert ("big-train" in inbox) == (persona == "a_admin")
    assert ("Quota of" in inbox) == (persona == "b_admin")
    mine = _text(client.get("/approvals/?tab=mine"))
    assert ("big-train" in mine) == (persona == "pa1_member")


def test_inbox_rows_show_step_deadline_and_checkboxes_only_where_i_decide(page_client, job_request):
    admin = _text(page_client("a_admin").get("/approvals/"))
    assert f'name="ids" value="{job_request.pk}"' in admin
    assert "Department admins of Dept A" in admin and "Approve selected" in admin
    requester = _text(page_client("pa1_member").get("/approvals/?tab=mine"))
    assert "big-train" in requester and 'name="ids"' not in requester and "Approve selected" not in requester
    # A platform admin may decide any step from the full list.
    assert f'name="ids" value="{job_request.pk}"' in _text(page_client("platform").get("/approvals/?tab=all"))


def test_list_filters_by_kind_and_state_and_ignores_nonsense(page_client, job_request, pb_request):
    client = page_client("platform")
    assert "big-train" not in _text(client.get("/approvals/?tab=all&kind=quota"))
    assert "Quota of" in _text(client.get("/approvals/?tab=all&kind=quota&state=pending"))
    assert "big-train" not in _text(client.get("/approvals/?tab=all&state=approved"))
    assert client.get("/approvals/?tab=bogus&kind=x&state=y&page=99").status_code == 200


def test_anonymous_visitors_are_sent_to_the_login_page(page_client, job_request):
    for path in [
        "/approvals/",
        f"/approvals/{job_request.pk}/",
        "/quotas/requests/new/",
        "/quotas/loans/request/",
        "/approval-policies/",
        "/notifications/",
    ]:
        response = page_client(None).get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], path


# --- one request: readable details, decisions ---------------------------------------------------


def test_request_page_shows_details_steps_and_audit(page_client, job_request):
    page = _text(page_client("a_admin").get(f"/approvals/{job_request.pk}/"))
    job_id = job_request.subject_id
    assert f'href="/jobs/{job_id}/"' in page  # the job's page
    assert "1 workers × 4 GPUs of F" in page and "more than the 2" in page  # shape and the reason
    assert "Department admins of Dept A" in page and "Step opened" in page and "Created" in page
    assert 'value="approve"' in page and 'value="reject"' in page
    job_page = _text(page_client("pa1_member").get(f"/jobs/{job_id}/"))
    assert f'href="/approvals/{job_request.pk}/"' in job_page  # the job page links the request


def test_department_admin_approves_from_the_page(page_client, job_request):
    response = page_client("a_admin").post(
        f"/approvals/{job_request.pk}/decide/", {"decision": "approve", "comment": "go ahead"}, follow=True
    )
    assert f"Request #{job_request.pk} was approved." in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "approved"
    assert Job.objects.get(pk=job_request.subject_id).state == "queued"
    assert (
        ApprovalAudit.objects.filter(request=job_request, action="approved", comment="go ahead").count() == 1
    )
    # Decided: no buttons any more, for anyone.
    again = _text(page_client("a_admin").get(f"/approvals/{job_request.pk}/"))
    assert 'value="approve"' not in again and "This request is Approved." in again


def test_department_admin_rejects_from_the_page_with_a_comment(page_client, job_request):
    response = page_client("a_admin").post(
        f"/approvals/{job_request.pk}/decide/",
        {"decision": "reject", "comment": "too big for now"},
        follow=True,
    )
    assert f"Request #{job_request.pk} was rejected." in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "rejected"
    assert Job.objects.get(pk=job_request.subject_id).state == "rejected"
    assert "too big for now" in _text(page_client("pa1_member").get(f"/approvals/{job_request.pk}/"))


def test_self_approval_is_refused_on_the_page_even_for_a_platform_admin(page_client, world, prio, policy):
    req = _request_of(_job(world, prio, actor="platform", name="own-job"))
    client = page_client("platform")
    page = _text(client.get(f"/approvals/{req.pk}/"))
    assert "You cannot approve your own request." in page
    assert 'value="approve"' not in page and 'value="reject"' not in page
    before = _audit_count(req)
    for decision in ("approve", "reject"):
        response = client.post(f"/approvals/{req.pk}/decide/", {"decision": decision}, follow=True)
        assert response.status_code == 200
        assert "segregation of duties" in _text(response)
    req.refresh_from_db()
    assert req.state == "pending" and _audit_count(req) == before
    assert Job.objects.get(pk=req.subject_id).state == "pending_approval"
    # Nor through the bulk form.
    response = client.post("/approvals/bulk/", {"ids": [req.pk], "decision": "approve"}, follow=True)
    assert "segregation of duties" in _text(response)
    req.refresh_from_db()
    assert req.state == "pending" and _audit_count(req) == before


@pytest.mark.parametrize("persona", ["auditor", "a_finance", "pa1_admin"])
def test_readers_who_are_not_approvers_get_no_buttons_and_a_forged_post_is_refused(
    page_client, job_request, persona
):
    client = page_client(persona)
    assert 'value="approve"' not in _text(client.get(f"/approvals/{job_request.pk}/"))
    response = client.post(f"/approvals/{job_request.pk}/decide/", {"decision": "approve"}, follow=True)
    assert response.status_code == 200 and "can decide this step" in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "pending" and _audit_count(job_request) == 2


def test_a_stale_page_decision_after_someone_else_decided_changes_nothing(page_client, job_request):
    """Two admins on the same step: the second gets a message; one outcome, one audit row."""
    first, second = page_client("a_admin"), page_client("platform")
    assert 'value="approve"' in _text(second.get(f"/approvals/{job_request.pk}/"))  # both see the buttons
    first.post(f"/approvals/{job_request.pk}/decide/", {"decision": "approve"})
    response = second.post(f"/approvals/{job_request.pk}/decide/", {"decision": "reject"}, follow=True)
    assert "already decided" in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "approved"
    assert ApprovalAudit.objects.filter(request=job_request, action__in=["approved", "rejected"]).count() == 1


def test_a_bad_decision_form_is_a_message_not_an_error(page_client, job_request):
    response = page_client("a_admin").post(
        f"/approvals/{job_request.pk}/decide/", {"decision": "maybe", "comment": "x" * 3000}, follow=True
    )
    assert response.status_code == 200 and "Select a valid choice" in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "pending"


def test_requester_withdraws_and_comments(page_client, job_request):
    client = page_client("pa1_member")
    page = _text(client.get(f"/approvals/{job_request.pk}/"))
    assert "Withdraw my request" in page and "Add a comment" in page
    response = client.post(
        f"/approvals/{job_request.pk}/comment/", {"comment": "needed for the deadline"}, follow=True
    )
    assert "Your comment was added." in _text(response)
    assert ApprovalAudit.objects.filter(request=job_request, action="comment").count() == 1
    response = client.post(f"/approvals/{job_request.pk}/cancel/", {"comment": "not needed"}, follow=True)
    assert f"Request #{job_request.pk} was withdrawn." in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "cancelled"
    assert Job.objects.get(pk=job_request.subject_id).state == "cancelled"


def test_only_the_requester_or_a_platform_admin_may_withdraw(page_client, job_request):
    client = page_client("a_admin")
    assert "Withdraw" not in _text(client.get(f"/approvals/{job_request.pk}/"))
    response = client.post(f"/approvals/{job_request.pk}/cancel/", {}, follow=True)
    assert "Only the requester or a platform admin" in _text(response)
    job_request.refresh_from_db()
    assert job_request.state == "pending"


def test_readers_cannot_comment(page_client, job_request):
    client = page_client("auditor")
    assert "Add a comment" not in _text(client.get(f"/approvals/{job_request.pk}/"))
    response = client.post(f"/approvals/{job_request.pk}/comment/", {"comment": "hello"}, follow=True)
    assert "Only the requester and the approvers can comment." in _text(response)
    assert not ApprovalAudit.objects.filter(request=job_request, action="comment").exists()


# --- bulk decisions ---------------------------------------------------------------------------------


def test_bulk_approve_gives_one_result_per_request(page_client, world, prio, policy, pb_request):
    first = _request_of(_job(world, prio, name="one"))
    second = _request_of(_job(world, prio, name="two"))
    ids = [first.pk, second.pk, pb_request.pk]  # pb's request is not visible to A's admin
    response = page_client("a_admin").post(
        "/approvals/bulk/",
        {"ids": ids, "decision": "approve", "comment": "batch", "next": "/approvals/?tab=all"},
    )
    assert response.status_code == 302 and response["Location"] == "/approvals/?tab=all"
    for req in (first, second):
        req.refresh_from_db()
        assert req.state == "approved"
    pb_request.refresh_from_db()
    assert pb_request.state == "pending"
    assert ApprovalAudit.objects.filter(action="approved", comment="batch").count() == 2


def test_bulk_messages_and_reject(page_client, world, prio, policy, pb_request):
    first = _request_of(_job(world, prio, name="one"))
    second = _request_of(_job(world, prio, name="two"))
    page_client("platform").post(f"/approvals/{second.pk}/decide/", {"decision": "approve"})
    response = page_client("a_admin").post(
        "/approvals/bulk/", {"ids": [first.pk, second.pk, pb_request.pk], "decision": "reject"}, follow=True
    )
    page = _text(response)
    assert f"Request #{first.pk} was rejected." in page
    assert f"Request #{second.pk} was not decided: This request was already decided" in page
    assert f"Request #{pb_request.pk} was not decided: Not found." in page
    first.refresh_from_db()
    assert first.state == "rejected"


@pytest.mark.parametrize("ids", [[], ["x"], ["-3"]])
def test_bulk_with_nothing_or_nonsense_ticked_is_a_message(page_client, job_request, ids):
    response = page_client("a_admin").post(
        "/approvals/bulk/", {"ids": ids, "decision": "approve"}, follow=True
    )
    assert response.status_code == 200 and (
        "Tick at least one" in _text(response) or "whole numbers" in _text(response)
    )
    job_request.refresh_from_db()
    assert job_request.state == "pending"


def test_bulk_redirects_only_to_this_site(page_client, job_request):
    response = page_client("a_admin").post(
        "/approvals/bulk/", {"ids": [job_request.pk], "decision": "approve", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/approvals/"


# --- quota request form --------------------------------------------------------------------------


def test_quota_request_form_offers_what_the_user_may_ask_for(page_client, world):
    member = page_client("pa1_member").get("/quotas/requests/new/?project=pa1&flavor=F")
    choices = dict(c for group in member.context["form"].fields["owner"].choices[1:] for c in group[1])
    assert set(choices) == {f"project:{world.pa1.pk}"}
    assert member.context["form"].initial == {
        "owner": f"project:{world.pa1.pk}",
        "flavor": world.F.pk,
        "quota": 4,
    }
    admin = page_client("a_admin").get("/quotas/requests/new/").context["form"]
    owners = {v for group in admin.fields["owner"].choices[1:] for v, _label in group[1]}
    assert owners == {
        f"department:{world.A.pk}",
        f"department:{world.A1.pk}",
        f"project:{world.pa.pk}",
        f"project:{world.pa1.pk}",
    }
    outsider = page_client("outsider").get("/quotas/requests/new/")
    assert "You are not a member or admin" in _text(outsider)


def test_quota_tree_rows_link_to_the_request_form(page_client, world):
    page = _text(page_client("pa1_member").get("/quotas/?flavor=F"))
    assert "/quotas/requests/new/?project=pa1&amp;flavor=F" in page
    assert "department=A&amp;" not in page  # a member asks for its project only
    assert "/quotas/requests/new/?department=A1&amp;flavor=F" in _text(
        page_client("a_admin").get("/quotas/?flavor=F")
    )
    assert "request more" not in _text(page_client("auditor").get("/quotas/?flavor=F"))


def test_quota_request_through_the_form_goes_to_its_approval_page(page_client, world):
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(overcommit_ratio=Decimal(2))  # room in A1
    response = page_client("pa1_member").post(
        "/quotas/requests/new/",
        {"owner": f"project:{world.pa1.pk}", "flavor": world.F.pk, "quota": "6", "reason": "sweep"},
    )
    req = ApprovalRequest.objects.get(kind="quota")
    assert response.status_code == 302 and response["Location"] == f"/approvals/{req.pk}/"
    assert req.payload["quota"] == "6" and req.reason == "sweep"
    page = _text(page_client("pa1_member").get(response["Location"]))
    assert "4 → <strong>6</strong>" in page and "You cannot approve your own request." in page
    assert "Department admins of Dept A" in page


@pytest.mark.parametrize(
    "body, field",
    [
        ({"quota": "-1"}, "quota"),  # negative
        ({"quota": "abc"}, "quota"),
        ({"quota": "4"}, "quota"),  # unchanged: the service says so
        ({"quota": "6", "owner": "project:999999"}, "owner"),
        ({"quota": "6", "flavor": "999999"}, "flavor"),
    ],
)
def test_bad_quota_requests_show_form_errors_and_write_nothing(page_client, world, body, field):
    data = {"owner": f"project:{world.pa1.pk}", "flavor": world.F.pk, **body}
    response = page_client("pa1_member").post("/quotas/requests/new/", data)
    assert response.status_code == 200 and field in response.context["form"].errors
    assert 'aria-invalid="true"' in _text(response)
    assert not ApprovalRequest.objects.exists()


def test_quota_beyond_the_hardware_is_refused_on_the_form(page_client, world):
    response = page_client("platform").post(
        "/quotas/requests/new/", {"owner": f"department:{world.A.pk}", "flavor": world.F.pk, "quota": "100"}
    )
    assert response.status_code == 200 and response.context["form"].errors
    assert not ApprovalRequest.objects.exists()


def test_item8_a_refused_quota_request_says_the_most_that_could_be_granted(page_client, world):
    """A third node (C = 24; A and B hold 8 each): pa1 could grow to 12 (A to 16, A1 to 12 beside
    pa's 4). Asking 20 is refused with that figure, not the pool's arithmetic; 12 then passes."""
    Node.objects.create(cluster=Cluster.objects.get(name="c1"), name="n2", flavor=world.F, gpu_count=8,
                        zone="z", spine="s", leaf="l2")
    body = {"owner": f"project:{world.pa1.pk}", "flavor": world.F.pk, "quota": "20"}
    response = page_client("pa1_member").post("/quotas/requests/new/", body)
    assert response.context["form"].errors["quota"] == [
        "At most 12 of F can be granted to Project a1 (pa1) now; you asked for 20. The rest of the pool's "
        "healthy capacity (24) is promised to other quotas."
    ]
    assert not ApprovalRequest.objects.exists()
    zh = page_client("pa1_member", "zh-hans").post("/quotas/requests/new/", {**body, "quota": "13"})
    assert "最多可为 Project a1 (pa1) 批准 12" in zh.content.decode()
    assert page_client("pa1_member").post("/quotas/requests/new/", {**body, "quota": "12"}).status_code == 302
    request = ApprovalRequest.objects.get()
    growth = [(g["name"], g["to"]) for g in request.payload["growth"]]
    assert growth == [("Dept A (A)", "16"), ("Dept A1 (A1)", "12")]
    # Once A holds the new node's 8 as well, B cannot grow at all: it says so, with B's quota.
    QuotaNode.objects.filter(pk=world.quota["A"].pk).update(quota=16)
    response = page_client("platform").post(
        "/quotas/requests/new/", {"owner": f"department:{world.B.pk}", "flavor": world.F.pk, "quota": "9"})
    assert response.context["form"].errors["quota"] == [
        "The quota of Dept B (B) for F cannot grow now (it is 8): the pool's healthy capacity (24) is "
        "promised to other quotas."
    ]


def test_a_member_cannot_ask_for_another_tenants_quota(page_client, world):
    response = page_client("pa1_member").post(
        "/quotas/requests/new/", {"owner": f"project:{world.pb.pk}", "flavor": world.F.pk, "quota": "9"}
    )
    assert "owner" in response.context["form"].errors
    assert not ApprovalRequest.objects.exists()


# --- loan request form ---------------------------------------------------------------------------


def _local(dt) -> str:
    return timezone.localtime(dt).strftime("%Y-%m-%dT%H:%M")


def _loan_body(world, **over):
    start = timezone.now().replace(second=0, microsecond=0) + timedelta(hours=1)
    body = {
        "owner": f"department:{world.A.pk}",
        "lender": "B",
        "flavor": world.F.pk,
        "amount": "2",
        "starts_at": _local(start),
        "ends_at": _local(start + timedelta(days=2)),
        "reason": "deadline week",
    }
    return {**body, **over}, start


def test_loan_request_through_the_form_in_the_site_time_zone(page_client, world):
    body, start = _loan_body(world)
    response = page_client("a_admin").post("/quotas/loans/request/", body)
    req = ApprovalRequest.objects.get(kind="loan")
    assert response.status_code == 302 and response["Location"] == f"/approvals/{req.pk}/"
    assert req.counterparty == world.B and req.payload["borrower"] == world.quota["A"].pk
    # "datetime-local" input is read in the site zone (Asia/Shanghai): the stored instant is exact.
    assert datetime.fromisoformat(req.payload["starts_at"]) == start
    page = _text(page_client("b_admin").get(response["Location"]))
    assert "Dept B" in page and "deadline week" in page and 'value="approve"' in page
    assert _local(start).replace("T", " ") in page  # shown in the site zone


def test_loans_page_links_the_loan_request_form_for_admins_only(page_client, world):
    assert 'href="/quotas/loans/request/"' in _text(page_client("a_admin").get("/quotas/loans/"))
    assert 'href="/quotas/loans/request/"' not in _text(page_client("pa1_member").get("/quotas/loans/"))


def test_loan_request_form_defaults_to_a_week_from_the_next_hour(page_client, world):
    form = page_client("a_admin").get("/quotas/loans/request/").context["form"]
    assert form.initial["ends_at"] - form.initial["starts_at"] == timedelta(days=7)
    lenders = {code for code, _label in form.fields["lender"].widget.choices if code}
    assert lenders == {"A", "A1", "B"}


def test_item8_the_loan_form_offers_only_lenders_that_can_lend_the_flavor_with_their_amounts(
    page_client, world
):
    """Only departments holding quota of the chosen flavor and with some left to lend in the
    period are offered, each with that amount; the list follows the flavor and the period."""
    other = Flavor.objects.create(
        name="G", vendor="nvidia", model="G", memory_mib=1024, k8s_resource_name="nvidia.com/gpu"
    )
    lender = QuotaNode.objects.create(flavor=other, department=world.B, quota=Decimal(4))
    borrower = QuotaNode.objects.create(flavor=other, department=world.A1, quota=Decimal(1))
    start = timezone.now().replace(second=0, microsecond=0) + timedelta(hours=1)
    Loan.objects.create(lender=lender, borrower=borrower, amount=Decimal(3), starts_at=start,
                        ends_at=start + timedelta(days=2), state="active")

    def offered(**params) -> dict[str, str]:
        form = page_client("a_admin").get("/quotas/loans/request/", params).context["form"]
        return {code: str(label) for code, label in form.fields["lender"].widget.choices if code}

    assert offered(flavor=world.F.pk) == {
        "A": "Dept A (A) — 8 of F lendable", "A1": "Dept A1 (A1) — 4 of F lendable",
        "B": "Dept B (B) — 8 of F lendable"}
    # G: only B holds it (A1 holds 1 but lends it here too), and B has lent 3 of its 4 in the period.
    period = {"starts_at": _local(start), "ends_at": _local(start + timedelta(days=1))}
    assert offered(flavor=other.pk, **period) == {
        "A1": "Dept A1 (A1) — 1 of G lendable", "B": "Dept B (B) — 1 of G lendable"}
    later = start + timedelta(days=3)  # after that loan: all of B's 4
    after = {"starts_at": _local(later), "ends_at": _local(later + timedelta(days=1))}
    assert offered(flavor=other.pk, **after)["B"] == "Dept B (B) — 4 of G lendable"
    # The borrower itself is not offered; a department that lent everything is not either.
    assert "A1" not in offered(flavor=other.pk, owner=f"department:{world.A1.pk}", **period)
    Loan.objects.create(lender=lender, borrower=borrower, amount=Decimal(1), starts_at=start,
                        ends_at=start + timedelta(days=2), state="pending")
    assert "B" not in offered(flavor=other.pk, **period)
    body, _start = _loan_body(world, flavor=other.pk, amount="1", owner=f"department:{world.A.pk}",
                              starts_at=period["starts_at"], ends_at=period["ends_at"])
    errors = page_client("a_admin").post("/quotas/loans/request/", body).context["form"].errors
    assert errors["lender"] == ["Dept B (B) has no G left to lend in this period."]
    # The quota tree's "Request a loan" names its flavor; the form takes a name as well as an id.
    assert offered(flavor="G", **period) == offered(flavor=other.pk, **period)
    tree = page_client("a_admin").get("/quotas/", {"flavor": "G"}).content.decode()
    assert 'href="/quotas/loans/request/?flavor=G"' in tree
    # The page's lender list re-reads itself when the flavor or the period changes.
    html = page_client("a_admin").get("/quotas/loans/request/").content.decode()
    assert 'id="lender-chooser" hx-get="/quotas/loans/request/"' in html and "change from:#id_flavor" in html


@pytest.mark.parametrize(
    "over, field",
    [
        ({"ends_at": "START-1"}, "ends_at"),  # end before start
        ({"lender": "NOPE"}, "lender"),  # unknown lender
        ({"lender": "A"}, "lender"),  # itself
        ({"amount": "-2"}, "amount"),
        ({"amount": "50"}, "amount"),  # more than the lender has
        ({"starts_at": "tomorrow"}, "starts_at"),
        ({"owner": "project:999"}, "owner"),
    ],
)
def test_bad_loan_requests_show_form_errors_and_write_nothing(page_client, world, over, field):
    body, start = _loan_body(world)
    if over.get("ends_at") == "START-1":
        over = {"ends_at": _local(start - timedelta(hours=1))}
    response = page_client("a_admin").post("/quotas/loans/request/", {**body, **over})
    assert response.status_code == 200 and field in response.context["form"].errors, response.context[
        "form"
    ].errors
    assert not ApprovalRequest.objects.exists()


def test_a_lender_without_quota_of_the_flavor_and_a_borrower_without_quota_are_form_errors(
    page_client, world
):
    other = Flavor.objects.create(
        name="G", vendor="nvidia", model="G", memory_mib=1024, k8s_resource_name="nvidia.com/gpu"
    )
    QuotaNode.objects.create(flavor=other, department=world.B, quota=Decimal(4))
    body, _start = _loan_body(world, flavor=other.pk)
    errors = page_client("a_admin").post("/quotas/loans/request/", body).context["form"].errors
    assert "owner" in errors  # A holds no quota of G
    body, _start = _loan_body(world, flavor=other.pk, lender="A", owner=f"department:{world.B.pk}")
    errors = page_client("platform").post("/quotas/loans/request/", body).context["form"].errors
    assert "lender" in errors  # A holds no quota of G to lend
    assert not ApprovalRequest.objects.exists()


def test_members_cannot_ask_for_loans(page_client, world):
    client = page_client("pa1_member")
    assert "Only admins" in _text(client.get("/quotas/loans/request/"))
    body, _start = _loan_body(world, owner=f"project:{world.pa1.pk}")
    assert "owner" in client.post("/quotas/loans/request/", body).context["form"].errors
    assert not ApprovalRequest.objects.exists()


# --- approval policies --------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ALL)
def test_policies_are_readable_below_their_department_and_editable_above(page_client, policy, persona):
    page = _text(page_client(persona).get("/approval-policies/"))
    sees = persona in {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}
    assert ("Dept A" in page) == sees
    assert (f'href="/approval-policies/{policy.pk}/edit/"' in page) == (persona == "platform")
    status = page_client(persona).get(f"/approval-policies/{policy.pk}/edit/").status_code
    assert status == (200 if persona == "platform" else 403 if sees else 404)


def test_platform_admin_creates_edits_and_deletes_a_policy(page_client, world, policy):
    client = page_client("platform")
    response = client.post(
        "/approval-policies/new/",
        {
            "department": world.B.pk,
            "max_gpus": "8",
            "platform_gpus": "16",
            "step_timeout_hours": "24",
            "flavors": [world.F.pk],
        },
    )
    assert response.status_code == 302
    created = ApprovalPolicy.objects.get(department=world.B)
    assert (created.max_gpus, created.platform_gpus, created.step_timeout_hours) == (8, 16, 24)
    assert list(created.flavors.all()) == [world.F] and created.updated_by == world.users["platform"]
    response = client.post(
        f"/approval-policies/{policy.pk}/edit/",
        {"max_gpus": "4", "step_timeout_hours": "12", "premium_flavors": "on"},
    )
    assert response.status_code == 302
    policy.refresh_from_db()
    assert (policy.max_gpus, policy.step_timeout_hours) == (4, 12)
    client.post(f"/approval-policies/{created.pk}/delete/")
    assert not ApprovalPolicy.objects.filter(department=world.B).exists()


def test_bad_policy_input_shows_errors_and_changes_nothing(page_client, world, policy):
    client = page_client("platform")
    response = client.post(
        f"/approval-policies/{policy.pk}/edit/",
        {"max_gpus": "8", "platform_gpus": "4", "step_timeout_hours": "48"},
    )
    assert response.status_code == 200 and "platform_gpus" in response.context["form"].errors
    response = client.post(
        f"/approval-policies/{policy.pk}/edit/", {"max_gpus": "-1", "step_timeout_hours": "48"}
    )
    assert "max_gpus" in response.context["form"].errors  # the form's own check
    response = client.post(
        f"/approval-policies/{policy.pk}/edit/", {"max_gpus": "4", "step_timeout_hours": "0"}
    )
    assert "step_timeout_hours" in response.context["form"].errors  # the model's, run by the service
    policy.refresh_from_db()
    assert policy.max_gpus == 2
    # A department that already has a policy is not offered for a new one.
    response = client.post("/approval-policies/new/", {"department": world.A.pk, "step_timeout_hours": "48"})
    assert "department" in response.context["form"].errors


def test_department_admin_writes_policies_below_its_department_only(page_client, world, policy):
    client = page_client("a_admin")
    form = client.get("/approval-policies/new/").context["form"]
    assert list(form.fields["department"].queryset) == [world.A1]
    response = client.post("/approval-policies/new/", {"department": world.A.pk, "step_timeout_hours": "48"})
    assert "department" in response.context["form"].errors  # its own department belongs to the platform
    response = client.post(
        "/approval-policies/new/", {"department": world.A1.pk, "max_gpus": "1", "step_timeout_hours": "48"}
    )
    assert response.status_code == 302 and ApprovalPolicy.objects.filter(department=world.A1).exists()
    response = client.post(f"/approval-policies/{policy.pk}/delete/", follow=True)
    assert "permission" in _text(response)
    assert ApprovalPolicy.objects.filter(pk=policy.pk).exists()
    assert page_client("b_admin").post(f"/approval-policies/{policy.pk}/delete/").status_code == 404
    assert page_client("pa1_member").get("/approval-policies/new/").status_code == 403


# --- notifications and the header -------------------------------------------------------------------


def test_notifications_page_bell_and_mark_read(page_client, world, job_request):
    client = page_client("a_admin")
    note = Notification.objects.get(recipient=world.users["a_admin"])
    assert note.link == f"/approvals/{job_request.pk}/"
    page = _text(client.get("/notifications/"))
    assert "asks for your approval" in page and 'class="count">1</mark>' in page
    response = client.post(f"/notifications/{note.pk}/read/", {"next": note.link})
    assert response["Location"] == note.link
    note.refresh_from_db()
    assert note.read_at is not None
    assert "No unread notifications." in _text(client.get("/notifications/?unread=1"))
    # Someone else's notification is a 404.
    assert page_client("b_admin").post(f"/notifications/{note.pk}/read/").status_code == 404


def test_mark_all_read(page_client, world, prio, policy):
    _job(world, prio, name="one")
    _job(world, prio, name="two")
    client = page_client("a_admin")
    response = client.post("/notifications/read-all/", follow=True)
    assert "2 notifications marked as read." in _text(response)
    assert not Notification.objects.filter(recipient=world.users["a_admin"], read_at__isnull=True).exists()


def test_header_counts_waiting_steps_and_unread_notifications_in_one_query(page_client, world, job_request):
    user = world.users["a_admin"]
    scope_for(user)  # computed once per request by the "site" context processor already
    with CaptureQueriesContext(connection) as ctx:
        counts = nav_counts(user)
    assert counts == {"inbox": 1, "unread": 1} and len(ctx.captured_queries) == 1
    assert nav_counts(world.users["pa1_member"]) == {"inbox": 0, "unread": 0}  # own request: not to decide
    page = _text(page_client("a_admin").get("/"))
    assert 'href="/approvals/"' in page and 'title="Waiting for my decision">1</mark>' in page
    assert 'aria-label="Notifications (1 unread)"' in page


# --- every page in Chinese -------------------------------------------------------------------------


@pytest.mark.parametrize("persona", ["platform", "a_admin", "pa1_member", "outsider"])
def test_every_approval_page_renders_in_chinese(page_client, job_request, policy, persona):
    client = page_client(persona, language="zh-hans")
    paths = [
        "/approvals/",
        "/approvals/?tab=mine",
        "/approvals/?tab=all",
        "/quotas/requests/new/",
        "/quotas/loans/request/",
        "/approval-policies/",
        "/notifications/",
    ]
    if persona in SEES_PA1:
        paths.append(f"/approvals/{job_request.pk}/")
    if persona == "platform":
        paths += ["/approval-policies/new/", f"/approval-policies/{policy.pk}/edit/"]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, path
        assert 'lang="zh-hans"' in _text(response) and "仪表盘" in _text(response), path


def test_item2_an_over_long_comment_is_refused_with_its_length_not_called_empty(page_client, job_request):
    """The comment box no longer cuts at 2,000 characters (issue 32 item 2): the server refuses a
    longer one and says why — it used to answer "Write a comment." to any refusal."""
    response = page_client("pa1_member").post(
        f"/approvals/{job_request.pk}/comment/", {"comment": "x" * 2500}, follow=True
    )
    text = _text(response)
    assert "at most 2000 characters (it has 2500)" in text and "Write a comment." not in text
    assert not ApprovalAudit.objects.filter(request=job_request, action="comment").exists()
