"""The policy advisor's search page in a real browser, in English and Chinese (issue 25 item 5):
plotly draws today vs the best candidate per department and every candidate's objective, and
"Apply" sends the quota requests and opens the rule-change request it made."""

import pytest

from portal.models import ApprovalRequest
from tests.advisor.scene import finished_search

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("lang, heading, applied, rule", [
    ("en", "Best candidates", "3 quota request(s) sent for approval.", "Scheduler EASY backfill: on → off"),
    ("zh-hans", "最佳候选", "已提交 3 个配额申请等待审批。", "调度器 EASY 回填: 开启 → 关闭"),
])
def test_the_search_page_draws_its_charts_and_applies_a_candidate(world, browser_for, shot, lang, heading,
                                                                    applied, rule):
    search, cand = finished_search(world.users["platform"], ratio=0.5)
    page = browser_for(world.users["platform"], "pw-platform", lang)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(page.base + f"/advisor/{search.pk}/")
    assert heading in page.locator("h2").all_inner_texts()
    for chart in ("chart-avg_queue_delay_s", "chart-p95_queue_delay_s", "chart-objective"):
        page.wait_for_selector(f"#{chart} .main-svg")
    departments = page.evaluate("document.getElementById('chart-avg_queue_delay_s').data.map(t => t.x)")
    assert departments == [["d0", "d1"], ["d0", "d1"]]  # today, best candidate
    points = page.evaluate("document.getElementById('chart-objective').data.map(t => t.x.length)")
    assert sum(points) == 2  # today and the candidate
    shot(page, f"advisor-{lang}")
    page.locator(f"form[action='/advisor/candidates/{cand.pk}/apply/'] button").click()
    page.wait_for_selector(f"text={applied}")
    assert ApprovalRequest.objects.filter(kind="quota").count() == 3
    rule_change = ApprovalRequest.objects.get(kind="policy")
    assert page.url.endswith(f"/approvals/{rule_change.pk}/")
    assert rule in page.locator("ul.rule-changes").inner_text()
    assert errors == []
    shot(page, f"advisor-applied-{lang}")
