"""Budgets in money (issue 24 item 5): money used = the month's ledger priced as the statement
prices it + the unmetered tail at the standard rate; the burn-down forecast; the 80 % / 100 %
money alerts and the forecast alert (once each, to the owners and finance); the over-budget
hold; bad input; the API and the page."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone, translation

from billing import lines
from billing.budgets import (
    budget_alerts_run,
    budget_reason,
    budget_set,
    budget_statuses,
    over_budget_tenants,
)
from billing.forecast import forecast, window_start
from billing.meter import usage_meter
from billing.models import Budget, BudgetAlert, Rate
from billing.periods import month_of
from jobs.approvals import approval_reasons
from jobs.models import ApprovalPolicy
from jobs.services import job_submit
from portal.models import Notification
from portal.texts import render_in
from quotas.selectors import site_zone
from tests import factories as fx

from .conftest import local, rates

ZONE = ZoneInfo("Asia/Shanghai")
NOV = date(2026, 11, 1)
AT = local(2026, 11, 20, 10, 30)  # the meter's cursor is then 10:00


# --- the forecast arithmetic (pure) -----------------------------------------------------------------


def test_the_window_is_the_last_7_days_or_the_month_so_far():
    start = local(2026, 11, 1)
    assert window_start(local(2026, 11, 20, 10, 30), start, ZONE) == local(2026, 11, 13)
    assert window_start(local(2026, 11, 8, 23), start, ZONE) == local(2026, 11, 1)  # the 1st: 7 days before
    assert window_start(local(2026, 11, 3, 12), start, ZONE) == start  # early in the month


def test_the_forecast_projects_the_rate_of_the_window_to_the_month_end():
    found = forecast(
        used=Decimal(900), used_before_window=Decimal(200), start=local(2026, 11, 13),
        now=local(2026, 11, 20), month_end=local(2026, 12, 1), limit=Decimal(1000),
    )
    assert found.rate_per_day == Decimal(100)  # 700 in 7 days
    assert found.projected == Decimal(2000)  # 900 + 11 days × 100
    assert found.runs_out_at == local(2026, 11, 21) and not found.spent


def test_early_in_the_month_the_days_so_far_make_the_rate():
    now, end = local(2026, 11, 3, 12), local(2026, 12, 1)
    start = window_start(now, local(2026, 11, 1), ZONE)
    exactly = forecast(used=Decimal(250), used_before_window=Decimal(0), start=start, now=now, month_end=end,
                       limit=Decimal(3000))
    assert exactly.rate_per_day == Decimal(100) and exactly.projected == Decimal(3000)
    assert exactly.runs_out_at is None  # reached at the very end: not this month
    sooner = forecast(used=Decimal(250), used_before_window=Decimal(0), start=start, now=now, month_end=end,
                      limit=Decimal(2999))
    assert sooner.runs_out_at == local(2026, 11, 30, 23, 45, 36)  # 1 short: 0.01 day = 14.4 min earlier
    spent = forecast(used=Decimal(250), used_before_window=Decimal(0), start=start, now=now, month_end=end,
                     limit=Decimal(200))
    assert spent.spent and spent.runs_out_at == now
    idle = forecast(used=Decimal(0), used_before_window=Decimal(0), start=start, now=now, month_end=end,
                    limit=Decimal(1))
    assert idle.rate_per_day == 0 and idle.projected == 0 and idle.runs_out_at is None


# --- money used this month -------------------------------------------------------------------------


@pytest.fixture
def priced(world, history):
    """November. F costs 1.2345 a card-hour (standard) and 0.5 (on loan), from the 20th 2.0001
    (standard). pa1: two users 10 minutes each on one GPU on the 19th (two statement lines of
    1/6 card-hour: 0.20575 → 0.21 each), 8 GPUs since 06:00 on the 20th (32 card-hours metered
    at 2.0001 = 64.0032 → 64.00, and at AT 4 in the tail: 8.0004 → 8.00). pb: 2 GPUs on loan
    for an hour on the 19th (1.00). Metered at AT."""
    rates(world.F, "1.2345", "0.5")
    Rate.objects.create(
        flavor=world.F, tier="standard", price=Decimal("2.0001"), valid_from=local(2026, 11, 20)
    )
    history.run(world.pa1, world.F, local(2026, 11, 19, 10), local(2026, 11, 19, 10, 10), gpus=1)
    history.run(
        world.pa1, world.F, local(2026, 11, 19, 11), local(2026, 11, 19, 11, 10), gpus=1,
        user=world.users["pa1_admin"],
    )
    history.run(world.pa1, world.F, local(2026, 11, 20, 6), None, gpus=8)
    loan = history.job(world.pb, world.F, gpus=2)
    history.admit(loan, local(2026, 11, 19, 15) - timedelta(seconds=30), on_loan=True)
    history.start(loan, local(2026, 11, 19, 15))
    history.end(loan, local(2026, 11, 19, 16))
    usage_meter(now=AT)


def _status(budget, now=AT, **kw):
    return budget_statuses([budget], now=now, **kw)[budget.pk]


def test_money_used_is_the_priced_ledger_plus_the_tail_at_the_standard_rate(world, priced):
    project = _status(budget_set(actor=None, amount="1000", project=world.pa1))
    assert project.used_money == Decimal("72.42")  # 0.21 + 0.21 + 64.00 + 8.00 (72.4147 unrounded)
    assert project.used == Decimal(32 + 4) + Decimal(1) / 3  # the card-hours alongside
    assert _status(budget_set(actor=None, amount="1000", department=world.A)).used_money == Decimal("72.42")
    assert _status(budget_set(actor=None, amount="1000", department=world.B)).used_money == Decimal("1.00")
    # The ledger part is what the month's statement lines say for the project.
    statement = lines.usage_lines(NOV, lines.rate_schedules(), through=None, adjustments_after=None)
    assert sum(line.amount for line in statement if line.key.project_id == world.pa1.pk) == Decimal("64.42")
    later = _status(Budget.objects.get(project=world.pa1), now=AT + timedelta(minutes=30))
    assert later.used_money == Decimal("80.42")  # the tail: 8 card-hours × 2.0001 = 16.0008 → 16.00


def test_the_priced_ledger_is_cached_until_the_meter_writes(world, priced):
    budget = budget_set(actor=None, amount="1000", project=world.pa1)
    first = _status(budget)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        again = _status(budget)
    assert again.used_money == first.used_money
    assert not any("AT TIME ZONE" in q["sql"] for q in queries.captured_queries)  # no re-pricing


def test_the_burn_down_days_and_the_forecast(world, priced):
    status = _status(budget_set(actor=None, amount="150", project=world.pa1), series=True)
    days = dict(status.days)
    assert len(days) == 20 and set(days[date(2026, 11, d)] for d in range(1, 19)) == {Decimal(0)}
    assert days[date(2026, 11, 19)] == Decimal("0.42") and days[date(2026, 11, 20)] == Decimal("72.42")
    found = status.forecast
    assert found.window_start == local(2026, 11, 13)
    # 72.42 in 7 days 10.5 hours; 10 days 13.5 hours left: 72.42 × (1 + 253.5 / 178.5).
    assert status.projected == Decimal("175.27")
    assert found.rate_per_day.quantize(Decimal("0.01")) == Decimal("9.74")
    assert status.runs_out_on == date(2026, 11, 28)
    hours = _status(budget_set(actor=None, card_hours="100", department=world.B), series=True)
    assert not hours.in_money and dict(hours.days)[date(2026, 11, 19)] == Decimal(2)
    assert hours.runs_out_on is None  # 2 card-hours a week: not this month


# --- alerts ------------------------------------------------------------------------------------------


def _notes(world, persona):
    return list(Notification.objects.filter(recipient=world.users[persona]).values_list("text", flat=True))


def test_money_thresholds_notify_the_owners_and_finance_once(world, priced):
    budget_set(actor=None, card_hours="1000", amount="80", project=world.pa1)  # 72.42: 90 % of the money
    with translation.override("en"):
        [alert] = budget_alerts_run(now=AT)
        assert (alert.unit, alert.threshold, alert.used_amount, alert.budget_amount) == (
            "money", 80, Decimal("72.42"), Decimal("80.00")
        )
        assert budget_alerts_run(now=AT) == []  # a second run: nothing new, nobody told twice
        for persona in ("pa1_admin", "a_admin", "a_finance"):  # project admins, department admins, finance
            [text] = _notes(world, persona)
            assert "72.42" not in text and "90" in text and "80.00" in text and "2026-11" in text, text
        assert _notes(world, "b_finance") == [] and _notes(world, "pa1_member") == []
        later = AT + timedelta(minutes=30)  # 80.42 of 80
        assert [(a.unit, a.threshold) for a in budget_alerts_run(now=later)] == [("money", 100)]
        assert budget_alerts_run(now=later) == []
    assert len(_notes(world, "a_finance")) == 2
    assert set(BudgetAlert.objects.values_list("unit", "threshold")) == {("money", 80), ("money", 100)}


def test_card_hour_and_money_alerts_are_separate(world, priced):
    budget_set(actor=None, card_hours="40", amount="80", project=world.pa1)  # 36.33 of 40, 72.42 of 80
    assert sorted((a.unit, a.threshold) for a in budget_alerts_run(now=AT)) == [
        ("card_hours", 80), ("money", 80)
    ]
    assert budget_alerts_run(now=AT) == []


def test_the_forecast_alert_comes_once_a_month(world, priced):
    budget_set(actor=None, amount="150", project=world.pa1)  # 48 %, runs out on the 28th
    with translation.override("en"):
        [alert] = budget_alerts_run(now=AT)
        assert (alert.unit, alert.runs_out_on) == ("forecast", date(2026, 11, 28))
        assert budget_alerts_run(now=AT + timedelta(minutes=5)) == []
    [text] = _notes(world, "a_finance")
    assert "2026-11-28" in text and "150.00" in text
    assert render_in("en", Notification.objects.filter(recipient=world.users["a_finance"]).get().message) == (
        "Budget forecast: at the rate of the last 7 days, Project a1 uses up its budget of 150.00 CNY "
        "on 2026-11-28 (2026-11)."
    )


def test_no_forecast_alert_when_the_budget_lasts(world, priced):
    budget_set(actor=None, amount="500", project=world.pa1)  # projected 175.27
    assert budget_alerts_run(now=AT) == []


# --- the hold -------------------------------------------------------------------------------------------


@pytest.fixture
def running_now(world, history, pinned_now):
    """pa1 has held 8 GPUs since half an hour ago (4 card-hours at 10 a card-hour: 40), the clock
    stopped mid-month (tests/clock.py; it skipped in a month's first half hour: issue 32 item 14)."""
    begin = pinned_now - timedelta(minutes=30)
    rates(world.F, "10", "5", since=local(2026, 1, 1))
    ApprovalPolicy.objects.create(department=world.A)
    return history.run(world.pa1, world.F, begin, None, gpus=8)


def _reasons(world, project):
    return [render_in("en", r) for r in approval_reasons(project, "training", world.F, 1, 1, None, 3600)]


def test_a_spent_money_budget_holds_new_jobs(world, running_now, pinned_now):
    budget_set(actor=None, card_hours="1000", amount="20", project=world.pa1)
    [reason] = _reasons(world, world.pa1)
    month = month_of(pinned_now, site_zone())
    assert reason.startswith("over budget: ") and f"% of 20.00 CNY in {month:%Y-%m} (Project a1)" in reason
    assert _reasons(world, world.pa1) == [reason]  # the figure of a moment ago decides the next one
    assert over_budget_tenants(pinned_now) == [f"p{world.pa1.pk}"]
    job = job_submit(
        actor=world.users["platform"], project=world.pa1, name="next", kind="training", flavor=world.F,
        priority_class=fx.priority(), image="img", gpus_per_worker=1, max_runtime_seconds=3600,
    )
    assert job.state == "pending_approval"


def test_a_money_budget_far_from_its_limit_holds_nothing(world, running_now, pinned_now):
    budget_set(actor=None, amount="100000", project=world.pa1)
    assert _reasons(world, world.pa1) == [] and budget_reason(world.pa1, Decimal(1)) is None
    assert over_budget_tenants(pinned_now) == []


# --- setting a money budget ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "-0.01", "x", "1.001", "1e12", "NaN", "Infinity"])
def test_a_money_budget_is_a_sane_positive_amount(world, value):
    with pytest.raises(ValidationError) as error:
        budget_set(actor=world.users["platform"], amount=value, department=world.A)
    assert "amount" in error.value.message_dict
    assert not Budget.objects.exists()


def test_what_users_set_stays(world):
    budget = budget_set(actor=None, card_hours="100", project=world.pa1)
    assert (budget.card_hours, budget.amount, budget.currency) == (Decimal("100.00"), None, "CNY")
    budget = budget_set(actor=None, amount="2500.5", project=world.pa1)  # card-hours left as they are
    assert (budget.card_hours, budget.amount) == (Decimal("100.00"), Decimal("2500.50"))
    budget = budget_set(actor=None, card_hours=None, project=world.pa1)  # removed: money only
    assert (budget.card_hours, budget.amount) == (None, Decimal("2500.50"))
    with pytest.raises(ValidationError):
        budget_set(actor=None, amount="", project=world.pa1)  # a budget keeps one limit
    assert Budget.objects.get().amount == Decimal("2500.50")


def _client(world, persona, lang="en"):
    client = Client(HTTP_ACCEPT_LANGUAGE=lang)
    client.force_login(world.users[persona])
    return client


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"amount": "-5"}, "amount"),
        ({"amount": "1000000000000"}, "amount"),
        ({"amount": "abc"}, "amount"),
        ({"amount": "", "card_hours": ""}, None),
        ({"amount": "5", "card_hours": "-1"}, "card_hours"),
    ],
)
def test_the_form_refuses_bad_amounts(world, data, field):
    response = _client(world, "a_finance").post("/billing/budgets/", {"owner": f"p{world.pa1.pk}", **data})
    assert response.status_code == 200
    form = response.context["form"]
    assert form.errors and (field in form.errors if field else form.non_field_errors())
    assert not Budget.objects.exists()


