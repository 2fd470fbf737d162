"""The usage explorer (issue 24 item 4): exact figures of a small metered ledger — grouping on one
and two levels, the range cut at local midnights, normalised card-hours, cost priced as statement
usage lines (and equal to the closed statement), utilisation from GPU samples, queue waits —, the
CSV and XLSX files read back, bad input answered 400 without a 500, and each persona seeing only
its own rows (page, files and API). Also the job page's cost so far."""

from __future__ import annotations

import csv
import io
from datetime import date, timedelta
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from billing import usage
from billing.meter import meter_state, usage_meter
from billing.models import Rate, Statement
from billing.services import statement_close_month
from jobs.estimates import job_cost
from jobs.models import Job, JobGpuSample
from quotas.models import Flavor

from .conftest import History, local, rates

pytestmark = pytest.mark.django_db
NOV = {"start": "2026-11-01", "end": "2026-12-01"}


@pytest.fixture
def ledger(world):
    """November 2026 in Asia/Shanghai, F at 12.00 (standard) per card-hour, F's relative throughput
    1.5 when metered:

    * pa1 (A1), pa1_member: 2 GPUs 10:00–11:30 on the 5th — 3 card-hours, 36.00; queued 10 min;
      GPU samples every minute at 50 % → 3 sampled, 1.5 effective card-hours.
    * pb (B), pb_member: 1 GPU 10:00–11:00 on the 6th — 1 card-hour, 12.00; queued 20 min.
    * pa (A), a_admin: 1 GPU from 23:00 on 30 November to 01:00 on 1 December — one card-hour on
      each side of the month's end; queued 30 min.
    """
    Flavor.objects.filter(pk=world.F.pk).update(relative_throughput=Decimal("1.5"))
    world.F.refresh_from_db()
    rates(world.F, "12", "9.6")
    history = History(world)
    jobs = {}
    for key, project, user, begin, end, gpus, wait in (
        ("pa1", world.pa1, "pa1_member", local(2026, 11, 5, 10), local(2026, 11, 5, 11, 30), 2, 10),
        ("pb", world.pb, "pb_member", local(2026, 11, 6, 10), local(2026, 11, 6, 11), 1, 20),
        ("pa", world.pa, "a_admin", local(2026, 11, 30, 23), local(2026, 12, 1, 1), 1, 30),
    ):
        jobs[key] = history.run(
            project,
            world.F,
            begin,
            end,
            gpus=gpus,
            user=world.users[user],
            submitted=begin - timedelta(minutes=wait, seconds=30),
        )
    JobGpuSample.objects.bulk_create(
        JobGpuSample(job=jobs["pa1"], minute=local(2026, 11, 5, 10) + timedelta(minutes=m), gpu_util_pct=50.0,
                     fb_used_mib=1024, gpus=2)
        for m in range(90)
    )
    usage_meter(now=local(2026, 12, 3))
    return jobs


def _get(client, user, **params):
    client.force_login(user)
    return client.get("/billing/usage/", params, HTTP_ACCEPT_LANGUAGE="en")


def _report(user, start, end, *group_by):
    zone_start = local(*start)
    return usage.usage_report(user, usage.UsageQuery(zone_start, local(*end), tuple(group_by)), "CNY")


def _by_label(report) -> dict:
    return {r.labels: r for r in report.rows}


def test_grouping_by_department_gives_exact_card_hours_normalised_and_cost(world, ledger):
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "department")
    rows = _by_label(report)
    assert set(rows) == {("Dept A (A)",), ("Dept A1 (A1)",), ("Dept B (B)",)}
    a1, b, a = rows[("Dept A1 (A1)",)], rows[("Dept B (B)",)], rows[("Dept A (A)",)]
    assert (a1.card_hours, a1.normalised_card_hours) == (Decimal(3), Decimal("4.5"))
    assert a1.cost == Decimal("36.00")
    assert (b.card_hours, b.normalised_card_hours, b.cost) == (Decimal(1), Decimal("1.5"), Decimal("12.00"))
    # The range ends at local midnight of 1 December: the pa job's second hour is not in it.
    assert (a.card_hours, a.cost) == (Decimal(1), Decimal("12.00"))
    assert next(r.labels for r in report.rows) == ("Dept A1 (A1)",)  # largest first
    assert (report.total.card_hours, report.total.cost) == (Decimal(5), Decimal("60.00"))
    assert report.money


