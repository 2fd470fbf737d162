"""Statements, the estimate and the chargeback download through the API, per persona: finance and
department admins of the department's subtree, platform admins and auditors; others 404."""

import csv
import io
from datetime import date
from decimal import Decimal

import pytest
from django.urls import reverse
from openpyxl import load_workbook

from billing.meter import usage_meter
from billing.services import statement_close_month
from portal.models import User

from .conftest import local, rates

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)
SEES = {
    "platform": {"A", "A1", "B"},
    "auditor": {"A", "A1", "B"},
    "a_admin": {"A", "A1"},
    "a_finance": {"A", "A1"},
    "b_admin": {"B"},
    "b_finance": {"B"},
    "pa1_admin": None,  # None: no statement at all — 404
    "pa1_member": None,
    "pb_member": None,
    "outsider": None,
}


@pytest.fixture
def billed(world, history):
    """November closed with usage in A (pa), A1 (pa1) and B (pb); December metered, open."""
    rates(world.F, "12", "9.6")
    for project in (world.pa, world.pa1, world.pb):
        history.run(project, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 11))
        history.run(project, world.F, local(2026, 12, 1, 10), local(2026, 12, 1, 12))
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    usage_meter(now=local(2026, 12, 3))


@pytest.mark.parametrize("persona", sorted(SEES))
def test_the_statement_list_shows_the_departments_the_persona_may_see(world, billed, api, persona):
    response = api(world.users[persona]).get(reverse("api:statement-list"), {"month": "2026-11"})
    assert response.status_code == 200
    codes = {row["department_code"] for row in response.json()["results"]}
    assert codes == (SEES[persona] or set())


@pytest.mark.parametrize("persona", sorted(SEES))
def test_the_estimate_follows_the_same_scope(world, billed, api, persona):
    response = api(world.users[persona]).get(reverse("api:statement-estimate"), {"month": "2026-12"})
    if SEES[persona] is None:
        assert response.status_code == 404
        return
    assert response.status_code == 200
    body = response.json()
    assert {row["department_code"] for row in body} == SEES[persona]
    for row in body:
        assert row["month"] == "2026-12" and Decimal(row["total"]) == Decimal("24.00")
        assert [line["card_hours"] for line in row["lines"]] == ["2.000000"]
        for line in row["lines"]:  # the id, and the name closed statements show
            assert line["username"] == User.objects.get(pk=line["user"]).username


@pytest.mark.parametrize("persona", sorted(SEES))
def test_the_chargeback_download_holds_only_visible_departments(world, billed, api, persona):
    response = api(world.users[persona]).get(reverse("api:chargeback"), {"month": "2026-11", "format": "csv"})
    if SEES[persona] is None:
        assert response.status_code == 404
        return
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    scope = "all" if SEES[persona] == {"A", "A1", "B"} else "dept-" + min(SEES[persona]) + "+1" * (
        len(SEES[persona]) > 1
    )  # issue 19: the file name says which departments the file covers
    assert f'filename="chargeback-2026-11-{scope}.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["department_code"] for r in rows} == SEES[persona]
    assert {r["amount"] for r in rows} == {"12.00"}


def test_the_xlsx_download(world, billed, api):
    response = api(world.users["a_finance"]).get(
        reverse("api:chargeback"), {"month": "2026-11", "format": "xlsx", "department": world.A1.pk}
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    rows = list(
        load_workbook(io.BytesIO(response.content), read_only=True).active.iter_rows(values_only=True)
    )
    assert [r[1] for r in rows[1:-1]] == ["A1"] and rows[-1][0] == "total"


def test_statement_detail_has_its_lines(world, billed, api):
    client = api(world.users["a_finance"])
    listed = client.get(reverse("api:statement-list"), {"month": "2026-11", "department": world.A1.pk}).json()
    [row] = listed["results"]
    detail = client.get(reverse("api:statement-detail", args=[row["id"]])).json()
    assert (detail["state"], detail["total"], detail["currency"]) == ("closed", "12.00", "CNY")
    assert [
        (ln["kind"], ln["project_code"], ln["tier"], ln["card_hours"], ln["amount"]) for ln in detail["lines"]
    ] == [("usage", "pa1", "standard", "1.000000", "12.00")]
    other = api(world.users["b_finance"]).get(reverse("api:statement-detail", args=[row["id"]]))
    assert other.status_code == 404


@pytest.mark.parametrize(
    ("route", "params", "field"),
    [
        ("statement-list", {"month": "2026-13"}, "month"),
        ("statement-list", {"month": "nov"}, "month"),
        ("statement-list", {"department": "x"}, "department"),
        ("statement-estimate", {"month": "2026-1"}, "month"),
        ("statement-estimate", {"month": "2026-11"}, "month"),  # closed: read the statements
        ("chargeback", {"format": "csv"}, "month"),  # month is required
        ("chargeback", {"month": "2026-11", "format": "pdf"}, "format"),
        ("chargeback", {"month": "2026-12", "format": "csv"}, "month"),  # not closed
    ],
)
def test_bad_input_answers_400_with_the_field(world, billed, api, route, params, field):
    response = api(world.users["platform"]).get(reverse(f"api:{route}"), params)
    assert response.status_code == 400, response.content
    assert response["Content-Type"].startswith("application/json")
    assert field in response.json()


def test_an_invisible_department_is_404_and_anonymous_is_refused(world, billed, api):
    client = api(world.users["b_finance"])
    for route in ("statement-list", "statement-estimate"):
        assert client.get(reverse(f"api:{route}"), {"department": world.A.pk}).status_code == 404
    assert (
        client.get(reverse("api:chargeback"), {"month": "2026-11", "department": world.A.pk}).status_code
        == 404
    )
    for route in ("statement-list", "statement-estimate", "chargeback"):
        assert api(None).get(reverse(f"api:{route}"), {"month": "2026-11"}).status_code in (401, 403)
