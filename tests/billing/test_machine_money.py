"""CPU and memory in the ledger and on the bill (issue 33 item 5, DESIGN §15 "Metering"): core-seconds
and MiB-seconds of every allocation beside its card-seconds, the part beyond the share its cards
include priced by core-hour and GiB-hour rates, on statements and the chargeback file, corrected
after a close like card-hours."""

import io
import json
from datetime import date
from decimal import ROUND_HALF_UP, Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import DatabaseError, connection, transaction
from openpyxl import load_workbook

from billing import exports, pricing
from billing.admin import RateForm
from billing.budgets import budget_statuses
from billing.meter import usage_meter
from billing.models import Budget, LineKind, Rate, StatementLine, UsageDay, UsageRecord
from billing.services import rate_create, rate_validate, statement_close_month
from billing.usage import UsageQuery, job_cost_so_far, usage_report
from jobs.models import Job

from .conftest import local, rates

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]
NOV, DEC = date(2026, 11, 1), date(2026, 12, 1)
SHARE = {"cpu_millicores": 8000, "memory_mib": 65536}  # one card: 8 cores, 64 GiB
CORE_PRICE, GIB_PRICE = Decimal("0.35"), Decimal("0.0125")  # per core-hour, per GiB-hour beyond the share

# The CPU-heavy job: 2 workers × 4 cards, each worker 48 cores (32 included) and 300,000 MiB
# (262,144 included), from 2 Nov 00:00:00 to 3 Nov 05:17:23 local: 105,443 s.
HEAVY_SECONDS = 29 * 3600 + 17 * 60 + 23


def machine(job, *, cpu=None, mem=None, share=SHARE):
    Job.objects.filter(pk=job.pk).update(cpu_millicores=cpu, memory_mib=mem, unit_share=share)
    return job


def priced_rates(flavor):
    rates(flavor, "12.00", "9.60")  # card-hours, in quota and on loan
    for resource, price in (("core", CORE_PRICE), ("gib", GIB_PRICE)):  # in quota only
        Rate.objects.create(flavor=flavor, tier="standard", resource=resource, price=price,
                            valid_from=local(2026, 1, 1))


@pytest.fixture
def month(world, history):
    """November with a CPU-heavy job (pa1), a job within its share (pb) and CPU beyond the share
    on loan, where no core-hour rate exists (pa)."""
    priced_rates(world.F)
    heavy = machine(history.run(world.pa1, world.F, local(2026, 11, 2), local(2026, 11, 3, 5, 17, 23),
                                workers=2, gpus=4), cpu=48000, mem=300000)
    modest = machine(history.run(world.pb, world.F, local(2026, 11, 5, 10, 0, 7), local(2026, 11, 5, 12, 30),
                                 gpus=2, user=world.users["pb_member"]), mem=100000)  # CPU: its share
    lent = history.job(world.pa, world.F, gpus=1)
    history.admit(lent, local(2026, 11, 8, 0), on_loan=True)
    history.start(lent, local(2026, 11, 8, 0))
    history.end(lent, local(2026, 11, 8, 2))
    machine(lent, cpu=16000)
    usage_meter(now=local(2026, 12, 2))
    return heavy, modest, lent


def sums(job) -> dict[str, Decimal]:
    rows = UsageRecord.objects.filter(job=job)
    fields = ("card_seconds", "core_seconds", "mib_seconds", "extra_core_seconds", "extra_mib_seconds")
    return {f: sum(rows.values_list(f, flat=True), Decimal(0)) for f in fields}


def test_the_ledger_holds_core_and_mib_seconds_of_the_request_times_the_allocation_to_the_second(month):
    heavy, modest, _lent = month
    assert sums(heavy) == {
        "card_seconds": 8 * HEAVY_SECONDS,
        "core_seconds": 2 * 48 * HEAVY_SECONDS,  # 10,122,528 core-seconds = 2,811.813333 core-hours
        "mib_seconds": 2 * 300000 * HEAVY_SECONDS,
        "extra_core_seconds": 2 * (48 - 32) * HEAVY_SECONDS,
        "extra_mib_seconds": 2 * (300000 - 262144) * HEAVY_SECONDS,
    }
    seconds = 2 * 3600 + 29 * 60 + 53  # 10:00:07 – 12:30:00
    assert sums(modest) == {
        "card_seconds": 2 * seconds,
        "core_seconds": 16 * seconds,  # no CPU asked: a worker holds its 2 cards' share
        "mib_seconds": 100000 * seconds,
        "extra_core_seconds": 0,
        "extra_mib_seconds": 0,  # 100,000 MiB is within 2 × 65,536
    }
    # Hour rows: the first hour of the heavy job is exactly 96 core-hours.
    first = UsageRecord.objects.get(job=heavy, hour_start=local(2026, 11, 2, 0))
    assert (first.core_seconds, first.extra_core_seconds) == (96 * 3600, 32 * 3600)
    # The daily sums the usage explorer reads equal the ledger.
    day = UsageDay.objects.filter(project_id=heavy.project_id)
    assert sum(day.values_list("core_seconds", flat=True)) == 2 * 48 * HEAVY_SECONDS
    assert sum(day.values_list("extra_mib_seconds", flat=True)) == 2 * 37856 * HEAVY_SECONDS


