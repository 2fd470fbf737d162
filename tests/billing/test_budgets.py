"""Budgets (DESIGN §3.9): who sets them, usage = ledger + unmetered tail, the 80 % / 100 %
alerts (once per threshold and month), the approval check at 100 %, the API and the page; and
the submission form's cost estimate (``jobs.estimates.cost_estimators``)."""

from __future__ import annotations

import re
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from billing.budgets import (
    BudgetStatus,
    _decisive_statuses,
    budget_alerts_run,
    budget_reason,
    budget_set,
    month_usage,
    over_budget_reason,
)
from billing.meter import usage_meter
from billing.models import Budget, BudgetAlert, Rate
from billing.periods import month_of
from billing.tasks import budget_alerts
from jobs.approvals import approval_reasons, budget_checks
from jobs.estimates import cost_estimate, cost_estimators
from jobs.models import ApprovalPolicy, Job
from jobs.services import job_submit
from portal.approvals import open_step
from portal.models import ApprovalRequest, Notification
from portal.notifications import mail_pending
from portal.texts import render_in
from quotas.selectors import site_zone
from tests import factories as fx
from tests.clock import set_clock

from .conftest import local, rates

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)
AT = local(2026, 11, 20, 10, 30)  # "now" of the usage tests: the meter's watermark is 10:00


# --- setting a budget ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "owner", "allowed"),
    [
        ("a_finance", "A1", True),
        ("a_finance", "A", True),  # its own department: finance of it or above
        ("a_admin", "pa1", True),
        ("platform", "B", True),
        ("b_finance", "A1", False),
        ("pa1_admin", "pa1", False),
        ("pa1_member", "pa1", False),
        ("auditor", "A", False),
        ("outsider", "pb", False),
    ],
)
def test_who_sets_a_budget(world, persona, owner, allowed):
    target = {"A": world.A, "A1": world.A1, "B": world.B, "pa1": world.pa1, "pb": world.pb}[owner]
    kind = "project" if owner.startswith("p") else "department"
    if not allowed:
        with pytest.raises(PermissionDenied):
            budget_set(actor=world.users[persona], card_hours="100", **{kind: target})
        assert not Budget.objects.exists()
        return
    budget = budget_set(actor=world.users[persona], card_hours="100", **{kind: target})
    again = budget_set(actor=world.users[persona], card_hours="250.5", **{kind: target})
    assert again.pk == budget.pk and Budget.objects.get().card_hours == Decimal("250.50")


@pytest.mark.parametrize("value", ["0", "-1", "x", "1.001", "1e20", "NaN"])
def test_a_budget_is_a_positive_amount_of_card_hours(world, value):
    with pytest.raises(ValidationError) as error:
        budget_set(actor=world.users["platform"], card_hours=value, department=world.A)
    assert "card_hours" in error.value.message_dict


def test_a_budget_has_exactly_one_owner(world):
    for owners in ({}, {"department": world.A, "project": world.pa}):
        with pytest.raises(ValidationError):
            budget_set(actor=world.users["platform"], card_hours="1", **owners)


# --- usage this month ----------------------------------------------------------------------------


@pytest.fixture
def usage(world, history):
    """November: pa1 ran 4 GPUs 10:00–12:00 on the 19th (8 card-hours) and has run 8 GPUs since
    06:00 on the 20th; pb ran 8 GPUs for an hour on the 19th. At AT (10:30) the meter has the
    ledger up to 10:00: pa1 8 + 32 metered, 4 in the tail; pb 8."""
    rates(world.F, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 11, 19, 10), local(2026, 11, 19, 12), gpus=4)
    running = history.run(world.pa1, world.F, local(2026, 11, 20, 6), None, gpus=8)
    history.run(world.pb, world.F, local(2026, 11, 19, 15), local(2026, 11, 19, 16), gpus=8)
    history.run(world.pa, world.F, local(2026, 10, 31, 12), local(2026, 10, 31, 14), gpus=8)  # October
    return running


