"""The chargeback file: a pinned header, its rows, CSV and XLSX alike, and the commands."""

import codecs
import csv
import io
import json
from datetime import date

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from openpyxl import load_workbook

from billing import exports
from billing.models import Statement
from billing.services import statement_close_month
from portal.models import Membership, Role, User

from .conftest import local, rates

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)
HEADER = (
    "month,department_code,cost_centre,project,user,flavor,tier,card_hours,rate,amount,currency,"
    "line_type,original_month,covers,reason,attachment,normalised_card_hours,resource,core_hours,gib_hours"
)


@pytest.fixture
def closed(world, history, flavors):
    _, mig, _ = flavors
    world.A.cost_centre = "CC-1001"
    world.A.save()  # A1 has none of its own: it inherits A's
    world.B.cost_centre = "CC-2001"
    world.B.save()
    rates(world.F, "12", "9.6")
    rates(mig, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 12), gpus=2)
    history.run(
        world.pb, mig, local(2026, 11, 4, 10), local(2026, 11, 4, 17), gpus=1, user=world.users["pb_member"]
    )
    loaned = history.job(world.pb, world.F, user=world.users["pb_member"])
    history.admit(loaned, local(2026, 11, 5, 9), on_loan=True)
    history.start(loaned, local(2026, 11, 5, 9))
    history.end(loaned, local(2026, 11, 5, 9, 30))
    statement_close_month(month=NOV, now=local(2026, 12, 2))


EXPECTED = [
    [
        "2026-11",
        "A1",
        "CC-1001",
        "pa1",
        "pa1_member",
        "F",
        "standard",
        "4.000000",
        "12.0000",
        "48.00",
        "CNY",
        "usage",
        "",
        "*",
        "",
        "",
        "4.000000",  # flavors at relative throughput 1.0
        "card",  # issue 33: card-hour lines
        "",
        "",
    ],
    [
        "2026-11",
        "B",
        "CC-2001",
        "pb",
        "pb_member",
        "A100-1g",
        "standard",
        "1.000000",
        "12.0000",
        "12.00",
        "CNY",
        "usage",
        "",
        "*",
        "",
        "",
        "1.000000",  # flavors at relative throughput 1.0
        "card",  # issue 33: card-hour lines
        "",
        "",
    ],
    [
        "2026-11",
        "B",
        "CC-2001",
        "pb",
        "pb_member",
        "F",
        "on_loan",
        "0.500000",
        "9.6000",
        "4.80",
        "CNY",
        "usage",
        "",
        "*",
        "",
        "",
        "0.500000",  # flavors at relative throughput 1.0
        "card",  # issue 33: card-hour lines
        "",
        "",
    ],
]


def test_the_header_is_the_documented_column_set():
    assert ",".join(exports.COLUMNS) == HEADER
    docs = exports.__file__.rsplit("/billing/", 1)[0] + "/docs/billing.md"
    with open(docs, encoding="utf-8") as handle:
        assert HEADER in handle.read()  # the docs show the same header


def test_csv_has_one_row_per_statement_line(closed):
    out = io.StringIO()
    exports.write_csv(exports.chargeback_rows(NOV), out, bom=False)
    text = out.getvalue()
    assert text.splitlines()[0] == HEADER
    assert list(csv.reader(io.StringIO(text)))[1:] == EXPECTED


def test_xlsx_holds_the_same_rows_with_numbers_as_numbers(closed):
    data = exports.render(exports.chargeback_rows(NOV), "xlsx")
    sheet = load_workbook(io.BytesIO(data), read_only=True).active
    found = [list(r) for r in sheet.iter_rows(values_only=True)]
    assert tuple(found[0]) == exports.COLUMNS
    assert found[-1][0] == "total"  # issue 19: the total row
    assert [[("" if v is None else v) for v in row] for row in found[1:-1]] == [
        [float(v) if i in (7, 8, 9, 16) else v for i, v in enumerate(row)] for row in EXPECTED
    ]


def test_commands_close_and_export_a_month(world, history, tmp_path, capsys):
    rates(world.F, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 10, 3, 10), local(2026, 10, 3, 11), gpus=8)
    call_command("close_month", "2026-10")
    report = json.loads(capsys.readouterr().out)
    assert (report["month"], report["already_closed"], report["statements"], report["total"]) == (
        "2026-10",
        False,
        1,
        "96.00",
    )
    call_command("close_month", "2026-10")
    assert json.loads(capsys.readouterr().out)["already_closed"] is True
    out = tmp_path / "oct.csv"
    call_command("export_chargeback", "2026-10", "--format", "csv", "--out", str(out))
    assert (
        out.read_text()
        .splitlines()[1]
        .startswith("2026-10,A1,,pa1,pa1_member,F,standard,8.000000,12.0000,96.00,CNY")
    )
    xlsx = tmp_path / "oct.xlsx"
    call_command("export_chargeback", "2026-10", "--format", "xlsx", "--out", str(xlsx))
    assert len(list(load_workbook(xlsx, read_only=True).active.iter_rows(values_only=True))) == 3  # + total
    call_command("export_chargeback", "2026-10", "--out", "-")
    assert capsys.readouterr().out.splitlines()[0] == exports.BOM + HEADER
    call_command("export_chargeback", "2026-10", "--out", "-", "--no-bom")
    assert capsys.readouterr().out.splitlines()[0] == HEADER


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("export_chargeback", ["2026-13"], "not a month"),
        ("export_chargeback", ["nov"], "use YYYY-MM"),
        ("export_chargeback", ["2026-10", "--format", "pdf"], "Unknown format 'pdf'"),
        ("export_chargeback", ["2099-01"], "not closed"),
        ("close_month", ["2026/10"], "not a month"),
        ("close_month", ["2099-01"], "has not ended"),
        ("meter", ["--batch-size", "0"], "at least 1"),
        ("meter", ["--until", "yesterday"], "not a date-time"),
    ],
)
def test_bad_input_is_a_clear_error(world, english, command, args, message):
    with pytest.raises(CommandError, match=message):
        call_command(command, *args)