def test_only_the_request_beyond_the_share_is_priced_on_the_statement(world, month):
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    lines = StatementLine.objects.filter(statement__month=NOV, kind=LineKind.USAGE)
    core = lines.get(resource="core")
    gib = lines.get(resource="gib")
    assert (core.project_id, core.flavor_id, core.tier, core.card_seconds) == (world.pa1.pk, world.F.pk,
                                                                              "standard", 0)
    assert core.core_seconds == 2 * 16 * HEAVY_SECONDS == 3374176
    assert core.core_hours == Decimal("937.271111")
    assert core.amount == Decimal("328.04")  # 3,374,176 × 0.35 / 3600 = 328.0448…, half-up
    assert gib.mib_seconds == 2 * 37856 * HEAVY_SECONDS == 7983300416
    assert gib.gib_hours == Decimal("2165.608837")  # ÷ 1024 ÷ 3600
    assert gib.amount == Decimal("27.07")  # 7,983,300,416 × 0.0125 / 3,686,400 = 27.0701…
    assert (core.unit_price, gib.unit_price) == (CORE_PRICE, GIB_PRICE)
    # Nothing else is billed for CPU or memory: the job within its share (pb) pays none, and the
    # on-loan CPU beyond the share (pa) has no core-hour rate, so the card price covers it.
    assert lines.exclude(resource="card").count() == 2
    card = lines.get(project=world.pa1, resource="card")
    assert card.amount == pricing.money(Decimal(8 * HEAVY_SECONDS) * 12 / 3600) == Decimal("2811.81")
    statement = core.statement
    assert statement.total == card.amount + core.amount + gib.amount


def test_the_chargeback_xlsx_carries_core_and_gib_hours_and_their_amounts(month):
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    data = exports.render(exports.chargeback_rows(NOV), "xlsx")
    sheet = load_workbook(io.BytesIO(data), read_only=True).active
    found = [list(r) for r in sheet.iter_rows(values_only=True)]
    header = found[0]
    assert header[-3:] == ["resource", "core_hours", "gib_hours"]
    col = {name: header.index(name) for name in ("resource", "core_hours", "gib_hours", "amount", "rate")}
    by_resource = {}
    for row in found[1:-1]:
        by_resource.setdefault(row[col["resource"]], []).append(row)
    (core,), (gib,) = by_resource["core"], by_resource["gib"]
    assert (core[col["core_hours"]], core[col["amount"]], core[col["rate"]]) == (937.271111, 328.04, 0.35)
    assert (gib[col["gib_hours"]], gib[col["amount"]]) == (2165.608837, 27.07)
    assert all(r[col["core_hours"]] is None and r[col["gib_hours"]] is None for r in by_resource["card"])
    total = found[-1]
    assert total[0] == "total"
    assert Decimal(str(total[col["core_hours"]])) == Decimal("937.271111")
    assert Decimal(str(total[col["gib_hours"]])) == Decimal("2165.608837")
    amounts = sum(Decimal(str(r[col["amount"]])) for r in found[1:-1])
    assert Decimal(str(total[col["amount"]])) == amounts