def test_usage_is_the_ledger_plus_the_unmetered_tail(world, usage):
    unmetered = month_usage(NOV, AT)  # nothing metered yet: all of it is tail
    usage_meter(now=AT)
    metered = month_usage(NOV, AT)
    for found in (unmetered, metered):
        assert found[("project", world.pa1.pk)] == Decimal(44)
        assert found[("department", world.A1.pk)] == Decimal(44)
        assert found[("department", world.A.pk)] == Decimal(44)  # a department counts its subtree
        assert found[("department", world.B.pk)] == Decimal(8)
        assert ("project", world.pa.pk) not in found  # October's usage is not November's
    later = month_usage(NOV, AT + timedelta(minutes=90))  # the tail grows until the next run
    assert later[("project", world.pa1.pk)] == Decimal(56)


@pytest.mark.parametrize("metered", [False, True])
def test_usage_asked_for_some_keys_equals_the_whole_computation_for_them(world, usage, metered):
    if metered:
        usage_meter(now=AT)
    whole = month_usage(NOV, AT)
    for keys in (
        [("project", world.pa1.pk)],
        [("department", world.A1.pk), ("project", world.pa.pk)],
        [("department", world.A.pk)],
        [("department", world.B.pk), ("project", world.pb.pk)],
        [("project", world.pb.pk), ("department", world.A1.pk)],
    ):
        some = month_usage(NOV, AT, keys=keys)
        assert some == {k: whole[k] for k in keys if k in whole}, keys


@pytest.mark.parametrize("metered", [False, True])
def test_the_bound_is_never_below_the_usage(world, usage, metered):
    if metered:
        usage_meter(now=AT)
    for at in (AT, AT + timedelta(minutes=90)):
        exact, bound = month_usage(NOV, at), month_usage(NOV, at, upper=True)
        assert exact and all(bound[key] >= value for key, value in exact.items()), (exact, bound)
    if metered:  # one job in the tail, running all of it at its full size: the bound is exact
        assert month_usage(NOV, AT, upper=True) == month_usage(NOV, AT)


def test_a_project_moved_keeps_its_metered_usage_with_the_old_department(world, usage):
    usage_meter(now=AT)
    world.pa1.department = world.B
    world.pa1.save()
    found = month_usage(NOV, AT)
    assert found[("department", world.A1.pk)] == Decimal(40)  # metered while in A1
    assert found[("department", world.B.pk)] == Decimal(8 + 4)  # the tail follows the project now


# --- alerts ------------------------------------------------------------------------------------------


def _notes(world, persona):
    return list(
        Notification.objects.filter(recipient=world.users[persona])
        .order_by("id")
        .values_list("text", flat=True)
    )


def test_thresholds_notify_the_owners_once_each(world, usage):
    world.users["a_finance"].email = "fin@example.org"
    world.users["a_finance"].save()
    budget_set(actor=None, card_hours="50", department=world.A1)
    usage_meter(now=AT)
    with translation.override("en"):
        assert [a.threshold for a in budget_alerts_run(now=AT)] == [80]  # 44 of 50: 88 %
        assert budget_alerts_run(now=AT) == []  # a re-run notifies nobody twice
        # A1 has no admin or finance of its own: the nearest department above that has them (A).
        for persona in ("a_admin", "a_finance"):
            [text] = _notes(world, persona)  # stored in the site language (zh-hans)
            assert "88" in text and "50" in text and "2026-11" in text and "Dept A1" in text
        assert _notes(world, "b_finance") == [] and _notes(world, "pa1_member") == []
        later = AT + timedelta(minutes=90)  # 56 of 50
        assert [a.threshold for a in budget_alerts_run(now=later)] == [100]
        assert budget_alerts_run(now=later) == []
    texts = _notes(world, "a_finance")
    assert len(texts) == 2 and "112" in texts[1]
    assert BudgetAlert.objects.count() == 2
    assert mail_pending() == 2 and len(mail.outbox) == 2  # a_finance has an address; a_admin none
    assert mail.outbox[0].to == ["fin@example.org"]