def test_the_range_is_cut_at_local_midnights(world, ledger):
    platform = world.users["platform"]
    december = _report(platform, (2026, 12, 1), (2026, 12, 2), "project")
    assert [(r.labels, r.card_hours) for r in december.rows] == [(("pa",), Decimal(1))]
    # 30 November alone: the first hour of pa's job, nothing else.
    last_day = _report(platform, (2026, 11, 30), (2026, 12, 1), "project")
    assert [(r.labels, r.card_hours) for r in last_day.rows] == [(("pa",), Decimal(1))]
    before = _report(platform, (2026, 11, 1), (2026, 11, 5), "project")
    assert before.rows == [] and before.total.card_hours == 0 and before.total.cost == Decimal("0.00")


def test_a_whole_month_by_department_equals_the_closed_statements(world, ledger):
    statement_close_month(month=date(2026, 11, 1), now=local(2026, 12, 3))
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "department")
    for statement in Statement.objects.filter(month=date(2026, 11, 1)):
        row = next(r for r in report.rows if r.key == (statement.department_id,))
        assert row.cost == statement.total


def test_two_levels_kind_priority_and_user(world, ledger):
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "department", "user")
    assert {r.labels: r.card_hours for r in report.rows} == {
        ("Dept A1 (A1)", "pa1_member"): Decimal(3),
        ("Dept B (B)", "pb_member"): Decimal(1),
        ("Dept A (A)", "a_admin"): Decimal(1),
    }
    by_kind = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 2), "kind", "priority")
    [row] = by_kind.rows
    assert row.key == ("training", by_kind.rows[0].key[1]) and row.labels[1] == "training"
    assert (row.card_hours, row.cost) == (Decimal(6), Decimal("72.00"))


def test_cost_follows_a_rate_change_inside_the_range(world, ledger):
    """20.00 from 00:00 on 6 November: pb's hour is priced at it, pa1's (the 5th) at 12.00."""
    Rate.objects.create(flavor=world.F, tier="standard", price=Decimal("20"), valid_from=local(2026, 11, 6))
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "project")
    costs = {r.labels[0]: r.cost for r in report.rows}
    assert costs == {"pa1": Decimal("36.00"), "pb": Decimal("20.00"), "pa": Decimal("20.00")}


def test_a_rate_change_inside_a_day_splits_that_day_at_the_change(world, ledger):
    """20.00 from 11:00 on 5 November: pa1's first two card-hours at 12.00, the last at 20.00 — the
    day is read from the ledger, the others from the daily sums."""
    Rate.objects.create(
        flavor=world.F, tier="standard", price=Decimal("20"), valid_from=local(2026, 11, 5, 11))
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "project")
    rows = {r.labels[0]: r for r in report.rows}
    assert (rows["pa1"].card_hours, rows["pa1"].cost) == (Decimal(3), Decimal("44.00"))
    assert (rows["pb"].cost, rows["pa"].cost) == (Decimal("20.00"), Decimal("20.00"))
    assert report.total.card_hours == Decimal(5)


def test_the_daily_sums_equal_the_ledger_after_corrections(world, ledger):
    """A late fact (pb's job went on loan at 10:30, reported afterwards) makes the meter reverse
    and re-charge; the daily sums follow in the same transaction: half the hour at 9.60."""
    from django.db.models import Sum

    from billing.models import UsageDay, UsageRecord

    History(world).flip(ledger["pb"], local(2026, 11, 6, 10, 30), True)
    report = usage_meter(now=local(2026, 12, 3, 1))
    assert report.reversed == 1
    for tier in ("standard", "on_loan"):
        assert UsageDay.objects.filter(tier=tier).aggregate(s=Sum("card_seconds"))["s"] == (
            UsageRecord.objects.filter(tier=tier).aggregate(s=Sum("card_seconds"))["s"])
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "project")
    pb = {r.labels[0]: r for r in report.rows}["pb"]
    assert (pb.card_hours, pb.cost) == (Decimal(1), Decimal("10.80"))