def test_a_correction_after_the_close_adjusts_core_and_gib_hours_like_card_hours(world, history):
    """A job still running when November closes ended on 29 Nov 00:00 by the backend, reported
    after the close: December's statement carries adjustment lines of November crediting the
    cards, the cores and the GiB beyond the share of 29–30 Nov."""
    priced_rates(world.F)
    job = machine(history.run(world.pa1, world.F, local(2026, 11, 20), None, gpus=2), cpu=24000, mem=200000)
    usage_meter(now=local(2026, 12, 1, 1))
    statement_close_month(month=NOV, now=local(2026, 12, 1, 1))
    billed = StatementLine.objects.get(statement__month=NOV, resource="core")
    assert billed.core_seconds == (24 - 16) * 11 * 86400  # 20–30 Nov: 11 days
    history.end(job, local(2026, 11, 29))  # the backend's end, recorded late
    usage_meter(now=local(2027, 1, 2))
    assert sums(job)["extra_core_seconds"] == (24 - 16) * 9 * 86400
    statement_close_month(month=DEC, now=local(2027, 1, 2))
    adjustments = StatementLine.objects.filter(statement__month=DEC, kind=LineKind.ADJUSTMENT,
                                               original_month=NOV)
    by = {line.resource: line for line in adjustments}
    assert set(by) == {"card", "core", "gib"}
    assert by["card"].card_seconds == -2 * 2 * 86400
    assert by["core"].core_seconds == -(24 - 16) * 2 * 86400 == -1382400
    assert by["core"].amount == Decimal("-134.40")  # 384 core-hours × 0.35
    assert by["gib"].mib_seconds == -(200000 - 131072) * 2 * 86400
    assert by["gib"].gib_hours == Decimal("-3231.000000")  # 68,928 MiB × 48 h ÷ 1024
    assert by["gib"].amount == Decimal("-40.39")  # 3,231 × 0.0125 = 40.3875 → half-up in magnitude
    # Reversals negate the charge's figures.
    reversal = UsageRecord.objects.filter(job=job, reverses__isnull=False).first()
    assert reversal.core_seconds == -reversal.reverses.core_seconds < 0
    # The ledger holds the part beyond the share within the whole: a charge claiming more beyond
    # the share than it held is refused (the same row with consistent figures is accepted).
    copy = (
        "INSERT INTO billing_usagerecord (job_id, segment_start, segment_end, hour_start, month,"
        " flavor_id, project_id, department_id, user_id, priority_class_id, tier, gpu_count,"
        " card_seconds, core_seconds, extra_core_seconds, revision, reverses_id, metered_at)"
        " SELECT job_id, segment_start, segment_end, hour_start, month, flavor_id, project_id,"
        " department_id, user_id, priority_class_id, tier, gpu_count, card_seconds, %s, %s,"
        " revision + %s, NULL, metered_at FROM billing_usagerecord WHERE id = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(copy, [20, 10, 50, reversal.reverses_id])
    with pytest.raises(DatabaseError, match="usage_machine"), transaction.atomic(), connection.cursor() as c:
        c.execute(copy, [10, 20, 51, reversal.reverses_id])


def test_an_external_jobs_recorded_cpu_and_memory_are_metered_beyond_the_flavors_share(world, history):
    """An external job stores what it held (one worker) and no share: the flavor's share now
    applies (its profile: 8 cores, 64 GiB a card)."""
    world.F.cpu_millicores_per_unit, world.F.memory_mib_per_unit = 8000, 65536
    world.F.save(update_fields=["cpu_millicores_per_unit", "memory_mib_per_unit"])
    job = history.run(world.pa1, world.F, local(2026, 11, 3, 9, 30), local(2026, 11, 3, 11, 45, 10), gpus=1)
    Job.objects.filter(pk=job.pk).update(kind="external", cpu_millicores=12500, memory_mib=40000,
                                         unit_share={})
    usage_meter(now=local(2026, 11, 4))
    seconds = 2 * 3600 + 15 * 60 + 10
    assert sums(job) == {
        "card_seconds": seconds,
        "core_seconds": Decimal("12.5") * seconds,
        "mib_seconds": 40000 * seconds,
        "extra_core_seconds": Decimal("4.5") * seconds,
        "extra_mib_seconds": 0,
    }


def test_a_rate_may_price_core_or_gib_hours_and_bad_ones_are_clear_errors(world):
    at = local(2026, 12, 1)
    rate_create(actor=None, flavor=world.F, tier="standard", price=Decimal("12"), valid_from=at)
    core = rate_create(actor=None, flavor=world.F, tier="standard", price=Decimal("0.3"), valid_from=at,
                       resource="core")
    assert core.resource == "core" and str(core).startswith("F standard/core 0.3 CNY from ")
    cases = [
        ({"resource": "disk"}, "resource", "Unknown resource 'disk': card, core or gib."),
        ({"resource": "gib", "tier": "reserved"}, "resource",
         "Core-hours and GiB-hours are priced in quota and on loan, not as a reserved fee."),
        ({"resource": "core"}, "valid_from", "A rate of this flavor, tier and resource already starts then."),
    ]
    for change, field, text in cases:
        args = {"flavor": world.F, "tier": "standard", "price": Decimal("1"), "valid_from": at,
                "currency": "CNY"}
        with pytest.raises(ValidationError) as error:
            rate_validate(**{**args, **change})
        assert error.value.message_dict[field] == [text]
    form = RateForm(data={"flavor": world.F.pk, "tier": "reserved", "resource": "core", "price": "1",
                          "valid_from": "2026-12-01 00:00", "note": ""})
    assert not form.is_valid() and "resource" in form.errors
    assert Rate.objects.count() == 2  # nothing else was written


def test_pricing_a_gib_line_rounds_once_from_the_exact_mib_seconds():
    start = local(2026, 11, 1)
    period = pricing.RatePeriod(Decimal("0.0199"), start)
    usage = pricing.Usage("k", "s", start, local(2026, 11, 1, 1), Decimal(0), None, pricing.GIB,
                          Decimal(1024 * 3600) * Decimal("2.5"))
    (line,) = pricing.price([usage], {"s": [period]})
    assert (line.gib_hours, line.core_hours, line.card_seconds) == (Decimal("2.500000"), None, 0)
    expected = (Decimal("2.5") * Decimal("0.0199")).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    assert line.amount == expected == Decimal("0.05")  # 0.04975 half-up


def test_the_usage_explorer_its_csv_and_api_show_core_and_gib_hours_and_cost_them_as_the_statement(
    world, month, api
):
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    query = UsageQuery(local(2026, 11, 1), local(2026, 12, 1), ("project",))
    report = usage_report(world.users["platform"], query, "CNY")
    row = next(r for r in report.rows if r.key == (world.pa1.pk,))
    assert row.core_hours == Decimal("2811.813333")  # 2 × 48 cores × 105,443 s
    assert row.gib_hours == pricing.display_hours(Decimal(2 * 300000 * HEAVY_SECONDS) / 1024)
    statement = StatementLine.objects.filter(statement__month=NOV, project=world.pa1, kind=LineKind.USAGE)
    assert row.cost == sum(statement.values_list("amount", flat=True)) == Decimal("3166.92")
    text = exports.usage_file(report, "csv", bom=False).decode()
    header, *lines = text.splitlines()
    assert header.endswith(",core_hours,gib_hours")
    assert any(line.split(",")[-2] == "2811.813333" for line in lines)
    body = api(world.users["platform"]).get(
        "/api/v1/usage/", {"start": "2026-11-01", "end": "2026-12-01", "group_by": "project"}
    ).json()
    found = next(r for r in body["rows"] if r["group"] == {"project": world.pa1.pk})
    assert (found["core_hours"], found["cost"]) == ("2811.813333", "3166.92")


def test_a_money_budget_counts_the_cpu_and_memory_lines(world, month):
    budget = Budget.objects.create(project=world.pa1, amount=Decimal("3200.00"))
    status = budget_statuses([budget], now=local(2026, 11, 30, 23))[budget.pk]
    assert status.used_money == Decimal("2811.81") + Decimal("328.04") + Decimal("27.07")
    assert status.money_percent == 98  # the cards alone would be 87 %


def test_the_reports_page_charts_core_and_gib_hours_by_department(world, month, client):
    client.force_login(world.users["platform"])
    response = client.get("/reports/", {"month": "2026-11"}, HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    machine = response.context["machine"]
    figure = json.loads(machine["figure"])
    names = [trace["name"] for trace in figure["data"]]
    assert names == ["Core-hours", "Core-hours beyond the share", "GiB-hours", "GiB-hours beyond the share"]
    by_department = dict(zip(figure["data"][0]["x"], figure["data"][0]["y"], strict=True))
    assert by_department[world.A1.name] == 2811.813  # pa1's heavy job
    assert b'id="machine-hours"' in response.content


def test_a_jobs_cost_so_far_includes_its_cpu_and_memory_beyond_the_share(month):
    heavy, modest, _lent = month
    cost = job_cost_so_far(Job.objects.get(pk=heavy.pk), local(2026, 12, 2))
    assert cost.metered == Decimal("2811.81") + Decimal("328.04") + Decimal("27.07")
    within = job_cost_so_far(Job.objects.get(pk=modest.pk), local(2026, 12, 2))
    assert within.metered == pricing.money(Decimal(2 * (2 * 3600 + 29 * 60 + 53)) * 12 / 3600)  # cards only