def test_crossing_both_thresholds_at_once_sends_one_notice(world, usage):
    budget_set(actor=None, card_hours="10", project=world.pa1)
    Notification.objects.all().delete()
    assert sorted(a.threshold for a in budget_alerts_run(now=AT)) == [80, 100]
    assert len(_notes(world, "a_admin")) == 1
    assert budget_alerts_run(now=AT) == []


def test_a_new_month_alerts_again(world, usage, history):
    budget_set(actor=None, card_hours="10", project=world.pa1)
    budget_alerts_run(now=AT)
    # The running job goes on into December: 8 GPUs × 0.5 h is 40 %, × 1 h 80 %.
    assert budget_alerts_run(now=local(2026, 12, 1, 0, 30)) == []
    assert [a.threshold for a in budget_alerts_run(now=local(2026, 12, 1, 1))] == [80]
    assert set(BudgetAlert.objects.values_list("month", "threshold")) == {
        (NOV, 80),
        (NOV, 100),
        (date(2026, 12, 1), 80),
    }


@pytest.mark.django_db(transaction=True)
def test_two_alert_runs_at_once_notify_once(world, usage):
    """Each run on its own connection, inside a transaction held open a moment: the second one's
    insert of the alert waits for the first to commit, then finds the row and notifies nobody."""
    import threading
    import time

    from django.db import connection, transaction

    budget_set(actor=None, card_hours="50", department=world.A1)
    barrier, found = threading.Barrier(2), []

    def run():
        try:
            with transaction.atomic():
                barrier.wait(timeout=60)  # a hang guard
                found.append(len(budget_alerts_run(now=AT)))
                time.sleep(0.5)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(found) == [0, 1]
    assert BudgetAlert.objects.count() == 1
    assert len(_notes(world, "a_finance")) == 1 and len(_notes(world, "a_admin")) == 1


def test_the_celery_task_runs_the_alerts(world):
    assert budget_alerts.apply().get() == 0  # no budget: nothing to do


# --- the approval check at 100 % --------------------------------------------------------------------


def test_the_reason_names_the_percentage_the_budget_and_the_month(world):
    budget = Budget(department=world.A, card_hours=Decimal(2000))
    text = over_budget_reason(BudgetStatus(budget, date(2026, 12, 1), Decimal("2100.4")))
    assert render_in("en", text) == "over budget: 105 % of 2,000 card-hours in 2026-12 (Dept A)"


@pytest.fixture
def running_now(world, history, pinned_now):
    """pa1 has held 8 GPUs since half an hour ago (this month, as the tail: nothing metered). The
    clock is stopped mid-month (tests/clock.py): these tests used to skip in a month's first
    half hour, and the bound checks below in its first minutes (issue 32 item 14)."""
    begin = pinned_now - timedelta(minutes=30)
    ApprovalPolicy.objects.create(department=world.A)  # over_budget: on by default; no other rule
    ApprovalPolicy.objects.create(department=world.B)
    return history.run(world.pa1, world.F, begin, None, gpus=8)  # ≈ 4 card-hours


def _bound(key, now) -> Decimal:
    """The upper bound of this month's usage: nothing is metered, so it counts the running job
    from the 1st — past 5 card-hours from the month's first hour on (mid-month, pinned: always)."""
    return month_usage(month_of(now, site_zone()), now, upper=True)[key]


def _submit(world, project, name="next"):
    return job_submit(
        actor=world.users["platform"],
        project=project,
        name=name,
        kind="training",
        flavor=world.F,
        priority_class=fx.priority(),
        image="img",
        gpus_per_worker=1,
        max_runtime_seconds=3600,
    )


def _reasons(world, project):
    # Messages (portal/texts.py), read here in English.
    return [render_in("en", r) for r in approval_reasons(project, "training", world.F, 1, 1, None, 3600)]


def test_over_budget_a_new_job_needs_approval_with_the_reason(world, running_now, pinned_now):
    budget_set(actor=None, card_hours="2", project=world.pa1)
    [reason] = _reasons(world, world.pa1)
    month = month_of(pinned_now, site_zone())
    assert reason.startswith("over budget: ") and f"% of 2 card-hours in {month:%Y-%m} (Project a1)" in reason
    job = _submit(world, world.pa1)
    assert job.state == "pending_approval"
    request = ApprovalRequest.objects.get(subject_id=job.pk)
    [stored] = request.payload["reasons"]
    assert render_in("en", stored) == reason