def test_normalised_pricing_prices_normalised_card_hours(world, ledger, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "PRICE_NORMALISED_CARD_HOURS": True}
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "project")
    assert {r.labels[0]: r.cost for r in report.rows} == {
        "pa1": Decimal("54.00"), "pb": Decimal("18.00"), "pa": Decimal("18.00")}


def test_utilisation_and_queue_waits(world, ledger):
    report = _report(world.users["platform"], (2026, 11, 1), (2026, 12, 1), "project")
    rows = {r.labels[0]: r for r in report.rows}
    pa1 = rows["pa1"]
    assert (pa1.sampled_card_hours, pa1.effective_card_hours, pa1.utilisation_pct) == (
        Decimal(3), Decimal("1.5"), Decimal("50.0"))
    assert rows["pb"].utilisation_pct is None  # no samples: no figure, not 0 %
    assert (pa1.jobs_started, pa1.wait_mean_minutes) == (1, pytest.approx(10.0))
    assert rows["pa"].wait_mean_minutes == pytest.approx(30.0)
    total = report.total
    assert total.jobs_started == 3
    assert total.wait_mean_minutes == pytest.approx(20.0)
    assert total.wait_p95_minutes == pytest.approx(29.0)  # percentile_cont over 10, 20, 30
    assert total.utilisation_pct == Decimal("50.0")


# --- tenancy -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("persona", "projects", "money"),
    [
        ("platform", {"pa", "pa1", "pb"}, True),
        ("auditor", {"pa", "pa1", "pb"}, True),
        ("a_admin", {"pa", "pa1"}, True),
        ("a_finance", {"pa", "pa1"}, True),
        ("b_finance", {"pb"}, True),
        ("pa1_admin", {"pa1"}, False),
        ("pa1_member", {"pa1"}, False),
        ("pb_member", {"pb"}, False),
        ("outsider", set(), False),
    ],
)
def test_each_persona_sees_its_own_rows_only(world, ledger, client, api, persona, projects, money):
    user = world.users[persona]
    report = _report(user, (2026, 11, 1), (2026, 12, 2), "project", "user")
    assert {r.labels[0] for r in report.rows} == projects
    assert report.money is money
    assert all(r.cost is None for r in report.rows) or money

    page = _get(client, user, **NOV, group_by="project")
    assert page.status_code == 200
    body = page.content.decode()
    for code in {"pa", "pa1", "pb"} - projects:
        assert f"<td>{code}</td>" not in body
    assert ("Cost (CNY)" in body) is money

    answer = api(user).get("/api/v1/usage/", {**NOV, "group_by": "project,user"})
    assert answer.status_code == 200
    assert {r["labels"]["project"] for r in answer.json()["rows"]} == projects & {"pa", "pa1", "pb"}
    assert all(r["cost"] is None for r in answer.json()["rows"]) or money

    csv_file = _get(client, user, **NOV, group_by="user", format="csv")
    users = {row["\ufeffuser"] for row in csv.DictReader(io.StringIO(csv_file.content.decode("utf-8")))}
    owners = {"pa": "a_admin", "pa1": "pa1_member", "pb": "pb_member"}
    assert users == {owners[p] for p in projects}


# --- files -----------------------------------------------------------------------------------------


