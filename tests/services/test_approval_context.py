"""What an approver sees next to a request (issue 24 item 3): usage against quota of the flavor
concerned, capacity free now, the estimated cost, the requester's last 90 days and the budgets
left this month — exact figures for each kind, who sees them, and a page of requests costing
the same number of queries whatever its length.

World (tests/conftest.py): departments A (sub-department A1) and B; projects pa (A), pa1 (A1),
pb (B); flavor F on 2 × 8 GPUs; quota A 8 (A1 4, pa 4; pa1 4), B 8 (pb 8)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.db.models import Prefetch
from django.test.utils import CaptureQueriesContext

from billing.models import Rate
from jobs.approval_context import MONTH_HOURS
from jobs.approvals import approval_policy_set
from portal.approvals import approval_contexts, visible_approval_requests
from portal.models import ApprovalStep
from quotas.approvals import loan_request_create, quota_request_create
from tests.approval_scene import grow_pool, job_request, make_scene
from tests.billing.conftest import local

pytestmark = pytest.mark.django_db
AT = local(2026, 11, 20, 10, 30)  # "now" of the figures that depend on time (history, budgets)


def _contexts(user, requests):
    steps = ApprovalStep.objects.order_by("order", "id")
    qs = visible_approval_requests(user).filter(pk__in=[r.pk for r in requests])
    return approval_contexts(user, list(qs.prefetch_related(Prefetch("steps", queryset=steps))), now=AT)


@pytest.fixture
def scene(world):
    return make_scene(world, AT)


@pytest.fixture
def policy(world):
    return approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)


def test_a_jobs_context_has_usage_capacity_cost_history_and_budgets(scene, policy):
    world = scene
    req = job_request(world)
    ctx = _contexts(world.users["a_admin"], [req])[req.pk]
    currency = Rate.objects.first().currency
    assert ctx["flavor"] == "F"
    assert ctx["usage"] == [
        {
            "role": "owner",
            "owner": str(world.pa1),
            "quota": Decimal(4),
            "effective_quota": Decimal(4),
            "in_quota": Decimal(2),
            "borrowed": Decimal(1),
        }
    ]
    assert ctx["requester_usage"] == {"owner": str(world.pa1), "in_quota": Decimal(2), "borrowed": Decimal(0)}
    assert ctx["capacity"] == {"healthy": Decimal(16), "held": Decimal(6), "free": Decimal(10)}
    # 4 cards for the maximum runtime of 1 h at 2.50.
    assert ctx["cost"] == {
        "basis": "job",
        "cards": Decimal("4.000"),
        "hours": Decimal("1.00"),
        "card_hours": Decimal("4.000"),
        "amount": Decimal("10.00"),
        "currency": currency,
    }
    # The running job of pa1_member started an hour ago, the idle one yesterday; the 100-day-old
    # job and request are outside the 90 days.
    assert ctx["history"] == {"days": 90, "approved": 1, "rejected": 1, "jobs_run": 2, "jobs_idle": 1}
    # This month pa1 (and so A1) used the 8 card-hours of the finished job (the running jobs of
    # this test have no events, so they add nothing to the meter's figures).
    assert ctx["budgets"] == [
        {
            "of": "project",
            "owner": "Project a1",
            "month": "2026-11",
            "card_hours": Decimal("100.00"),
            "used": Decimal("8.00"),
            "remaining": Decimal("92.00"),
            "amount": None,
            "currency": None,
            "used_amount": None,
            "remaining_amount": None,
            "percent": 8,
        },
        {
            "of": "department",
            "owner": "Dept A1",
            "month": "2026-11",
            "card_hours": Decimal("1000.00"),
            "used": Decimal("8.00"),
            "remaining": Decimal("992.00"),
            # A1's money budget: the 8 card-hours at the standard 2.50 are 20.00 of 500.00 (4 %,
            # the higher share of its two limits).
            "amount": Decimal("500.00"),
            "currency": currency,
            "used_amount": Decimal("20.00"),
            "remaining_amount": Decimal("480.00"),
            "percent": 4,
        },
    ]


def test_a_quota_requests_cost_is_a_month_of_the_added_quota(scene):
    world = scene
    grow_pool(world)  # room for A1 and A to grow
    req = quota_request_create(
        actor=world.users["pa1_admin"], flavor=world.F, quota=Decimal(6), project=world.pa1
    )
    ctx = _contexts(world.users["a_admin"], [req])[req.pk]
    # 2 cards more, 720 h at 2.50.
    assert MONTH_HOURS == 720
    assert ctx["cost"]["basis"] == "quota_month"
    assert (ctx["cost"]["cards"], ctx["cost"]["card_hours"], ctx["cost"]["amount"]) == (
        Decimal("2.000"),
        Decimal("1440.000"),
        Decimal("3600.00"),
    )
    assert [(r["owner"], r["quota"], r["in_quota"], r["borrowed"]) for r in ctx["usage"]] == [
        (str(world.pa1), Decimal(4), Decimal(2), Decimal(1))
    ]
    # Asked by pa1_admin: its own borrowed GPU, its one job, no earlier request.
    assert ctx["requester_usage"] == {"owner": str(world.pa1), "in_quota": Decimal(0), "borrowed": Decimal(1)}
    assert ctx["history"] == {"days": 90, "approved": 0, "rejected": 0, "jobs_run": 1, "jobs_idle": 0}
    assert ctx["capacity"] == {"healthy": Decimal(24), "held": Decimal(6), "free": Decimal(18)}


def test_a_loans_context_shows_borrower_and_lender_and_the_cost_over_its_period(scene):
    world = scene
    start = AT.replace(year=2027)
    req = loan_request_create(
        actor=world.users["a_admin"],
        borrower=world.quota["A"],
        lender=world.B,
        amount=Decimal(2),
        starts_at=start,
        ends_at=start + timedelta(hours=48),
    )
    ctx = _contexts(world.users["b_admin"], [req])[req.pk]  # the lender's admin decides it
    assert [(r["role"], r["owner"], r["quota"], r["in_quota"], r["borrowed"]) for r in ctx["usage"]] == [
        ("borrower", str(world.A), Decimal(8), Decimal(2), Decimal(1)),
        ("lender", str(world.B), Decimal(8), Decimal(3), Decimal(0)),
    ]
    assert (ctx["cost"]["basis"], ctx["cost"]["card_hours"], ctx["cost"]["amount"]) == (
        "loan",
        Decimal("96.000"),
        Decimal("240.00"),
    )


def test_no_rate_no_money_and_an_unbounded_job_has_no_total(scene, policy, settings):
    world = scene
    Rate.objects.all().delete()
    req = job_request(world)
    cost = _contexts(world.users["a_admin"], [req])[req.pk]["cost"]
    assert (cost["card_hours"], cost["amount"], cost["currency"]) == (Decimal("4.000"), None, None)


@pytest.mark.parametrize(
    ("persona", "sees"),
    [
        ("a_admin", True),  # approver of the step
        ("platform", True),
        ("auditor", True),
        ("a_finance", True),  # finance of the request's department
        ("pa1_member", False),  # the requester sees the request, not the figures
        ("pa1_admin", False),
        ("b_admin", False),  # does not even see the request
        ("outsider", False),
    ],
)
def test_who_sees_the_context(scene, policy, persona, sees):
    req = job_request(scene)
    assert (req.pk in _contexts(scene.users[persona], [req])) is sees


def test_a_page_of_requests_costs_the_same_queries_whatever_its_length(scene, policy):
    world = scene
    user = world.users["a_admin"]
    first = [job_request(world, name="j0")]
    grow_pool(world)
    first.append(
        quota_request_create(
            actor=world.users["pa1_admin"], flavor=world.F, quota=Decimal(5), project=world.pa1
        )
    )
    _contexts(user, first)  # warm: the scope and the like are cached per request anyway

    def count(requests):
        with CaptureQueriesContext(connection) as ctx:
            found = _contexts(user, requests)
        assert set(found) == {r.pk for r in requests}
        return len(ctx.captured_queries)

    few = count(first)
    more = first + [job_request(world, gpus=3 + i % 2, name=f"j{i}") for i in range(1, 9)]
    assert count(more) == few