def test_under_budget_there_is_no_reason(world, running_now):
    budget_set(actor=None, card_hours="1000", project=world.pa1)
    assert _reasons(world, world.pa1) == []
    assert budget_reason(world.pa1, Decimal(1)) is None
    assert _submit(world, world.pa1).state == "queued"


def _reads_events(call) -> bool:
    """Whether ``call`` read job events for the exact unmetered tail."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    return any("FROM jobs_jobevent e" in q["sql"] and "e.job_id = ANY" in q["sql"] for q in queries)


def test_a_budget_far_from_its_limit_is_decided_without_the_exact_tail(world, running_now):
    budget_set(actor=None, card_hours="100000", project=world.pa1)
    assert not _reads_events(lambda: budget_reason(world.pa1, Decimal(1)))
    assert budget_reason(world.pa1, Decimal(1)) is None


def test_near_its_limit_the_exact_usage_decides(world, running_now, pinned_now):
    """≈ 4 card-hours used; nothing metered, so the bound counts the job from the 1st."""
    budget_set(actor=None, card_hours="5", project=world.pa1)
    assert _bound(("project", world.pa1.pk), pinned_now) >= 5
    assert _reads_events(lambda: budget_reason(world.pa1, Decimal(1)))
    assert budget_reason(world.pa1, Decimal(1)) is None  # under: the bound alone would hold it
    budget_set(actor=None, card_hours="3", project=world.pa1)
    reason = render_in("en", budget_reason(world.pa1, Decimal(1)))
    assert re.match(r"over budget: 13\d % of 3 card-hours", reason)


@pytest.mark.parametrize("limit, over", [("3", True), ("5", False)])
def test_a_figure_a_few_seconds_old_decides_the_next_submission(
    world, running_now, pinned_now, monkeypatch, limit, over
):
    """4 card-hours used. The first check computes them exactly; the next ones, within a minute,
    know usage only grew since — by at most 8 GPUs × the seconds between — so 3 is still spent
    and 5 still short, without reading the events again."""
    budget_set(actor=None, card_hours=limit, project=world.pa1)
    assert _bound(("project", world.pa1.pk), pinned_now) >= 5
    first = []
    assert _reads_events(lambda: first.append(budget_reason(world.pa1, Decimal(1))))
    set_clock(monkeypatch, pinned_now + timedelta(seconds=5))  # the stopped clock moves a few seconds on
    again = []
    assert not _reads_events(lambda: again.append(budget_reason(world.pa1, Decimal(1))))
    assert again == first and (first[0] is not None) == over
    assert _bounds_read(lambda: budget_reason(world.pa1, Decimal(1))) == 1  # the seconds since only


def _bounds_read(call) -> int:
    """How many upper bounds of the unmetered tail ``call`` computed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    return sum("sum(j.workers::numeric * j.gpus_per_worker" in q["sql"] for q in queries)


def test_a_department_budget_holds_its_whole_subtree_and_nothing_else(world, running_now):
    budget_set(actor=None, card_hours="1", department=world.A)
    [reason] = _reasons(world, world.pa1)
    assert reason.endswith("(Dept A)")
    assert _reasons(world, world.pa) != []  # pa is in A too (its own usage is zero)
    assert _reasons(world, world.pb) == []  # B has its own policy, and no budget
    assert _submit(world, world.pb).state == "queued"


def test_a_project_budget_holds_only_its_project(world, running_now):
    budget_set(actor=None, card_hours="1", project=world.pa1)
    budget_set(actor=None, card_hours="1000", department=world.A)
    assert len(_reasons(world, world.pa1)) == 1
    assert _reasons(world, world.pa) == []  # same department, own (no) budget, A under budget