def test_csv_and_xlsx_read_back(world, ledger, client):
    finance = world.users["platform"]
    response = _get(client, finance, **NOV, group_by="department", then_by="project", format="csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'filename="usage-2026-11-01-2026-11-30-department-project.csv"' in response["Content-Disposition"]
    assert response.content.startswith("\ufeff".encode())
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    a1 = next(r for r in rows if r["project"] == "pa1")
    assert [a1[k] for k in ("department", "card_hours", "normalised_card_hours", "cost", "currency")] == [
        "Dept A1 (A1)", "3.000000", "4.500000", "36.00", "CNY"]
    assert [a1[k] for k in ("effective_card_hours", "utilisation_pct", "jobs_started")] == [
        "1.500000", "50.0", "1"]

    response = _get(client, finance, **NOV, group_by="department", then_by="project", format="xlsx")
    sheet = load_workbook(io.BytesIO(response.content)).active
    values = list(sheet.iter_rows(values_only=True))
    assert values[0][:4] == ("department", "project", "card_hours", "normalised_card_hours")
    assert sheet.freeze_panes == "A2"
    total = values[-1]
    assert total[0] == "total" and total[2] == 5 and total[4] == 60
    assert sheet.cell(row=2, column=5).number_format == "0.00"
    assert sheet.cell(row=2, column=3).number_format == "0.000000"
    assert sum(Decimal(str(r[4])) for r in values[1:-1]) == Decimal(60)

    plain = _get(client, finance, **NOV, format="csv", bom="0")
    assert plain.content.startswith(b"project,")


# --- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        {"start": "99999-01-01"},
        {"start": "1999-12-31"},
        {"end": "2101-01-02"},
        {"start": "2026-11-02", "end": "2026-11-01"},
        {"start": "2026-11-01", "end": "2026-11-01"},
        {"start": "yesterday"},
        {"group_by": "planet"},
        {"group_by": "project", "then_by": "project"},
    ],
)
def test_bad_input_is_a_form_error_or_400(world, client, api, params):
    user = world.users["platform"]
    page = _get(client, user, **params)
    assert page.status_code == 400 and b'role="alert"' in page.content
    assert _get(client, user, **params, format="csv").status_code == 400
    api_params = {k: v for k, v in params.items() if k != "then_by"}
    if "then_by" in params:
        api_params["group_by"] = f"{params['group_by']},{params['then_by']}"
    answer = api(user).get("/api/v1/usage/", api_params)
    assert answer.status_code == 400 and answer.json()


def test_api_refuses_three_levels_and_unknown_formats_on_the_page(world, client, api):
    user = world.users["platform"]
    answer = api(user).get("/api/v1/usage/", {"group_by": "project,user,flavor"})
    assert answer.status_code == 400 and "group_by" in answer.json()
    assert _get(client, user, **NOV, format="pdf").status_code == 400


def test_api_rows_and_total(world, ledger, api):
    answer = api(world.users["a_finance"]).get("/api/v1/usage/", {**NOV, "group_by": "department"})
    data = answer.json()
    assert (data["start"], data["end"], data["group_by"], data["currency"]) == (
        "2026-11-01", "2026-12-01", ["department"], "CNY")
    rows = {r["labels"]["department"]: r for r in data["rows"]}
    assert rows["Dept A1 (A1)"]["card_hours"] == "3.000000"
    assert rows["Dept A1 (A1)"]["cost"] == "36.00"
    assert rows["Dept A1 (A1)"]["group"] == {"department": world.A1.pk}
    assert data["total"]["cost"] == "48.00" and data["total"]["card_hours"] == "4.000000"


def test_default_range_is_this_month(world, client):
    page = _get(client, world.users["pa1_member"])
    assert page.status_code == 200 and b"usage-table" in page.content


# --- the job page's cost so far ------------------------------------------------------------------


def test_job_cost_is_its_ledger_priced(world, ledger):
    cost = job_cost(ledger["pa1"], local(2026, 12, 3))
    assert (cost.metered, cost.tail, cost.amount, cost.currency) == (
        Decimal("36.00"), Decimal("0.00"), Decimal("36.00"), "CNY")
    assert job_cost(ledger["pa"], local(2026, 12, 3)).amount == Decimal("24.00")


def test_a_running_job_adds_its_unmetered_tail_at_the_rate(world, client):
    rates(world.F, "12", "9.6")
    history = History(world)
    job = history.run(world.pa1, world.F, local(2026, 12, 1, 22), None, gpus=2)
    Job.objects.filter(pk=job.pk).update(started_at=local(2026, 12, 1, 22))
    usage_meter(now=local(2026, 12, 2, 0, 30))
    job.refresh_from_db()
    through = meter_state().metered_through
    assert through is not None and through <= local(2026, 12, 2, 1)
    cost = job_cost(job, local(2026, 12, 2, 1))
    # 3 hours × 2 GPUs × 12.00, however the hours fall between the ledger and the tail.
    assert cost.amount == Decimal("72.00") and cost.tail > 0
    client.force_login(world.users["pa1_member"])
    page = client.get(f"/jobs/{job.pk}/", HTTP_ACCEPT_LANGUAGE="en")
    assert b"Cost so far" in page.content and b"job-cost" in page.content


