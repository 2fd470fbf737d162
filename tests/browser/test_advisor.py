"""The policy advisor's search page in a real browser, in English and Chinese (issue 25 item 5):
plotly draws today vs the best candidate per department and every candidate's objective. Apply
(issue 32 item 6) first shows every request it would file, labelled, with nothing filed; the
confirm files them and opens the rule-change request it made."""

import pytest

from portal.models import ApprovalRequest
from quotas.models import Flavor
from tests.advisor.scene import finished_search

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize("lang, heading, labels, lines, confirm, applied, rule", [
    ("en", "Best candidates",
     ("Project quotas × 1.5 (overcommit ratio)", "Borrow limit: 0.5 × the project's quota"),
     ("Quota of Project a (pa) for F: 4 → 6", "Quota of Project b (pb) for F: 8 → 12",
      "Quota of B/pb for F, borrow limit: no cap → 4"),
     "File 3 quota request(s) and 1 rule-change request", "3 quota request(s) sent for approval.",
     "Quota of B/pb for F, borrow limit: no cap → 4"),
    ("zh-hans", "最佳候选",
     ("项目配额 × 1.5（超发比例）", "借用上限：项目配额的 0.5 倍"),
     ("Project a (pa) 的 F 配额：4 → 6", "Project b (pb) 的 F 配额：8 → 12",
      "B/pb 的 F 配额，借入上限: 不设上限 → 4"),
     "提交 3 个配额申请和 1 个策略变更申请", "已提交 3 个配额申请等待审批。",
     "B/pb 的 F 配额，借入上限: 不设上限 → 4"),
])
def test_item6_apply_previews_every_request_and_files_them_on_confirm(world, browser_for, shot, lang, heading,
                                                                      labels, lines, confirm, applied, rule):
    Flavor.objects.filter(name="F").update(pool_overcommit_ratio=2)  # room for the quotas × 1.5
    search, cand = finished_search(world.users["platform"])
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
    assert page.locator("table.advisor-best ul.advisor-changes li").all_inner_texts() == list(labels)
    shot(page, f"advisor-{lang}")
    page.locator(f"a.advisor-apply[href='/advisor/candidates/{cand.pk}/apply/']").click()
    page.wait_for_selector("form.advisor-confirm")
    shown = page.locator("section.advisor-preview").inner_text()
    for line in (*labels, *lines):
        assert line in shown, line
    assert not ApprovalRequest.objects.exists()  # the preview files nothing
    shot(page, f"advisor-preview-{lang}")
    page.locator("form.advisor-confirm button[type=submit]").click()
    page.wait_for_selector(f"text={applied}")
    assert ApprovalRequest.objects.filter(kind="quota").count() == 3
    rule_change = ApprovalRequest.objects.get(kind="policy")
    assert page.url.endswith(f"/approvals/{rule_change.pk}/")
    assert rule in page.locator("ul.rule-changes").inner_text()
    assert errors == []
    shot(page, f"advisor-applied-{lang}")