def test_the_nearest_spent_budget_is_named(world, running_now):
    budget_set(actor=None, card_hours="1", department=world.A)
    budget_set(actor=None, card_hours="2", department=world.A1)
    [reason] = _reasons(world, world.pa1)
    assert reason.endswith("(Dept A1)")


def test_a_spent_budget_holds_jobs_even_where_no_policy_applies(world, running_now):
    ApprovalPolicy.objects.all().delete()
    assert _reasons(world, world.pa1) == []
    budget_set(actor=None, card_hours="1", project=world.pa1)
    [reason] = _reasons(world, world.pa1)
    assert reason.startswith("over budget: ")
    job = _submit(world, world.pa1)
    assert job.state == "pending_approval"
    request = ApprovalRequest.objects.get(subject_id=job.pk)
    assert open_step(request).approver_role == "department_admin"


def test_a_policy_without_over_budget_asks_nothing(world, running_now):
    ApprovalPolicy.objects.filter(department=world.A).update(over_budget=False)
    budget_set(actor=None, card_hours="1", project=world.pa1)
    assert _reasons(world, world.pa1) == []


def test_billing_registers_its_hooks_once(world):
    assert budget_checks.count(budget_reason) == 1
    from billing.selectors import standard_cost

    assert cost_estimators.count(standard_cost) == 1


