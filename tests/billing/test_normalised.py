"""Normalised card-hours (标准卡时, DESIGN §14, issue 23 item 3): card-hours × the flavor's relative
throughput as it was when metered — on statements, in the chargeback file, and priced when the
centre says so."""

from __future__ import annotations

import csv
import io
from datetime import date
from decimal import Decimal

import pytest
from openpyxl import load_workbook

from billing import exports, pricing
from billing.meter import usage_meter
from billing.models import Statement, StatementLine, UsageRecord
from billing.services import statement_close_month
from quotas.models import Flavor

from .conftest import local, rates

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)
ASCEND_PRICE = Decimal("9.99")


def _flavor(name, vendor, throughput) -> Flavor:
    return Flavor.objects.create(
        name=name,
        vendor=vendor,
        model=name,
        memory_mib=65536,
        k8s_resource_name="huawei.com/Ascend910" if vendor == "huawei" else "nvidia.com/gpu",
        relative_throughput=Decimal(throughput),
    )


@pytest.fixture
def fleet(world, history):
    """A mixed fleet: 2 A100-80G for 2 h (4 card-hours at 1.0) and 1 Ascend-910B for 1 h 10 min
    (4,200 card-seconds at 0.8 = 3,360 normalised)."""
    a100 = _flavor("A100-80G", "nvidia", "1.000")
    ascend = _flavor("Ascend-910B", "huawei", "0.800")
    rates(a100, "12", "9.6")
    rates(ascend, str(ASCEND_PRICE), "8")
    history.run(world.pa1, a100, local(2026, 11, 3, 10), local(2026, 11, 3, 12), gpus=2)
    history.run(world.pa1, ascend, local(2026, 11, 4, 10), local(2026, 11, 4, 11, 10), gpus=1)
    return a100, ascend


def _usage_lines(flavor) -> list[StatementLine]:
    return list(StatementLine.objects.filter(statement__month=NOV, flavor=flavor, kind="usage"))


def test_a_mixed_fleet_statement_shows_plain_and_normalised_card_hours(fleet):
    a100, ascend = fleet
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    [a100_line] = _usage_lines(a100)
    [ascend_line] = _usage_lines(ascend)
    assert (a100_line.card_hours, a100_line.normalised_card_hours) == (Decimal(4), Decimal(4))
    assert ascend_line.card_seconds == Decimal(4200)
    assert ascend_line.normalised_card_seconds == Decimal(3360)
    assert ascend_line.normalised_card_hours == Decimal("0.933333")
    # Off (the default): the amount follows plain card-hours.
    assert ascend_line.amount == pricing.money(Decimal(4200) * ASCEND_PRICE / 3600) == Decimal("11.66")
    assert not Statement.objects.get(month=NOV).priced_normalised


def test_with_the_setting_on_the_amount_follows_normalised_hours_exactly(fleet, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "PRICE_NORMALISED_CARD_HOURS": True}
    a100, ascend = fleet
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    [ascend_line] = _usage_lines(ascend)
    [a100_line] = _usage_lines(a100)
    exact = Decimal(4200) * Decimal("0.8") * ASCEND_PRICE / 3600  # 9.324
    assert ascend_line.amount == pricing.money(exact) == Decimal("9.32")
    assert a100_line.amount == Decimal("48.00")  # the reference card: normalised = plain
    statement = Statement.objects.get(month=NOV)
    assert statement.priced_normalised
    assert statement.total == Decimal("57.32")


def test_a_profile_edit_never_rewrites_metered_history(fleet):
    _a100, ascend = fleet
    usage_meter(now=local(2026, 11, 30))
    rows = UsageRecord.objects.count()
    Flavor.objects.filter(pk=ascend.pk).update(relative_throughput=Decimal("0.5"))
    usage_meter(now=local(2026, 12, 2))  # the rest of the month; nothing about November changed
    assert UsageRecord.objects.count() == rows
    assert set(UsageRecord.objects.filter(flavor=ascend).values_list("relative_throughput", flat=True)) == {
        Decimal("0.800")
    }
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    [ascend_line] = _usage_lines(ascend)
    assert ascend_line.normalised_card_seconds == Decimal(3360)


def test_a_correction_reverses_at_the_charge_factor_and_recharges_at_the_current_one(fleet, world, history):
    _a100, ascend = fleet
    job = history.run(world.pa1, ascend, local(2026, 11, 6, 10), None)
    usage_meter(now=local(2026, 11, 6, 13))  # metered 10:00–12:00 at 0.8 while running
    Flavor.objects.filter(pk=ascend.pk).update(relative_throughput=Decimal("0.5"))
    history.end(job, local(2026, 11, 6, 11))  # a late end: the 11:00 hour was never used
    usage_meter(now=local(2026, 11, 6, 13))
    rows = UsageRecord.objects.filter(job=job)
    reversal = rows.get(reverses__isnull=False)
    assert reversal.relative_throughput == reversal.reverses.relative_throughput == Decimal("0.800")
    net = sum((r.card_seconds * r.relative_throughput for r in rows), Decimal(0))
    assert net == Decimal(3600) * Decimal("0.8")  # the 10:00 hour, charged before the edit, stays


