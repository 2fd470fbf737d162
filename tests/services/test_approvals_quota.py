"""Quota requests and loan requests through the approval engine (DESIGN §3.7, §6).

World (tests/conftest.py): flavor F on 2 × 8 GPUs (C = 16); quota A 8 (A1 4, pa 4; pa1 4 under
A1), B 8 (pb 8). a_admin administers A and A1, b_admin B."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone, translation

from portal.approvals import approval_decide
from portal.models import ApprovalRequest, Membership, Role, User
from quotas.approvals import loan_lenders, loan_request_create, loans_return_expired, quota_request_create
from quotas.models import Cluster, Loan, Node, QuotaNode
from quotas.selectors import effective_limits_map

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _english(settings):
    settings.LANGUAGE_CODE = "en"
    with translation.override("en"):
        yield


def _quota(world, key):
    return QuotaNode.objects.get(pk=world.quota[key].pk).quota


def _grow_pool(world, gpus=8):
    Node.objects.create(
        cluster=Cluster.objects.get(name="c1"),
        name="n9",
        flavor=world.F,
        gpu_count=gpus,
        zone="z",
        spine="s",
        leaf="l9",
    )


def _chain(request):
    return list(request.steps.order_by("order", "id").values_list("approver_role", "department_id", "state"))


# --- quota requests -------------------------------------------------------------------------------


def test_a_request_that_fits_the_department_needs_only_its_admin(world):
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(overcommit_ratio=Decimal(2))  # room in A1
    request = quota_request_create(
        actor=world.users["pa1_member"], flavor=world.F, project=world.pa1, quota=Decimal(6), reason="sweep"
    )
    assert _chain(request) == [("department_admin", world.A.pk, "pending")]
    assert request.payload["growth"] == [] and request.payload["previous"] == "4"
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    assert _quota(world, "pa1") == Decimal(6)
    request.refresh_from_db()
    assert request.state == "approved" and request.subject_id == world.quota["pa1"].pk


def test_when_the_department_must_grow_a_platform_admin_approves_both_in_one_go(world):
    _grow_pool(world)  # C = 24: the pool can take B at 12
    request = quota_request_create(
        actor=world.users["pb_member"], flavor=world.F, project=world.pb, quota=Decimal(12)
    )
    assert _chain(request) == [
        ("department_admin", world.B.pk, "pending"),
        ("platform_admin", None, "waiting"),
    ]
    assert request.payload["growth"] == [
        {"department": world.B.pk, "name": str(world.B), "from": "8", "to": "12"}
    ]

    approval_decide(actor=world.users["b_admin"], step_or_request=request, approve=True)
    assert (_quota(world, "B"), _quota(world, "pb")) == (
        Decimal(8),
        Decimal(8),
    )  # nothing until the last step
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    assert (_quota(world, "B"), _quota(world, "pb")) == (Decimal(12), Decimal(12))


def test_growth_climbs_the_tree(world):
    _grow_pool(world)
    request = quota_request_create(
        actor=world.users["pa1_member"], flavor=world.F, project=world.pa1, quota=Decimal(6)
    )
    # pa1 6 needs A1 6, and then A 10 (A1 6 + pa 4).
    assert [(g["department"], g["to"]) for g in request.payload["growth"]] == [
        (world.A.pk, "10"),
        (world.A1.pk, "6"),
    ]
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    assert [_quota(world, k) for k in ("A", "A1", "pa1")] == [Decimal(10), Decimal(6), Decimal(6)]


def test_a_request_the_pool_cannot_hold_is_refused_at_once(world):
    with pytest.raises(ValidationError, match="the pool"):
        quota_request_create(
            actor=world.users["pb_member"], flavor=world.F, project=world.pb, quota=Decimal(12)
        )
    assert not ApprovalRequest.objects.exists()


def test_if_the_quota_no_longer_fits_the_request_is_not_approved(world):
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(overcommit_ratio=Decimal(2))
    request = quota_request_create(
        actor=world.users["pa1_member"], flavor=world.F, project=world.pa1, quota=Decimal(6)
    )
    # Meanwhile the platform takes A1's overcommit back: granting 6 would now need A1 and A to grow.
    QuotaNode.objects.filter(pk=world.quota["A1"].pk).update(overcommit_ratio=Decimal(1))
    with pytest.raises(ValidationError, match="Not approved"):
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    request.refresh_from_db()
    assert request.state == "pending" and request.steps.get().state == "pending"
    assert request.audit.filter(action="approved").count() == 0
    assert _quota(world, "pa1") == Decimal(4)
    # A platform admin cannot grant it either: the pool (C = 16) cannot hold A at 10.
    with pytest.raises(ValidationError, match="the pool"):
        approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=False, comment="no room")
    assert ApprovalRequest.objects.get(pk=request.pk).state == "rejected"


def test_a_top_level_department_asks_the_platform(world):
    _grow_pool(world)
    request = quota_request_create(
        actor=world.users["a_admin"], flavor=world.F, department=world.A, quota=Decimal(12)
    )
    assert _chain(request) == [("platform_admin", None, "pending")]
    with pytest.raises(PermissionDenied, match="segregation"):
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    assert _quota(world, "A") == Decimal(12)


def test_a_sub_department_asks_the_admin_of_its_parent(world):
    _grow_pool(world)
    a1_admin = User.objects.create_user(username="a1_admin")
    Membership.objects.create(user=a1_admin, role=Role.DEPARTMENT_ADMIN, department=world.A1)
    # A1 4 → 5: A would hold A1 5 + pa 4 = 9 > 8, so A must grow and a platform admin follows.
    request = quota_request_create(actor=a1_admin, flavor=world.F, department=world.A1, quota=Decimal(5))
    assert _chain(request) == [
        ("department_admin", world.A.pk, "pending"),
        ("platform_admin", None, "waiting"),
    ]
    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    assert [_quota(world, k) for k in ("A", "A1")] == [Decimal(9), Decimal(5)]


def test_one_decision_when_both_steps_fall_to_the_same_approver(world):
    _grow_pool(world)
    # a_admin is A's only admin, so its request for A1 goes to the platform, which then also
    # holds the growth step: one platform decision covers both.
    request = quota_request_create(
        actor=world.users["a_admin"], flavor=world.F, department=world.A1, quota=Decimal(5)
    )
    assert _chain(request) == [("platform_admin", None, "pending"), ("platform_admin", None, "skipped")]
    approval_decide(actor=world.users["platform"], step_or_request=request, approve=True)
    assert [_quota(world, k) for k in ("A", "A1")] == [Decimal(9), Decimal(5)]


def test_lowering_below_the_children_or_promised_loans_is_refused(world):
    with pytest.raises(ValidationError, match="overcommit ratio"):
        quota_request_create(
            actor=world.users["a_admin"], flavor=world.F, department=world.A1, quota=Decimal(3)
        )
    Loan.objects.create(
        lender=world.quota["pa1"],
        borrower=world.quota["pb"],
        amount=Decimal(3),
        state="active",
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(days=1),
    )
    with pytest.raises(ValidationError, match="promised to loans"):
        quota_request_create(
            actor=world.users["pa1_member"], flavor=world.F, project=world.pa1, quota=Decimal(2)
        )


def test_who_may_ask_for_a_quota(world):
    for persona in ("a_finance", "auditor", "pb_member", "outsider"):
        with pytest.raises(PermissionDenied):
            quota_request_create(
                actor=world.users[persona], flavor=world.F, project=world.pa1, quota=Decimal(2)
            )
    with pytest.raises(PermissionDenied):  # a member cannot ask for its department
        quota_request_create(
            actor=world.users["pa1_member"], flavor=world.F, department=world.A1, quota=Decimal(4)
        )
    assert not ApprovalRequest.objects.exists()


def test_one_pending_request_per_quota(world):
    quota_request_create(actor=world.users["pa1_member"], flavor=world.F, project=world.pa1, quota=Decimal(2))
    with pytest.raises(ValidationError, match="still pending"):
        quota_request_create(
            actor=world.users["pa1_admin"], flavor=world.F, project=world.pa1, quota=Decimal(3)
        )
    with pytest.raises(ValidationError, match="already 8"):
        quota_request_create(
            actor=world.users["pb_member"], flavor=world.F, project=world.pb, quota=Decimal(8)
        )


# --- loan requests ----------------------------------------------------------------------------------------


def _loan(world, actor="a_admin", amount=2, hours=24, start=None):
    start = start or timezone.now()
    return loan_request_create(
        actor=world.users[actor],
        borrower=world.quota["A1"],
        lender=world.B,
        amount=Decimal(amount),
        starts_at=start,
        ends_at=start + timedelta(hours=hours),
        reason="paper deadline",
    )


def test_a_loan_request_becomes_an_active_loan_that_returns_by_itself(world):
    request = _loan(world, hours=2)
    assert _chain(request) == [("department_admin", world.B.pk, "pending")]
    assert not Loan.objects.exists()
    approval_decide(actor=world.users["b_admin"], step_or_request=request, approve=True)
    loan = Loan.objects.get()
    request.refresh_from_db()
    assert request.subject_id == loan.pk
    assert (loan.state, loan.amount, loan.requested_by) == ("active", Decimal(2), world.users["a_admin"])
    a1, b = world.quota["A1"], world.quota["B"]
    now = timezone.now()
    during = effective_limits_map([a1, b], now)
    assert (during[a1.pk].quota, during[b.pk].quota) == (Decimal(6), Decimal(6))
    after = effective_limits_map([a1, b], loan.ends_at)  # half-open: returned at ends_at
    assert (after[a1.pk].quota, after[b.pk].quota) == (Decimal(4), Decimal(8))
    assert loans_return_expired(now=now) == 0
    assert loans_return_expired(now=loan.ends_at) == 1
    assert loans_return_expired(now=loan.ends_at) == 0  # idempotent
    loan.refresh_from_db()
    assert loan.state == "returned"


def test_the_lenders_capacity_is_checked_again_at_approval(world):
    first, second = _loan(world, amount=6), _loan(world, amount=6)
    approval_decide(actor=world.users["b_admin"], step_or_request=first, approve=True)
    with pytest.raises(ValidationError, match=r"Not approved.*6 already lent"):
        approval_decide(actor=world.users["b_admin"], step_or_request=second, approve=True)
    assert Loan.objects.count() == 1
    assert ApprovalRequest.objects.get(pk=second.pk).state == "pending"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"amount": 9}, "amount"),  # B has 8
        ({"amount": 0}, "amount"),
        ({"hours": -1}, "ends_at"),
        ({"hours": 24 * 400}, "ends_at"),
        ({"start": timezone.now() - timedelta(days=3), "hours": 24}, "ends_at"),  # already over
    ],
)
def test_bad_loan_requests_are_refused(world, kwargs, field):
    with pytest.raises(ValidationError) as info:
        _loan(world, **kwargs)
    assert field in info.value.message_dict
    assert not ApprovalRequest.objects.exists()


def test_the_lender_must_hold_quota_of_the_flavor_and_not_be_the_borrower(world):
    QuotaNode.objects.filter(pk=world.quota["pb"].pk).delete()
    QuotaNode.objects.filter(pk=world.quota["B"].pk).delete()
    with pytest.raises(ValidationError, match="holds no quota"):
        _loan(world)
    with pytest.raises(ValidationError, match="cannot borrow from itself"):
        loan_request_create(
            actor=world.users["a_admin"],
            borrower=world.quota["A1"],
            lender=world.A1,
            amount=Decimal(1),
            starts_at=timezone.now(),
            ends_at=timezone.now() + timedelta(hours=1),
        )
    assert list(loan_lenders(world.F).values_list("code", flat=True)) == ["A", "A1"]


def test_only_the_borrowers_admins_may_ask_for_a_loan(world):
    for persona in ("pa1_member", "a_finance", "b_admin", "auditor"):
        with pytest.raises(PermissionDenied):
            _loan(world, actor=persona)
    request = loan_request_create(
        actor=world.users["pa1_admin"],
        borrower=world.quota["pa1"],
        lender=world.B,
        amount=Decimal(1),
        starts_at=timezone.now(),
        ends_at=timezone.now() + timedelta(hours=1),
    )
    # The lender's admins see it; the requester's own department admin may not decide it.
    with pytest.raises(PermissionDenied):
        approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True)
    approval_decide(actor=world.users["b_admin"], step_or_request=request, approve=False, comment="busy")
    assert not Loan.objects.exists()


def test_the_demo_seeds_one_pending_request_of_each_kind_once():
    from django.core.management import call_command

    from jobs.models import ApprovalPolicy

    call_command("seed_demo")
    call_command("seed_demo")
    pending = ApprovalRequest.objects.filter(state="pending")
    # Two jobs: alice's H800 fine-tune (the ai policy) and her llama-pretrain on training-high,
    # which members may use with approval in the demo (issue 18 item 5).
    assert sorted(pending.values_list("kind", flat=True)) == ["job", "job", "loan", "quota"]
    assert sorted(pending.filter(kind="job").values_list("payload__name", flat=True)) == [
        "llama-70b-sft",
        "llama-pretrain",
    ]
    assert ApprovalPolicy.objects.get(department__code="ai").max_gpus == 8
    quota = pending.get(kind="quota")
    assert [d["name"] for d in quota.payload["growth"]] == [
        "AI Research / 人工智能研究院 (ai)",
        "Vision Lab / 计算机视觉实验室 (ai-cv)",
    ]
    assert _chain(quota)[1] == ("platform_admin", None, "waiting")
    assert pending.get(kind="loan").steps.get().department.code == "svc"
    for job in pending.filter(kind="job"):
        job_step = job.steps.get()
        assert (job_step.approver_role, job_step.department.code) == ("department_admin", "ai")
