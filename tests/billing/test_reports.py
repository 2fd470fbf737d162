"""The reports page, the statement pages and their downloads, per persona: the numbers inside
each chart's JSON (what the browser draws), the filters, bad input, and the download files."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import date, timedelta
from decimal import Decimal
from html import unescape
from html.parser import HTMLParser

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from openpyxl import load_workbook

from billing import exports
from billing.meter import usage_meter
from billing.models import Statement
from billing.services import statement_close_month
from jobs.models import Job, JobGpuSample
from quotas.models import Flavor, Node

from .conftest import local, rates

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)
CHARTS = ("daily", "quota", "heatmap", "waits", "idle", "costs")


class _Charts(HTMLParser):
    """Collects each chart element by id: its figure (``data-plotly``) or its empty-state text."""

    def __init__(self):
        super().__init__()
        self.found: dict[str, dict | None] = {}
        self._empty: str | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        ident = attrs.get("id") or ""
        if ident.startswith("chart-") and not ident.endswith("-section"):
            key = ident.removeprefix("chart-")
            if "data-plotly" in attrs:
                self.found[key] = json.loads(unescape(attrs["data-plotly"]))
            else:
                self.found[key] = None
                self._empty = key

    def handle_endtag(self, tag):
        if tag == "article":
            self._empty = None


def charts_of(response) -> dict[str, dict | None]:
    assert response.status_code == 200, response.content[:500]
    parser = _Charts()
    parser.feed(response.content.decode())
    return parser.found


def traces(figure) -> dict[str, dict]:
    return {t.get("name"): t for t in (figure or {}).get("data", [])}


def total(figure, axis="y") -> float:
    return round(sum(v or 0 for t in (figure or {}).get("data", []) for v in t.get(axis) or []), 3)


@pytest.fixture
def client_for(world):
    def make(persona: str | None) -> Client:
        client = Client(HTTP_ACCEPT_LANGUAGE="en")
        if persona:
            client.force_login(world.users[persona])
        return client

    return make


def _samples(job, start, minutes, util):
    JobGpuSample.objects.bulk_create(
        JobGpuSample(
            job=job, minute=start + timedelta(minutes=m), gpu_util_pct=util, fb_used_mib=1024, gpus=8
        )
        for m in range(minutes)
    )


def _place(job, node, gpus):
    Job.objects.filter(pk=job.pk).update(placement=[[[node.pk, g, 1000] for g in range(gpus)]])


@pytest.fixture
def reported(world, history):
    """November: pa (A) 8 GPUs 2 h on the 3rd (idle, 2 %), pa1 (A1) 4 GPUs 1 h on the 3rd (50 %),
    pb (B) 8 GPUs 3 h on the 5th (30 %); queue waits 10, 20 and 60 minutes; metered."""
    rates(world.F, "12", "9.6")
    n0, n1 = Node.objects.order_by("name")
    made = {}
    for key, project, day, hours, gpus, wait, node, util in (
        ("pa", world.pa, 3, 2, 8, 10, n0, 2.0),
        ("pa1", world.pa1, 3, 1, 4, 20, n0, 50.0),
        ("pb", world.pb, 5, 3, 8, 60, n1, 30.0),
    ):
        begin = local(2026, 11, day, 10)
        job = history.run(
            project,
            world.F,
            begin,
            begin + timedelta(hours=hours),
            gpus=gpus,
            submitted=begin - timedelta(minutes=wait, seconds=30),
        )
        _place(job, node, gpus)
        _samples(job, begin, 60, util)
        made[key] = job
    Job.objects.filter(pk=made["pa"].pk).update(idle_since=local(2026, 11, 3, 11))
    usage_meter(now=local(2026, 12, 2))
    return made


def _report(client_for, persona, **params):
    return client_for(persona).get("/reports/", {"month": "2026-11", **params})


def test_finance_of_a_sees_a_and_its_subtree_and_nothing_of_b(client_for, reported):
    found = charts_of(_report(client_for, "a_finance"))
    assert set(found) == set(CHARTS)
    daily = traces(found["daily"])
    assert set(daily) == {"Dept A", "Dept A1"}
    assert sum(daily["Dept A"]["y"]) == 16 and sum(daily["Dept A1"]["y"]) == 4
    assert (daily["Dept A"]["x"], daily["Dept A"]["y"]) == (["2026-11-03"], [16])
    quota = traces(found["quota"])
    assert quota["Quota"]["x"] == ["Dept A", "Dept A1"] and quota["Quota"]["y"] == [8, 4]
    heat = found["heatmap"]["data"][0]
    assert heat["y"] == ["n0"]
    assert heat["z"][0][2] == pytest.approx((2.0 * 8 + 50.0 * 4) / 12, abs=0.1)  # GPU-weighted mean
    [box] = found["waits"]["data"]
    assert box["name"] == "training (n=2)" and box["median"] == [15.0]
    idle = found["idle"]["data"][0]
    # Flagged idle first (pa), then by mean utilisation; plotly lists the first at the bottom.
    assert idle["y"] == [f"j2 #{reported['pa1'].pk}", f"j1 #{reported['pa'].pk}"]
    assert idle["x"] == [4.0, 16.0]
    costs = traces(found["costs"])
    assert set(costs) == {"Dept A", "Dept A1"}
    assert costs["Dept A"]["x"] == ["pa"] and costs["Dept A"]["y"] == [192.0]
    assert costs["Dept A1"]["y"] == [48.0]
    page = _report(client_for, "a_finance").content.decode()
    assert "Dept B" not in page and f"j3 #{reported['pb'].pk}" not in page


def test_finance_of_b_sees_only_b(client_for, reported):
    found = charts_of(_report(client_for, "b_finance"))
    assert set(traces(found["daily"])) == {"Dept B"} and total(found["daily"]) == 24
    assert traces(found["quota"])["Quota"]["x"] == ["Dept B"]
    assert found["heatmap"]["data"][0]["y"] == ["n1"]
    assert found["heatmap"]["data"][0]["z"][0][4] == 30.0
    assert [t["name"] for t in found["waits"]["data"]] == ["training (n=1)"]
    assert found["waits"]["data"][0]["median"] == [60.0]
    assert found["idle"]["data"][0]["x"] == [24.0]
    assert traces(found["costs"])["Dept B"]["y"] == [288.0]


def test_platform_admins_and_auditors_see_every_department(client_for, reported):
    for persona in ("platform", "auditor"):
        found = charts_of(_report(client_for, persona))
        assert set(traces(found["daily"])) == {"Dept A", "Dept A1", "Dept B"}
        assert total(found["daily"]) == 44
        assert total(found["costs"]) == 528.0


def test_a_project_member_sees_its_projects_card_hours_but_no_money(client_for, reported):
    response = _report(client_for, "pa1_member")
    found = charts_of(response)
    assert set(traces(found["daily"])) == {"Dept A1"} and total(found["daily"]) == 4
    assert found["idle"]["data"][0]["x"] == [4.0]
    assert found["costs"] is None
    assert "Costs are shown to finance" in response.content.decode()
    assert [t["name"] for t in found["waits"]["data"]] == ["training (n=1)"]


def test_an_outsider_sees_nothing(client_for, reported):
    response = _report(client_for, "outsider")
    assert charts_of(response) == {}
    assert "nothing to report" in response.content.decode()


def test_the_department_filter_narrows_to_a_subtree(client_for, reported):
    found = charts_of(_report(client_for, "a_finance", department=reported["pa1"].project.department_id))
    assert set(traces(found["daily"])) == {"Dept A1"}
    assert traces(found["quota"])["Quota"]["x"] == ["Dept A1"]
    assert set(traces(found["costs"])) == {"Dept A1"}


def test_the_flavor_filter_and_an_empty_month_show_empty_states(client_for, world, reported):
    other = Flavor.objects.create(name="G", vendor="nvidia", model="G", memory_mib=1, k8s_resource_name="x")
    response = _report(client_for, "platform", flavor=other.pk)
    found = charts_of(response)
    assert found["daily"] is None and found["heatmap"] is None and found["waits"] is None
    assert "No metered card-hours in this month." in response.content.decode()
    empty = charts_of(client_for("platform").get("/reports/", {"month": "2026-10"}))
    assert [key for key, figure in empty.items() if figure is not None] == ["quota"]  # quota is "now"


@pytest.mark.parametrize("params", [{"month": "2026-13"}, {"month": "nov"}, {"month": "x" * 40}])
def test_bad_filters_are_form_errors_not_500(client_for, reported, params):
    response = client_for("a_finance").get("/reports/", params)
    assert response.status_code == 200
    body = response.content.decode()
    assert "is not a month" in body or "at most 7 characters" in body
    assert charts_of(response) == {}


def test_a_department_outside_the_scope_is_a_form_error(client_for, world, reported):
    response = client_for("a_finance").get("/reports/", {"month": "2026-11", "department": world.B.pk})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()
    assert charts_of(response) == {}


def test_a_closed_month_costs_come_from_the_statements(client_for, reported):
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    found = charts_of(_report(client_for, "a_finance"))
    assert traces(found["costs"])["Dept A"]["y"] == [192.0]
    assert "From the closed statements" in _report(client_for, "a_finance").content.decode()


def test_the_page_runs_a_fixed_number_of_queries(client_for, world, history, reported):
    def count():
        with CaptureQueriesContext(connection) as queries:
            assert _report(client_for, "platform").status_code == 200
        return len(queries)

    before = count()
    for i in range(20):
        begin = local(2026, 11, 10 + i % 10, 8)
        job = history.run(world.pb, world.F, begin, begin + timedelta(hours=1), gpus=2)
        _samples(job, begin, 5, 40.0)
        _place(job, Node.objects.get(name="n1"), 2)
    usage_meter(now=local(2026, 12, 2, 1))
    assert count() == before


# --- statements ----------------------------------------------------------------------------------


@pytest.fixture
def closed(reported):
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    return {s.department.code: s for s in Statement.objects.select_related("department")}


@pytest.mark.parametrize(
    ("persona", "codes"),
    [("a_finance", {"A", "A1"}), ("b_admin", {"B"}), ("auditor", {"A", "A1", "B"}), ("pa1_member", set())],
)
def test_the_statement_list_follows_the_statement_scope(client_for, closed, persona, codes):
    response = client_for(persona).get("/billing/statements/")
    assert response.status_code == 200
    assert {s.department.code for s in response.context["page"]} == codes
    for code, statement in closed.items():
        detail = client_for(persona).get(f"/billing/statements/{statement.pk}/")
        assert detail.status_code == (200 if code in codes else 404), (persona, code)


def test_the_statement_page_lists_lines_and_offers_downloads(client_for, closed):
    response = client_for("a_finance").get(f"/billing/statements/{closed['A'].pk}/")
    body = response.content.decode()
    assert "192.00" in body and "Download CSV" in body and "Download XLSX" in body
    assert [(line.project.code, line.amount) for line in response.context["lines"]] == [
        ("pa", Decimal("192.00"))
    ]


def test_the_csv_download_has_the_chargeback_columns(client_for, closed):
    response = client_for("a_finance").get(
        f"/billing/statements/{closed['A1'].pk}/download/", {"format": "csv"}
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert 'filename="chargeback-2026-11-dept-A1.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode("utf-8-sig"))))
    assert tuple(rows[0]) == exports.COLUMNS
    assert [(r[1], r[3], r[9]) for r in rows[1:]] == [("A1", "pa1", "48.00")]


def test_the_xlsx_download(client_for, closed):
    response = client_for("platform").get(
        f"/billing/statements/{closed['B'].pk}/download/", {"format": "xlsx"}
    )
    assert response.status_code == 200
    assert response["Content-Type"] == exports.CONTENT_TYPES["xlsx"]
    rows = list(
        load_workbook(io.BytesIO(response.content), read_only=True).active.iter_rows(values_only=True)
    )
    assert rows[0] == exports.COLUMNS
    assert [(r[1], r[3], r[9]) for r in rows[1:-1]] == [("B", "pb", 288)]


def test_downloads_follow_visibility_and_refuse_bad_input(client_for, closed):
    url = f"/billing/statements/{closed['B'].pk}/download/"
    assert client_for("a_finance").get(url, {"format": "csv"}).status_code == 404
    assert client_for("pa1_member").get(url, {"format": "csv"}).status_code == 404
    assert client_for("b_finance").get(url, {"format": "pdf"}).status_code == 400
    assert client_for(None).get(url).status_code == 302  # to the login page


def test_a_draft_has_no_download(client_for, world, history, reported):
    from billing.services import statement_draft_month

    statement_draft_month(month=NOV)
    draft = Statement.objects.get(department=world.A)
    response = client_for("a_finance").get(f"/billing/statements/{draft.pk}/")
    assert "Download CSV" not in response.content.decode()
    assert client_for("a_finance").get(f"/billing/statements/{draft.pk}/download/").status_code == 404


def test_the_statement_page_shows_this_months_estimate(client_for, world, history, pinned_now):
    """The clock stopped mid-month (tests/clock.py): this test skipped in a month's first hours
    (issue 32 item 14)."""
    rates(world.F, "12", "9.6")
    now = pinned_now
    begin = now - timedelta(hours=3)
    history.run(world.pa1, world.F, begin, begin + timedelta(minutes=30), gpus=2)
    usage_meter(now=now)
    response = client_for("a_finance").get("/billing/statements/")
    [row] = response.context["estimates"]
    assert row["estimate"].department == world.A1 and row["estimate"].total == Decimal("12.00")
    assert client_for("pa1_member").get("/billing/statements/").context["estimates"] == []


def test_item9_the_statement_page_names_tiers_as_the_chargeback_file_does(
    client_for, world, history, reported
):
    """The file's ``tier`` values are a contract finance imports: the page shows them as they are
    (with what they mean), not "In quota" for ``standard``."""
    begin = local(2026, 11, 7, 10)
    job = history.run(world.pb, world.F, begin, None, gpus=2)
    history.flip(job, begin + timedelta(hours=1), True)  # its second hour on loan
    history.end(job, begin + timedelta(hours=2))
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    statement = Statement.objects.get(department=world.B)
    client = client_for("platform")
    html = client.get(f"/billing/statements/{statement.pk}/").content.decode()
    shown = re.findall(r'<code class="tier">([a-z_]+)</code>', html)
    file = client.get(f"/billing/statements/{statement.pk}/download/", {"format": "csv"})
    rows = list(csv.DictReader(io.StringIO(file.content.decode("utf-8-sig"))))
    assert sorted(shown) == sorted(r["tier"] for r in rows) and set(shown) == {"standard", "on_loan"}
    assert "In quota" not in html
