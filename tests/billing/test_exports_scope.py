"""The chargeback file, issue 19 item 6 (DESIGN §7 "Exports"): UTF-8 with a BOM by default and
plain UTF-8 on request; an XLSX Excel reads with formats, a frozen header and a total row; the
departments a file covers stated in the file and in its name; the whole-subtree file downloadable
on the statements page; corrections (adjustments, manual lines) in the file with their reason."""

import codecs
import csv
import io
from datetime import date
from decimal import Decimal

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from openpyxl import load_workbook

from billing import exports, manual
from billing.models import UsageRecord
from billing.services import statement_close_month
from portal.models import Membership, Role, User

from .conftest import local, rates
from .ledger_rows import ledger

pytestmark = pytest.mark.django_db
OCT, NOV = date(2026, 10, 1), date(2026, 11, 1)
COL = {name: i for i, name in enumerate(exports.COLUMNS)}


@pytest.fixture
def november(world, history):
    """October closed; late October usage (a debit) and a reversal (a credit) billed as
    adjustments in November; November usage in A1 and B; an approved manual credit on A1."""
    rates(world.F, "12", "9.6")
    world.A.cost_centre = "研发中心"
    world.A.save()
    ledger(history, world.pa1, world.F, local(2026, 10, 3, 10), 2 * 3600)
    charged = ledger(history, world.pb, world.F, local(2026, 10, 3, 10), 3600)
    statement_close_month(month=OCT, now=local(2026, 11, 2))
    ledger(history, world.pa1, world.F, local(2026, 10, 4, 10), 3600)  # late: +12.00 in November
    reversal = {f.name: getattr(charged, f.name) for f in charged._meta.concrete_fields if f.name != "id"}
    reversal.update(card_seconds=Decimal(-3600), reverses=charged)  # B's hour reversed: −12.00
    UsageRecord.objects.create(**reversal)
    ledger(history, world.pa1, world.F, local(2026, 11, 3, 10), 3 * 3600)
    ledger(history, world.pb, world.F, local(2026, 11, 3, 10), 3600, tier="on_loan")
    second = User.objects.create_user(username="a_finance2")
    Membership.objects.create(user=second, role=Role.FINANCE, department=world.A)
    credit = manual.adjustment_propose(
        actor=world.users["a_finance"],
        department=world.A1,
        kind="credit",
        amount="5.25",
        reason="补偿：11-03 故障",
        attachment="OA-2026-1123.pdf",
    )
    manual.adjustment_decide(actor=second, adjustment_id=credit.pk, approve=True, now=local(2026, 11, 20))
    statement_close_month(month=NOV, now=local(2026, 12, 2))


def _csv_rows(data: bytes) -> list[dict]:
    return list(csv.DictReader(io.StringIO(data.decode("utf-8-sig"))))


def test_corrections_and_manual_lines_are_in_the_file_with_their_reason(world, november):
    rows = _csv_rows(exports.render(exports.chargeback_rows(NOV), "csv"))
    lines = [
        (r["department_code"], r["line_type"], r["original_month"], r["amount"], r["reason"], r["attachment"])
        for r in rows
    ]
    assert lines == [
        ("A1", "usage", "", "36.00", "", ""),
        ("A1", "adjustment", "2026-10", "12.00", "", ""),
        ("A1", "manual", "", "-5.25", "补偿：11-03 故障", "OA-2026-1123.pdf"),
        ("B", "usage", "", "9.60", "", ""),
        ("B", "adjustment", "2026-10", "-12.00", "", ""),
    ]
    manual_row = rows[2]
    assert (manual_row["flavor"], manual_row["tier"], manual_row["rate"], manual_row["project"]) == (
        "",
        "",
        "",
        "",
    )
    assert Decimal(manual_row["card_hours"]) == 0


def test_the_csv_has_a_bom_by_default_and_none_with_plain_utf8(world, november, api, tmp_path):
    client = api(world.users["platform"])
    default = client.get(reverse("api:chargeback"), {"month": "2026-11"})
    assert default.content.startswith(codecs.BOM_UTF8)
    plain = client.get(reverse("api:chargeback"), {"month": "2026-11", "encoding": "utf-8"})
    assert plain.status_code == 200 and plain.content == default.content[3:]
    assert "研发中心" in plain.content.decode("utf-8")
    same = client.get(reverse("api:chargeback"), {"month": "2026-11", "encoding": "utf-8-sig", "bom": "1"})
    assert same.content == default.content
    for bad in ({"encoding": "gbk"}, {"encoding": "utf-8", "bom": "1"}):
        response = client.get(reverse("api:chargeback"), {"month": "2026-11", **bad})
        assert response.status_code == 400 and "encoding" in response.json()
    out = tmp_path / "nov.csv"
    call_command("export_chargeback", "2026-11", "--out", str(out), "--encoding", "utf-8")
    assert out.read_bytes() == plain.content
    call_command("export_chargeback", "2026-11", "--out", str(out))
    assert out.read_bytes() == default.content


