"""Closing a month in a real browser (issue 32 item 9), in English and in Chinese: from the
Statements page to the preview, a confirm dialog that can say no, then the close in the
background (its task's body run here, as the worker runs it) while the page that started it
follows it to "closed" by itself."""

from datetime import timedelta

import pytest

from billing.closing import month_close_execute
from billing.meter import usage_meter
from billing.models import MonthClose, MonthCloseRun, Statement
from tests.billing.conftest import History, local, rates

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXTS = {
    "en": {"confirm": "Close 2026-11 for every department? Closed statements never change.",
           "waiting": "Waiting for a worker…",
           "done": "2026-11 is closed: 3 statements, 3 lines, 528.00 CNY in total."},
    "zh-hans": {"confirm": "为所有部门结账 2026-11？已结账的账单不再变更。",
                "waiting": "等待工作进程…", "done": "2026-11 已结账：3 份账单，3 条明细，合计 528.00 CNY。"},
}


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_item9_a_month_is_closed_from_the_statements_page_with_a_confirm(world, browser_for, shot, lang):
    rates(world.F, "12", "9.6")
    history = History(world)
    for project, day, hours, gpus in ((world.pa, 3, 2, 8), (world.pa1, 3, 1, 4), (world.pb, 5, 3, 8)):
        begin = local(2026, 11, day, 10)
        history.run(project, world.F, begin, begin + timedelta(hours=hours), gpus=gpus)
    usage_meter(now=local(2026, 12, 1, 1))
    texts = TEXTS[lang]
    page = browser_for(world.users["platform"], "pw-platform")
    page.goto(page.base + "/billing/statements/")
    if lang != "en":
        with page.expect_navigation():
            page.select_option("form.lang-switch select", lang)
    with page.expect_navigation():
        page.click("#review-close")
    assert page.url.endswith("/billing/close/?month=2026-11")
    assert page.inner_text("#close-preview .close-total") == "528.00 CNY"
    shot(page, f"month-close-preview-{lang}")

    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.click("#close-month button[type=submit]")
    assert asked == [texts["confirm"]]
    assert not MonthCloseRun.objects.exists()  # "no" closes nothing

    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.click("#close-month button[type=submit]")
    assert page.inner_text("#close-run p") == texts["waiting"]
    run = MonthCloseRun.objects.get()
    assert month_close_execute(run.pk) == "done"
    page.wait_for_selector("#close-run[data-state=done]")  # the page asks again by itself
    assert texts["done"] in page.inner_text("#close-run")
    shot(page, f"month-close-done-{lang}")
    assert MonthClose.objects.filter(closed_by=world.users["platform"]).count() == 1
    assert set(Statement.objects.values_list("state", flat=True)) == {"closed"}