def test_one_query_prices_many_flavors_at_their_standard_rate(world, flavors):
    """The approval inbox's price list (issue 24): every flavor of a page in one query, each at the
    standard rate in force at ``at`` (the later rate once it started), a flavor without one left out."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from jobs.estimates import cost_pricers

    full, mig, shared = flavors
    rates(full, "12", "9.6")
    rates(mig, "2", "1.5")
    Rate.objects.create(flavor=mig, tier="standard", price=Decimal("3"), valid_from=local(2026, 11, 1))
    with CaptureQueriesContext(connection) as queries:
        prices = cost_pricers([full, mig, shared], local(2026, 11, 2))
    assert len(queries.captured_queries) == 1
    assert set(prices) == {full.pk, mig.pk}
    assert prices[full.pk](Decimal(2)) == (Decimal("24.00"), "CNY")
    assert prices[mig.pk](Decimal(2)) == (Decimal("6.00"), "CNY")
    assert cost_pricers([mig], local(2026, 10, 31))[mig.pk](Decimal(2)) == (Decimal("4.00"), "CNY")


# --- the API -----------------------------------------------------------------------------------------


def test_the_budget_api_sets_lists_and_deletes(world, api, usage):
    usage_meter(now=AT)
    client = api(world.users["a_finance"])
    created = client.post(
        reverse("api:budget-list"), {"department": world.A1.pk, "card_hours": "50"}, format="json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["department"], body["project"], body["card_hours"]) == (world.A1.pk, None, "50.00")
    changed = client.patch(
        reverse("api:budget-detail", args=[body["id"]]), {"card_hours": "60"}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["card_hours"] == "60.00"
    listed = client.get(reverse("api:budget-list")).json()["results"]
    assert [row["id"] for row in listed] == [body["id"]]
    assert listed[0]["month"] == month_of(timezone.now(), site_zone()).strftime("%Y-%m")
    assert client.delete(reverse("api:budget-detail", args=[body["id"]])).status_code == 204
    assert not Budget.objects.exists()


@pytest.mark.parametrize(
    ("persona", "body_of", "status", "field"),
    [
        ("pa1_admin", lambda w: {"project": w.pa1.pk, "card_hours": "5"}, 403, None),
        ("auditor", lambda w: {"department": w.A.pk, "card_hours": "5"}, 403, None),
        ("b_finance", lambda w: {"department": w.A1.pk, "card_hours": "5"}, 400, "department"),  # not visible
        ("a_finance", lambda w: {"department": w.A1.pk, "card_hours": "0"}, 400, "card_hours"),
        ("a_finance", lambda w: {"department": w.A1.pk, "card_hours": "abc"}, 400, "card_hours"),
        ("a_finance", lambda w: {"card_hours": "5"}, 400, "department"),
        (
            "a_finance",
            lambda w: {"department": w.A1.pk, "project": w.pa1.pk, "card_hours": "5"},
            400,
            "department",
        ),
    ],
)
def test_bad_or_forbidden_budget_writes(world, api, persona, body_of, status, field):
    response = api(world.users[persona]).post(reverse("api:budget-list"), body_of(world), format="json")
    assert response.status_code == status, response.content
    if field:
        assert field in response.json()
    assert not Budget.objects.exists()


def test_a_budget_stays_with_its_owner(world, api):
    budget = budget_set(actor=None, card_hours="5", department=world.A1)
    response = api(world.users["a_finance"]).patch(
        reverse("api:budget-detail", args=[budget.pk]), {"department": world.A.pk}, format="json"
    )
    assert response.status_code == 400 and "department" in response.json()
    other = api(world.users["b_finance"]).delete(reverse("api:budget-detail", args=[budget.pk]))
    assert other.status_code == 404
    member = api(world.users["pa1_member"]).delete(reverse("api:budget-detail", args=[budget.pk]))
    assert member.status_code == 403  # sees the budget of its department, may not change it


# --- the page ---------------------------------------------------------------------------------------


def _client(world, persona):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users[persona])
    return client


def test_the_budget_page_sets_a_budget_and_shows_its_use(world, running_now):
    client = _client(world, "a_finance")
    response = client.post("/billing/budgets/", {"owner": f"p{world.pa1.pk}", "card_hours": "2"}, follow=True)
    assert response.status_code == 200
    [row] = response.context["rows"]
    assert row["budget"].project == world.pa1 and row["status"].over and row["can_edit"]
    assert "over budget" in response.content.decode()
    bad = client.post("/billing/budgets/", {"owner": f"d{world.B.pk}", "card_hours": "2"})
    assert bad.status_code == 200 and "Select a valid choice" in bad.content.decode()
    assert Budget.objects.count() == 1
    other = _client(world, "b_finance").get("/billing/budgets/")
    assert other.context["rows"] == []
    assert _client(world, "b_finance").post(f"/billing/budgets/{row['budget'].pk}/delete/").status_code == 404
    assert client.post(f"/billing/budgets/{row['budget'].pk}/delete/").status_code == 302
    assert not Budget.objects.exists()


def test_a_member_reads_budgets_but_gets_no_form(world):
    budget_set(actor=None, card_hours="5", project=world.pa1)
    response = _client(world, "pa1_member").get("/billing/budgets/")
    assert [r["budget"].project for r in response.context["rows"]] == [world.pa1]
    assert not response.context["form"].allowed and "Set a budget" not in response.content.decode()
    assert _client(world, "pa1_member").post("/billing/budgets/", {"owner": "x"}).status_code == 403


# --- the cost estimate on the submission form -------------------------------------------------------


def test_the_estimate_prices_card_hours_at_the_standard_rate_in_force(world):
    assert cost_estimate(world.F, Decimal("16.00"), timezone.now()) is None  # no rate: no money
    rates(world.F, "12", "9.6", since=local(2026, 1, 1))
    rates(world.F, "12.345", "9", since=local(2026, 6, 1))
    assert cost_estimate(world.F, Decimal("16.00"), local(2026, 3, 1)) == (Decimal("192.00"), "CNY")
    # 1.01 × 12.345 = 12.46845 → half-up to the cent, the one rounding rule.
    assert cost_estimate(world.F, Decimal("1.01"), local(2026, 7, 1)) == (Decimal("12.47"), "CNY")


def _form_body(world, **fields) -> dict:
    """The submission form's fields for 2 × 4 cards of F in pa1."""
    return {
        "name": "bert",
        "project": world.pa1.pk,
        "kind": "training",
        "flavor": world.F.pk,
        "priority_class": fx.priority().pk,
        "workers": "2",
        "gpus_per_worker": "4",
        "image": "img",
        **fields,
    }


def test_the_submission_form_shows_the_cost_next_to_the_card_hours(world):
    rates(world.F, "12", "9.6")
    body = _form_body(world, max_runtime_seconds="7200")
    response = _client(world, "pa1_member").post("/jobs/new/validate/", body)
    page = response.content.decode()
    assert "16" in page and "192.00 CNY" in page  # 8 GPUs × 2 h = 16 card-hours × 12
    assert not Job.objects.exists()


