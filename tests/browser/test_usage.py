"""The usage explorer in a real browser, in English and in Chinese: a finance user of department A
picks a range and a two-level grouping, sees plotly draw the chart and the table with A's rows
only, and downloads the CSV (UTF-8 with a byte order mark). Data: job histories metered by the
real meter."""

from datetime import timedelta

import pytest

from billing.meter import usage_meter
from tests.billing.conftest import History, local, rates

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def november(world):
    history = History(world)
    rates(world.F, "12", "9.6")
    for project, user, day, hours, gpus in (
        (world.pa, "a_admin", 3, 2, 4),
        (world.pa1, "pa1_member", 4, 1, 2),
        (world.pb, "pb_member", 5, 3, 8),
    ):
        begin = local(2026, 11, day, 10)
        end = begin + timedelta(hours=hours)
        history.run(project, world.F, begin, end, gpus=gpus, user=world.users[user],
                    submitted=begin - timedelta(minutes=15, seconds=30))
    usage_meter(now=local(2026, 12, 2))


@pytest.mark.parametrize(
    ("lang", "words"),
    [("en", {"tab": "Usage", "total": "Total", "cost": "Cost (CNY)"}),
     ("zh-hans", {"tab": "用量", "total": "合计", "cost": "费用（CNY）"})],
)
def test_finance_picks_a_range_and_grouping_sees_chart_and_table_and_downloads_csv(
    world, november, browser_for, shot, lang, words
):
    page = browser_for(world.users["a_finance"], "pw-a_finance", lang=lang)
    page.goto(page.base + "/reports/")
    page.click(f"nav.tabs a:has-text('{words['tab']}')")
    page.wait_for_url("**/billing/usage/")
    page.fill("#id_start", "2026-11-01")
    page.fill("#id_last", "2026-11-30")
    page.select_option("#id_group_by", "department")
    page.select_option("#id_then_by", "user")
    with page.expect_navigation():
        page.click("form.usage-filters button[type=submit]")
    page.wait_for_selector("#usage-chart .main-svg")
    assert page.locator("#usage-chart .barlayer .point").count() == 2  # A and A1, one user each
    drawn = page.evaluate("JSON.stringify(document.getElementById('usage-chart').data)")
    assert "Dept A" in drawn and "Dept B" not in drawn and "pb_member" not in drawn
    table = page.inner_text("table.usage-table")
    assert "a_admin" in table and "pa1_member" in table and "pb_member" not in table
    assert words["cost"] in table and words["total"] in table
    total = page.inner_text("tr.usage-total")
    assert "10.00" in total and "120.00" in total  # 8 + 2 card-hours at 12.00
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, f"usage-explorer-{lang}")

    with page.expect_download() as download:
        page.click("a.usage-csv")
    assert download.value.suggested_filename == "usage-2026-11-01-2026-11-30-department-user.csv"
    with open(download.value.path(), "rb") as f:
        raw = f.read()
    assert raw.startswith("\ufeff".encode())
    lines = raw.decode("utf-8-sig").splitlines()
    assert lines[0].startswith("department,user,card_hours,normalised_card_hours,cost,currency")
    assert sorted(line.split(",")[1] for line in lines[1:]) == ["a_admin", "pa1_member"]


def test_a_bad_range_is_a_form_error_not_a_crash(world, browser_for, shot):
    page = browser_for(world.users["a_finance"], "pw-a_finance", lang="zh-hans")
    page.goto(page.base + "/billing/usage/?start=2026-11-05&last=2026-11-01")
    assert "结束日期不能早于开始日期" in page.inner_text("article.message.error")
    shot(page, "usage-explorer-bad-range-zh-hans")


@pytest.mark.parametrize(
    ("lang", "words"),
    [("en", {"this_month": "This month"}), ("zh-hans", {"this_month": "本月"})],
)
def test_item3_a_month_entered_as_its_first_and_last_day_counts_the_last_day(
    world, november, browser_for, shot, lang, words
):
    begin = local(2026, 11, 30, 22)  # two hours on 30 November, 2 GPUs: 4 card-hours of the last day
    History(world).run(world.pa, world.F, begin, begin + timedelta(hours=2), gpus=2,
                       user=world.users["a_admin"], submitted=begin - timedelta(minutes=5))
    usage_meter(now=local(2026, 12, 2))
    page = browser_for(world.users["a_finance"], "pw-a_finance", lang=lang)
    page.goto(page.base + "/billing/usage/")
    # The first load shows the range and the grouping of the table below it.
    assert page.input_value("#id_group_by") == "project"
    assert page.input_value("form.usage-filters input[type=date] >> nth=0") != ""
    page.fill("form.usage-filters input[type=date] >> nth=0", "2026-11-01")
    page.fill("form.usage-filters input[type=date] >> nth=1", "2026-11-30")  # the month as people enter it
    with page.expect_navigation():
        page.click("form.usage-filters button[type=submit]")
    total = page.inner_text("tr.usage-total")
    assert "14.00" in total and "168.00" in total  # 8 + 2 + 4 card-hours at 12.00: 30 November counts
    shot(page, f"usage-explorer-last-day-{lang}")
    with page.expect_navigation():
        page.click(f"form.usage-filters a:has-text('{words['this_month']}')")
    assert page.input_value("#id_group_by") == "project"  # the preset keeps the grouping
    assert page.input_value("#id_start").endswith("-01")