def test_meter_command_reports_json(world, history, capsys):
    history.run(world.pa1, world.F, local(2026, 10, 3, 10), local(2026, 10, 3, 11, 30))
    call_command("meter")
    report = json.loads(capsys.readouterr().out)
    assert report["rows"] == 2 and report["jobs"] == 1


# --- issue 18, item 16: Excel on a Chinese Windows desktop, and files of part of the centre ------


@pytest.fixture
def chinese_names(world, history):
    """November closed with a line of a user and a cost centre written in Chinese."""
    user = User.objects.create_user(username="张伟")
    Membership.objects.create(user=user, role=Role.MEMBER, project=world.pa1)
    world.A.cost_centre = "研发中心"
    world.A.save()
    rates(world.F, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 12), user=user)
    history.run(world.pb, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 11))
    statement_close_month(month=NOV, now=local(2026, 12, 2))


def test_item16_the_csv_starts_with_a_bom_and_its_chinese_names_decode(chinese_names):
    data = exports.render(exports.chargeback_rows(NOV), "csv")
    # Excel takes a CSV for UTF-8 only when it starts with the mark; else a Chinese Windows reads GBK.
    assert data.startswith(codecs.BOM_UTF8)
    assert data[3:].decode("gbk", errors="replace") != data[3:].decode("utf-8")  # what Excel showed
    rows = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    assert tuple(rows[0]) == exports.COLUMNS
    assert [(r[1], r[2], r[3], r[4]) for r in rows[1:]] == [
        ("A1", "研发中心", "pa1", "张伟"),
        ("B", "", "pb", "pa1_member"),  # the history's default user
    ]
    plain = exports.render(exports.chargeback_rows(NOV), "csv", bom=False)
    assert plain == data[len(codecs.BOM_UTF8) :]


def test_item16_downloads_and_the_command_have_the_bom_unless_asked_not_to(
    chinese_names, world, api, tmp_path
):
    client = api(world.users["platform"])
    with_bom = client.get(reverse("api:chargeback"), {"month": "2026-11"})
    assert with_bom.status_code == 200 and with_bom.content.startswith(codecs.BOM_UTF8)
    assert "张伟" in with_bom.content.decode("utf-8-sig")
    without = client.get(reverse("api:chargeback"), {"month": "2026-11", "bom": "0"})
    assert without.status_code == 200 and without.content == with_bom.content[3:]
    bad = client.get(reverse("api:chargeback"), {"month": "2026-11", "bom": "maybe"})
    assert bad.status_code == 400 and "bom" in bad.json()

    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(world.users["a_finance"])
    statement = Statement.objects.get(month=NOV, department=world.A1)
    url = reverse("billing-statement-download", args=[statement.pk])
    assert page.get(url, {"format": "csv"}).content.startswith(codecs.BOM_UTF8)
    assert not page.get(url, {"format": "csv", "bom": "0"}).content.startswith(codecs.BOM_UTF8)
    assert page.get(url, {"format": "csv", "bom": "x"}).status_code == 400

    out = tmp_path / "nov.csv"
    call_command("export_chargeback", "2026-11", "--out", str(out))
    assert out.read_bytes().startswith(codecs.BOM_UTF8)
    call_command("export_chargeback", "2026-11", "--out", str(out), "--no-bom")
    assert out.read_bytes().startswith(b"month,")


def _covers(response) -> set[str]:
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert rows, "the file has lines"
    return {r["covers"] for r in rows}


def test_item16_a_file_of_part_of_the_centre_says_which_departments_it_covers(chinese_names, world, api):
    def chargeback(persona, **params):
        return api(world.users[persona]).get(reverse("api:chargeback"), {"month": "2026-11", **params})

    assert _covers(chargeback("platform")) == {"*"}  # the whole centre
    # A's finance sees A and A1; A has no line this month, and the file says it covered A too.
    assert _covers(chargeback("a_finance")) == {"A|A1"}
    assert _covers(chargeback("platform", department=world.B.pk)) == {"B"}
    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(world.users["a_finance"])
    statement = Statement.objects.get(month=NOV, department=world.A1)
    assert _covers(page.get(reverse("billing-statement-download", args=[statement.pk]))) == {"A1"}
    xlsx = chargeback("a_finance", format="xlsx")
    rows = list(load_workbook(io.BytesIO(xlsx.content), read_only=True).active.iter_rows(values_only=True))
    covers = exports.COLUMNS.index("covers")
    assert rows[0][covers] == "covers" and {r[covers] for r in rows[1:-1]} == {"A|A1"}