# --- the scheduler's budget hold (issue 18 item 2): billing's real provider, nothing injected ---


@pytest.fixture
def holding(world, running_now):
    """``running_now`` as the scheduler sees it too: pa1's job holds the 8 GPUs of node n0."""
    from quotas.models import Node

    node = Node.objects.get(name="n0")
    events = {e.to_state: e.occurred_at for e in running_now.events.all()}
    Job.objects.filter(pk=running_now.pk).update(
        placement=[[[node.pk, g, 1000] for g in range(8)]],
        admitted_at=events["admitted"],
        started_at=events["running"],
    )
    return running_now


def _queued_in(world, project, name):
    job = fx.submit(project, world.F, gpus=1, name=name)
    assert job.state == "queued"
    return job


def test_item2_billing_registers_the_schedulers_budget_hold():
    from billing.budgets import over_budget_tenants
    from jobs.scheduling.config import over_budget_providers

    assert over_budget_tenants in over_budget_providers


def test_item2_a_spent_budget_holds_queued_and_requeued_jobs_for_approval(world, holding):
    from jobs.scheduling.cycle import schedule_once

    waiting = _queued_in(world, world.pa, "waiting")  # queued while the budget still had room
    approved = _queued_in(world, world.pa, "approved")
    Job.objects.filter(pk=approved.pk).update(approved=True)
    budget_set(actor=None, card_hours="2", department=world.A)  # pa1's ≈ 4 card-hours spend it
    schedule_once()
    waiting.refresh_from_db()
    approved.refresh_from_db()
    assert approved.state == "admitted"  # a human said yes: the budget does not hold it
    assert waiting.state == "pending_approval"
    event = waiting.events.get(to_state="pending_approval")
    assert event.from_state == "queued" and event.reason == "over budget"
    request = ApprovalRequest.objects.get(subject_id=waiting.pk, kind="job", state="pending")
    assert request.requester == waiting.submitted_by
    assert len(request.payload["reasons"]) == 1
    # Approved, it runs although the budget is still spent.
    from portal.approvals import approval_decide

    approval_decide(actor=world.users["a_admin"], step_or_request=request, approve=True, comment="ok")
    schedule_once()
    waiting.refresh_from_db()
    assert waiting.state == "admitted" and waiting.approved


def test_item2_explain_says_budget_while_a_held_job_waits(world, holding, monkeypatch):
    """A long queue is sent to approval over several cycles; until then explain says why."""
    from jobs.scheduling import cycle as scheduling

    monkeypatch.setattr(scheduling, "HOLDS_PER_CYCLE", 1)
    first = _queued_in(world, world.pa, "first")
    second = _queued_in(world, world.pa, "second")
    budget_set(actor=None, card_hours="2", project=world.pa1)
    budget_set(actor=None, card_hours="2", department=world.A)
    scheduling.schedule_once()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.state, second.state) == ("pending_approval", "queued")
    from rest_framework.test import APIClient

    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.force_authenticate(world.users["platform"])
    explain = client.get(reverse("api:job-explain", args=[second.pk])).json()
    assert explain["reason"] == "budget", explain
    scheduling.schedule_once()
    second.refresh_from_db()
    assert second.state == "pending_approval"


def test_item2_a_policy_without_over_budget_lets_queued_jobs_run(world, holding):
    from jobs.scheduling.cycle import schedule_once

    ApprovalPolicy.objects.filter(department=world.A).update(over_budget=False)
    job = _queued_in(world, world.pa, "free")
    budget_set(actor=None, card_hours="2", department=world.A)
    schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted"


def test_item2_under_budget_nothing_is_held(world, holding):
    from jobs.scheduling.cycle import schedule_once

    job = _queued_in(world, world.pa, "fine")
    budget_set(actor=None, card_hours="1000", department=world.A)
    schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted"