def test_the_page_sets_a_money_budget_and_draws_its_burn_down(world, priced):
    client = _client(world, "a_finance")
    response = client.post(
        "/billing/budgets/", {"owner": f"p{world.pa1.pk}", "card_hours": "", "amount": "150"}, follow=True
    )
    assert response.status_code == 200
    budget = Budget.objects.get()
    assert (budget.card_hours, budget.amount) == (None, Decimal("150.00"))
    [row] = response.context["rows"]
    assert row["chart"] and '"Forecast at the last 7 days' in row["chart"]
    html = response.content.decode()
    assert 'id="burn-down-' in html and "Spent this month" in html
    prefilled = client.get(f"/billing/budgets/?owner=p{world.pa1.pk}").context["form"].initial
    assert prefilled["amount"] == Decimal("150.00") and prefilled["card_hours"] is None
    zh = _client(world, "a_finance", "zh-hans").get("/billing/budgets/").content.decode()
    assert "预算" in zh and "Spent this month" not in zh


# --- the API ---------------------------------------------------------------------------------------------


def test_the_api_sets_money_and_lists_the_forecast(world, api, priced, monkeypatch):
    monkeypatch.setattr(timezone, "now", lambda: AT)
    client = api(world.users["a_finance"])
    listing = reverse("api:budget-list")
    created = client.post(listing, {"project": world.pa1.pk, "amount": "150"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["card_hours"], body["amount"], body["currency"], body["used_amount"]) == (
        None, "150.00", "CNY", "72.42"
    )
    assert body["forecast"] == {
        "unit": "CNY", "rate_per_day": "9.74", "projected": "175.27", "runs_out_on": "2026-11-28",
        "window_start": "2026-11-12T16:00:00Z",
    }
    detail = reverse("api:budget-detail", args=[body["id"]])
    changed = client.patch(detail, {"card_hours": "50"}, format="json")
    assert changed.json()["amount"] == "150.00" and changed.json()["card_hours"] == "50.00"  # amount kept
    bad = client.patch(detail, {"amount": "-1"}, format="json")
    assert bad.status_code == 400 and "amount" in bad.json()
    assert Budget.objects.get().amount == Decimal("150.00")
    neither = client.post(listing, {"department": world.A1.pk}, format="json")
    assert neither.status_code == 400 and "card_hours" in neither.json()
    assert Budget.objects.count() == 1


def test_an_old_budget_reads_as_before(world, api):
    budget = budget_set(actor=None, card_hours="5", department=world.A1)
    body = api(world.users["a_finance"]).get(reverse("api:budget-detail", args=[budget.pk])).json()
    assert (body["card_hours"], body["amount"], body["used_amount"], body["used_card_hours"]) == (
        "5.00", None, None, "0.00"
    )
    assert body["forecast"]["unit"] == "card-hours"