def test_the_xlsx_is_excel_friendly(world, november):
    data = exports.render(exports.chargeback_rows(NOV), "xlsx", title=exports.scope_text(NOV, None))
    book = load_workbook(io.BytesIO(data))
    sheet = book.active
    assert sheet.freeze_panes == "A2"
    rows = list(sheet.iter_rows())
    assert [c.value for c in rows[0]] == list(exports.COLUMNS)
    lines, total = rows[1:-1], rows[-1]
    assert len(lines) == 5
    for row in lines:
        assert row[COL["amount"]].number_format == "0.00"
        assert row[COL["card_hours"]].number_format == "0.000000"
        assert isinstance(row[COL["amount"]].value, (int, float))
    assert total[0].value == "total" and total[COL["amount"]].number_format == "0.00"
    amounts = [Decimal(str(row[COL["amount"]].value)) for row in lines]
    assert Decimal(str(total[COL["amount"]].value)) == sum(amounts) == Decimal("40.35")
    hours = sum(Decimal(str(row[COL["card_hours"]].value)) for row in lines)
    assert Decimal(str(total[COL["card_hours"]].value)).quantize(Decimal("0.000001")) == hours
    assert book.properties.title == "Chargeback 2026-11: all departments"


def test_a_partial_file_says_which_departments_it_covers_in_file_and_name(world, november, api):
    client = api(world.users["a_finance"])
    csv_file = client.get(reverse("api:chargeback"), {"month": "2026-11"})
    assert 'filename="chargeback-2026-11-dept-A+1.csv"' in csv_file["Content-Disposition"]
    assert {r["covers"] for r in _csv_rows(csv_file.content)} == {"A|A1"}
    xlsx = client.get(reverse("api:chargeback"), {"month": "2026-11", "format": "xlsx"})
    assert 'filename="chargeback-2026-11-dept-A+1.xlsx"' in xlsx["Content-Disposition"]
    assert load_workbook(io.BytesIO(xlsx.content)).properties.title == "Chargeback 2026-11: departments A, A1"
    whole = api(world.users["platform"]).get(
        reverse("api:chargeback"), {"month": "2026-11", "format": "xlsx"}
    )
    assert 'filename="chargeback-2026-11-all.xlsx"' in whole["Content-Disposition"]
    assert "all departments" in load_workbook(io.BytesIO(whole.content)).properties.title
    one = api(world.users["platform"]).get(
        reverse("api:chargeback"), {"month": "2026-11", "department": world.B.pk}
    )
    assert 'filename="chargeback-2026-11-dept-B.csv"' in one["Content-Disposition"]


def test_the_subtree_file_is_downloadable_on_the_statements_page(world, november):
    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(world.users["a_finance"])
    html = page.get(reverse("billing-statements")).content.decode()
    url = reverse("billing-chargeback")
    assert f"{url}?month=2026-11&amp;format=csv" in html and "chargeback-2026-11-dept-A+1.xlsx" in html
    response = page.get(url, {"month": "2026-11", "format": "csv"})
    assert response.status_code == 200 and response.content.startswith(codecs.BOM_UTF8)
    assert 'filename="chargeback-2026-11-dept-A+1.csv"' in response["Content-Disposition"]
    rows = _csv_rows(response.content)
    assert {r["department_code"] for r in rows} == {"A1"} and {r["covers"] for r in rows} == {"A|A1"}
    plain = page.get(url, {"month": "2026-11", "format": "csv", "encoding": "utf-8"})
    assert plain.content == response.content[3:]
    assert page.get(url, {"month": "2026-11", "format": "xlsx"}).status_code == 200
    # Another department's file: 404, as the statement of another department.
    assert page.get(url, {"month": "2026-11", "department": world.B.pk}).status_code == 404
    assert page.get(url, {"month": "2026-11", "department": world.A1.pk}).status_code == 200
    for bad in (
        {"month": "2026-13"},
        {"month": "2026-12"},
        {"month": "2026-11", "format": "pdf"},
        {"month": "2026-11", "encoding": "latin-1"},
    ):
        assert page.get(url, bad).status_code == 400, bad


def test_the_page_download_is_404_for_those_without_statements(world, november):
    for persona in ("pa1_member", "outsider"):
        page = Client(HTTP_ACCEPT_LANGUAGE="en")
        page.force_login(world.users[persona])
        assert page.get(reverse("billing-chargeback"), {"month": "2026-11"}).status_code == 404
    platform = Client(HTTP_ACCEPT_LANGUAGE="en")
    platform.force_login(world.users["platform"])
    response = platform.get(reverse("billing-chargeback"), {"month": "2026-11"})
    assert 'filename="chargeback-2026-11-all.csv"' in response["Content-Disposition"]
    assert {r["covers"] for r in _csv_rows(response.content)} == {"*"}