def test_the_chargeback_file_has_both_columns_with_normalised_after_finances_columns(fleet):
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    assert exports.COLUMNS[16] == "normalised_card_hours"  # issue 33 added columns after it
    assert exports.COLUMNS[:16][-2:] == ("reason", "attachment")  # finance's order is kept
    out = io.StringIO()
    exports.write_csv(exports.chargeback_rows(NOV), out, bom=False)
    rows = list(csv.DictReader(io.StringIO(out.getvalue())))
    by_flavor = {r["flavor"]: r for r in rows}
    assert (by_flavor["Ascend-910B"]["card_hours"], by_flavor["Ascend-910B"]["normalised_card_hours"]) == (
        "1.166667",
        "0.933333",
    )
    assert by_flavor["A100-80G"]["normalised_card_hours"] == "4.000000"
    data = exports.render(exports.chargeback_rows(NOV), "xlsx")
    sheet = load_workbook(io.BytesIO(data), read_only=True).active
    found = [list(r) for r in sheet.iter_rows(values_only=True)]
    column = exports.COLUMNS.index("normalised_card_hours")
    assert found[0][column] == "normalised_card_hours"
    assert found[-1][0] == "total" and Decimal(str(found[-1][column])) == Decimal("4.933333")


def test_pricing_prices_normalised_seconds_only_when_asked_and_only_lines_that_have_them():
    from datetime import UTC, datetime, timedelta

    start = datetime(2026, 11, 1, tzinfo=UTC)
    periods = {"s": [pricing.RatePeriod(Decimal("10"), start)]}
    usage = pricing.Usage("k", "s", start, start + timedelta(hours=1), Decimal(3600), Decimal(2880))
    capacity = pricing.Usage("c", "s", start, start + timedelta(hours=1), Decimal(3600))
    plain = pricing.price([usage, capacity], periods)
    normalised = pricing.price([usage, capacity], periods, normalised=True)
    assert [line.amount for line in plain] == [Decimal("10.00"), Decimal("10.00")]
    assert [line.amount for line in normalised] == [Decimal("8.00"), Decimal("10.00")]
    assert normalised[0].normalised_card_hours == Decimal("0.8")
    assert normalised[1].normalised_card_hours is None


def test_the_statement_page_and_api_show_both_figures(fleet, world, api, settings):
    from django.test import Client

    settings.GPUPOOL = {**settings.GPUPOOL, "PRICE_NORMALISED_CARD_HOURS": True}
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    statement = Statement.objects.get(month=NOV)
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users["a_finance"])
    page = client.get(f"/billing/statements/{statement.pk}/").content.decode()
    assert "Normalised card-hours" in page and "0.933333" in page and "1.166667" in page
    assert "usage priced per normalised card-hour" in page
    body = api(world.users["a_finance"]).get(f"/api/v1/statements/{statement.pk}/").json()
    assert body["priced_normalised"] is True
    ascend = next(line for line in body["lines"] if line["card_hours"] == "1.166667")
    assert (ascend["normalised_card_hours"], ascend["amount"]) == ("0.933333", "9.32")


def test_the_submission_estimate_follows_the_pricing_basis(fleet, settings):
    from billing.selectors import standard_cost

    _a100, ascend = fleet
    at = local(2026, 11, 10)
    assert standard_cost(ascend, Decimal(10), at) == (Decimal("99.90"), "CNY")
    settings.GPUPOOL = {**settings.GPUPOOL, "PRICE_NORMALISED_CARD_HOURS": True}
    assert standard_cost(ascend, Decimal(10), at) == (pricing.money(Decimal(8) * ASCEND_PRICE), "CNY")


def test_each_run_carries_the_factor_of_the_flavor_it_was_admitted_on(fleet, world, history):
    """A job with alternatives (A100-80G|Ascend-910B) ran on the Ascend, was requeued and ran on the
    A100: each run's rows carry its own flavor's relative throughput."""
    a100, ascend = fleet
    job = history.job(world.pa1, a100)
    history.admit(job, local(2026, 11, 7, 9), flavor=ascend)
    history.start(job, local(2026, 11, 7, 9))
    history.end(job, local(2026, 11, 7, 10), state="preempted")
    history.admit(job, local(2026, 11, 7, 11), flavor=a100)
    history.start(job, local(2026, 11, 7, 11))
    history.end(job, local(2026, 11, 7, 12))
    usage_meter(now=local(2026, 11, 8))
    found = set(UsageRecord.objects.filter(job=job).values_list("flavor__name", "relative_throughput"))
    assert found == {("Ascend-910B", Decimal("0.800")), ("A100-80G", Decimal("1.000"))}