# --- issue 32 item 3: the page's last day is included -------------------------------------------


def _this_and_last_month() -> tuple[tuple[date, date], tuple[date, date]]:
    from django.utils import timezone

    from billing.periods import month_of, next_month, previous_month
    from quotas.selectors import site_zone

    month = month_of(timezone.now(), site_zone())
    last = previous_month(month)
    return (month, next_month(month) - timedelta(days=1)), (last, month - timedelta(days=1))


def test_item3_a_month_entered_as_its_first_and_last_day_counts_the_last_day(world, ledger, client, api):
    page = _get(client, world.users["platform"], start="2026-11-01", last="2026-11-30", group_by="department")
    assert page.status_code == 200
    report = page.context["report"]
    # pa's job ran 23:00 on 30 November to 01:00 on 1 December: its first hour is November's.
    assert _by_label(report)[("Dept A (A)",)].card_hours == Decimal(1)
    assert (report.total.card_hours, report.total.cost) == (Decimal(5), Decimal("60.00"))
    body = page.content.decode()
    assert 'name="last" value="2026-11-30"' in body and "2026-11-01 to 2026-11-30" in body
    # The download is named by the days the form shows.
    csv_file = _get(client, world.users["platform"], start="2026-11-01", last="2026-11-30", format="csv")
    assert 'filename="usage-2026-11-01-2026-11-30-project.csv"' in csv_file["Content-Disposition"]
    # The API keeps its half-open range: end is the day after the last.
    answer = api(world.users["platform"]).get("/api/v1/usage/", {**NOV, "group_by": "department"}).json()
    assert (answer["end"], answer["total"]["card_hours"]) == ("2026-12-01", "5.000000")


def test_item3_a_link_with_the_old_exclusive_end_means_what_it_meant(world, ledger, client):
    page = _get(client, world.users["platform"], **NOV, group_by="department")
    assert page.context["report"].total.card_hours == Decimal(5)  # through 30 November, as before
    assert 'name="last" value="2026-11-30"' in page.content.decode()  # and the form says so


def test_item3_the_first_load_shows_the_range_and_grouping_used(world, client):
    (first, last), _ = _this_and_last_month()
    page = _get(client, world.users["pa1_member"])
    body = page.content.decode()
    assert page.context["report"].query.group_by == ("project",)
    assert '<option value="project" selected>' in body
    assert f'name="start" value="{first}"' in body and f'name="last" value="{last}"' in body


def test_item3_this_month_and_last_month_presets_keep_the_grouping(world, client):
    (first, last), (previous_first, previous_last) = _this_and_last_month()
    page = _get(client, world.users["platform"], group_by="user", then_by="flavor")
    presets = {p["label"]: p for p in page.context["presets"]}
    assert presets["This month"]["current"] and not presets["Last month"]["current"]
    assert presets["Last month"]["query"] == (
        f"start={previous_first}&last={previous_last}&group_by=user&then_by=flavor")
    followed = _get(client, world.users["platform"], start=previous_first, last=previous_last,
                    group_by="user", then_by="flavor")
    assert followed.status_code == 200
    assert {p["label"]: p for p in followed.context["presets"]}["Last month"]["current"]
    link = f'href="?start={first}&amp;last={last}&amp;group_by=user&amp;then_by=flavor"'
    assert link in page.content.decode()


def test_item3_a_single_day_is_a_range_and_a_last_day_before_the_first_is_refused(world, ledger, client):
    day = _get(client, world.users["platform"], start="2026-11-30", last="2026-11-30")
    assert day.status_code == 200 and day.context["report"].total.card_hours == Decimal(1)
    refused = _get(client, world.users["platform"], start="2026-11-30", last="2026-11-29")
    assert refused.status_code == 400
    assert "The last day must not be before the first." in refused.content.decode()
    assert _get(client, world.users["platform"], last="2101-01-01").status_code == 400