def test_item15_the_form_prices_an_hour_when_no_maximum_runtime_is_set(world):
    body = _form_body(world, max_runtime_seconds="")
    client = _client(world, "pa1_member")
    no_rate = client.post("/jobs/new/validate/", body).content.decode()
    assert "no billing rate applies to this flavor yet" in no_rate  # true: there is none
    rates(world.F, "12", "9.6")
    response = client.post("/jobs/new/validate/", body)
    page = response.content.decode()
    assert response.context["summary"]["cost_per_hour"] == (Decimal("96.00"), "CNY")  # 8 cards × 12
    assert "Cost per hour" in page and "96.00 CNY" in page
    assert "no billing rate" not in page and "Estimated cost at most" not in page  # no total: unbounded
    body["max_runtime_seconds"] = "7200"
    bounded = client.post("/jobs/new/validate/", body).content.decode()
    assert "192.00 CNY" in bounded and "96.00 CNY" in bounded and "no billing rate" not in bounded
    assert not Job.objects.exists()


def _tree_reads(call) -> int:
    """How many times ``call`` read the whole department tree."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    return sum('"parent_id" FROM "portal_department" ORDER BY' in q["sql"] for q in queries)


def test_a_usage_figure_reads_the_department_tree_once(world, running_now):
    """The tree is read once per computation and passed down, not once per helper."""
    keys = [("department", world.A.pk), ("project", world.pa1.pk)]
    assert _tree_reads(lambda: month_usage(NOV, AT, keys=keys)) == 1
    assert _tree_reads(lambda: month_usage(NOV, AT)) == 1


def test_a_recent_figure_s_check_reads_the_department_tree_once(world, running_now, pinned_now):
    """≈ 4 card-hours used in A: the first check computes them exactly, the next one decides from
    that figure and the bound since, with one read of the tree."""
    budget_set(actor=None, card_hours="3", department=world.A)
    assert _bound(("department", world.A.pk), pinned_now) >= 5
    budgets = list(Budget.objects.all())
    assert budget_reason(world.pa1, Decimal(1)) is not None  # the exact figure, remembered
    assert not _reads_events(lambda: _decisive_statuses(budgets, pinned_now))  # the recent one decides
    assert _tree_reads(lambda: _decisive_statuses(budgets, pinned_now)) == 1


def test_a_submissions_budget_check_reads_the_department_tree_once(world, running_now, pinned_now):
    """``budget_reason`` (every submission): the budgets' path, the bound and the exact figure
    share one read of the tree — three before — and so does the next check from the recent figure."""
    budget_set(actor=None, card_hours="3", department=world.A)
    assert _bound(("department", world.A.pk), pinned_now) >= 5
    assert _tree_reads(lambda: budget_reason(world.pa1, Decimal(1))) == 1  # bound over: the exact figure
    assert _tree_reads(lambda: budget_reason(world.pa1, Decimal(1))) == 1  # decided by the recent figure


def test_issue34_a_spent_budget_blocks_native_slurm_submissions_and_a_top_up_lifts_it(
    world, holding, pinned_now
):
    """Issue 34 item 4: the Slurm accounts sync reads billing's own over-budget provider (no
    stand-in): the spent department's account (and its borrow account) gets GrpSubmitJobs=0;
    raised, it is cleared."""
    from jobs.native.slurm_accounts import naming, portal_state
    from quotas.models import Cluster
    from quotas.slurm_accounts import desired_state

    cluster = Cluster.objects.create(name="s1", kind="slurm", config={"slurm_conf": "/nonexistent"})
    budget_set(actor=None, card_hours="2", department=world.A)  # pa1's ≈ 4 card-hours spend it
    state = portal_state(cluster, pinned_now)
    assert ("department", world.A.code) in state.blocked
    accounts = desired_state(state, naming()).accounts
    assert accounts[naming().account(world.A.code)].grp_submit_jobs == 0
    assert accounts[naming().borrow_account(world.A.code)].grp_submit_jobs == 0
    budget_set(actor=None, card_hours="1000", department=world.A)  # a top-up
    assert portal_state(cluster, pinned_now).blocked == frozenset()
