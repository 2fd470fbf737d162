"""The budgets page in a real browser, in English and in Chinese: a finance user sets a money
budget through the form, and plotly.js draws its burn-down — the use so far, the forecast to
the month's end and the budget line. The usage is a job holding GPUs since earlier today (the
unmetered tail) and a metered stretch before it, priced by a real rate."""

from datetime import timedelta

import pytest

from billing.budgets import budget_set
from billing.meter import usage_meter
from billing.models import Budget
from billing.periods import floor_hour
from quotas.selectors import site_zone
from tests.billing.conftest import History, local, rates

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def spending(world, pinned_now):
    """pa1 has held 8 GPUs since 3 hours ago, metered up to the last full hour; F costs 10 a
    card-hour. The clock (the live server's too: same process) is stopped mid-month
    (tests/clock.py): this test skipped in a month's first minutes (issue 32 item 14)."""
    now = pinned_now
    begin = now - timedelta(hours=3)
    rates(world.F, "10", "5", since=local(2026, 1, 1))
    History(world).run(world.pa1, world.F, begin, None, gpus=8)
    usage_meter(now=floor_hour(now, site_zone()))


@pytest.mark.parametrize(
    ("lang", "texts"),
    [
        ("en", ("Spent this month", "Forecast at month end", "Used so far", "Budget")),
        ("zh-hans", ("本月支出", "月末预测", "截至目前已用", "预算")),
    ],
)
def test_finance_sets_a_money_budget_and_sees_its_burn_down(world, spending, browser_for, shot, lang, texts):
    page = browser_for(world.users["a_finance"], "pw-a_finance", lang=lang)
    page.goto(page.base + "/billing/budgets/")
    page.select_option("#id_owner", f"p{world.pa1.pk}")
    page.fill("#id_amount", "5000")
    with page.expect_navigation():
        page.click("#budget-form button[type=submit]")
    budget = Budget.objects.get()
    assert (budget.project_id, budget.card_hours, str(budget.amount)) == (world.pa1.pk, None, "5000.00")
    chart = f"#burn-down-{budget.pk}"
    page.wait_for_selector(f"{chart} .main-svg")
    assert page.locator(f"{chart} .scatterlayer .trace").count() == 3  # used, forecast, budget
    names = page.evaluate(f"document.querySelector('{chart}').data.map(t => t.name)")
    assert names[0] == texts[2] and names[2] == texts[3], names
    used = page.evaluate(f"document.querySelector('{chart}').data[0].y")
    assert used[0] == 0 and used[-1] > 0  # from nothing at the month's start to the spend now
    budget_line = page.evaluate(f"document.querySelector('{chart}').data[2].y")
    assert budget_line == [5000, 5000]
    table = page.inner_text("table.budgets")
    for text in texts[:2]:
        assert text in table
    assert "5000.00" in table or "5,000.00" in table
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, f"budgets-burn-down-{lang}")


@pytest.mark.parametrize(
    ("lang", "title"), [("en", "Download plot as a PNG"), ("zh-hans", "下载图表为PNG格式")]
)
def test_item11_the_chart_toolbar_speaks_the_pages_language(world, spending, browser_for, lang, title):
    """Issue 32 item 11: plotly's toolbar stayed English on Chinese pages; they now load plotly's
    zh-CN locale (templates/_charts.html) and draw with it (static/js/charts.js)."""
    budget_set(actor=None, amount="5000", project=world.pa1)
    page = browser_for(world.users["a_finance"], "pw-a_finance", lang=lang)
    page.goto(page.base + "/billing/budgets/")
    chart = f"#burn-down-{Budget.objects.get().pk}"
    page.wait_for_selector(f"{chart} .main-svg")
    titles = page.eval_on_selector_all(f"{chart} .modebar-btn", "els => els.map(e => e.dataset.title)")
    assert title in titles, titles
