"""The reports and statement pages in a real browser: plotly.js draws every chart with data for
a finance user of department A, a finance user of B sees none of A's data, and the statement
page downloads the chargeback file. The data are job histories metered by the real meter and a
month closed by the real month close."""

from datetime import timedelta

import pytest

from billing.meter import usage_meter
from billing.services import statement_close_month
from jobs.models import Job, JobGpuSample
from quotas.models import Node
from tests.billing.conftest import History, local, rates

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS = ("daily", "quota", "heatmap", "waits", "idle", "costs")
# What plotly draws for one data point of each chart: a bar, a heatmap image, a box.
MARKS = {
    "daily": ".barlayer .point",
    "quota": ".barlayer .point",
    "heatmap": ".heatmaplayer .hm image",
    "waits": ".boxlayer path.box",
    "idle": ".barlayer .point",
    "costs": ".barlayer .point",
}


@pytest.fixture
def november(world):
    """A (pa) and A1 (pa1) ran on node n0, B (pb) on n1, in November 2026; metered and closed."""
    from datetime import date

    history = History(world)
    rates(world.F, "12", "9.6")
    n0, n1 = Node.objects.order_by("name")
    for project, day, hours, gpus, wait, node, util in (
        (world.pa, 3, 2, 8, 10, n0, 3.0),
        (world.pa1, 4, 1, 4, 25, n0, 55.0),
        (world.pb, 5, 3, 8, 60, n1, 35.0),
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
        Job.objects.filter(pk=job.pk).update(placement=[[[node.pk, g, 1000] for g in range(gpus)]])
        JobGpuSample.objects.bulk_create(
            JobGpuSample(
                job=job,
                minute=begin + timedelta(minutes=m),
                gpu_util_pct=util + m % 5,
                fb_used_mib=2048,
                gpus=gpus,
            )
            for m in range(hours * 60)
        )
    usage_meter(now=local(2026, 12, 2))
    statement_close_month(month=date(2026, 11, 1), now=local(2026, 12, 2))


def _open_report(page, month="2026-11"):
    page.goto(page.base + "/reports/")
    page.fill("#id_month", month)
    with page.expect_navigation():
        page.click("form.filters button[type=submit]")
    for key in CHARTS:
        page.wait_for_selector(f"#chart-{key} .main-svg")


def _trace_names(page) -> list[str]:
    return page.evaluate(
        "Array.from(document.querySelectorAll('[data-plotly]'))"
        ".flatMap(el => (el.data || []).map(t => String(t.name || '') + ' ' + JSON.stringify(t.x || [])"
        " + ' ' + JSON.stringify(t.y || [])))"
    )


def test_finance_sees_its_charts_drawn_and_the_statement(world, november, browser_for, shot):
    page = browser_for(world.users["a_finance"], "pw-a_finance")
    page.click("header a[href='/reports/']")
    page.wait_for_url("**/reports/")
    _open_report(page)
    for key in CHARTS:
        marks = page.locator(f"#chart-{key} {MARKS[key]}").count()
        assert marks > 0, key
        title = page.locator(f"#chart-{key} .gtitle").text_content()
        assert "2026-11" in title or key == "quota", title
    names = page.evaluate("document.getElementById('chart-daily').data.map(t => t.name)")
    assert sorted(names) == ["Dept A", "Dept A1"]
    assert page.locator("#chart-daily .barlayer .point").count() == 2  # one day each
    assert page.evaluate("document.getElementById('chart-heatmap').data[0].y") == ["n0"]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "reports")

    page.click("nav.tabs a[href='/billing/statements/']")
    page.wait_for_url("**/billing/statements/")
    page.click("table.statements a >> nth=0")
    page.wait_for_selector("table.statement-lines")
    assert "192.00" in page.inner_text("table.statement-lines")
    with page.expect_download() as download:
        page.click("a:has-text('Download CSV')")
    with open(download.value.path(), encoding="utf-8-sig") as f:  # the file starts with a BOM (item 16)
        header = f.readline().strip()
    assert header.startswith("month,department_code,cost_centre,project")
    shot(page, "statement")


def test_finance_of_another_department_sees_none_of_a(world, november, browser_for):
    page = browser_for(world.users["b_finance"], "pw-b_finance")
    _open_report(page)
    for key in CHARTS:
        assert page.locator(f"#chart-{key} {MARKS[key]}").count() > 0, key  # B's own data is there
    drawn = " | ".join(_trace_names(page))
    assert "Dept B" in drawn
    assert "Dept A" not in drawn and "n0" not in drawn and '"pa' not in drawn
    svg_text = page.evaluate(
        "Array.from(document.querySelectorAll('.main-svg text')).map(t => t.textContent).join(' | ')"
    )
    assert "Dept A" not in svg_text and "n0" not in svg_text


def test_item17_the_smaller_plotly_bundle_draws_every_chart(world, november, browser_for, shot):
    """The cartesian dist (1.5 MB instead of 4.8 MB) draws each kind of chart the pages have:
    the reports' bars, heatmap and box plot, the dashboard's bars, a job's utilisation lines."""
    page = browser_for(world.users["platform"], "pw-platform")
    errors = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _open_report(page)
    scripts = page.evaluate("Array.from(document.scripts).map(s => s.src).filter(s => s.includes('plotly'))")
    assert len(scripts) == 1 and scripts[0].endswith("/static/vendor/plotly-cartesian-4.1.1.min.js")
    assert page.evaluate("window.Plotly.version") == "4.1.1"
    for key in CHARTS:
        assert page.locator(f"#chart-{key} {MARKS[key]}").count() > 0, key
    shot(page, "reports-cartesian-bundle")

    page.goto(page.base + "/")
    page.wait_for_selector(".chart .main-svg")
    assert page.locator(".chart .barlayer .point").count() > 0  # the pool: in use and free
    shot(page, "dashboard-cartesian-bundle")

    job = Job.objects.filter(project=world.pb).get()
    page.goto(page.base + f"/jobs/{job.pk}/")
    page.wait_for_selector(".chart .main-svg")
    assert page.locator(".chart .scatterlayer .trace path.js-line").count() == 2  # % and GiB
    shot(page, "job-detail-cartesian-bundle")
    assert errors == []
