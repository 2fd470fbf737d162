"""An approver decides with context, in a real browser (issue 24 item 3): the department admin
opens the inbox and sees a line of key figures next to the request, opens the request and sees
the full context (usage against quota, capacity free, estimated cost, budgets, the requester's
last 90 days) — in English and in Chinese — and approves it.

Scene (tests/approval_scene.py): on F (2 × 8 GPUs) pa1 holds 2 GPUs in quota and 1 borrowed,
pb 3; F costs 2.50 a card-hour; pa1_member had 1 request approved and 1 rejected, ran 2 jobs
(1 flagged idle) in the last 90 days."""

import pytest
from django.utils import timezone

from billing.models import Rate
from jobs.approvals import approval_policy_set
from tests.approval_scene import job_request, make_scene

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _english_records(settings):
    # Stored texts (summaries) are written in the site language; read them in English.
    settings.LANGUAGE_CODE = "en"


def test_an_approver_sees_the_context_in_both_languages_then_approves(world, browser_for, shot):
    make_scene(world, timezone.now())
    approval_policy_set(actor=world.users["platform"], department=world.A, max_gpus=2)
    req = job_request(world, name="ctx-train")
    currency = Rate.objects.first().currency

    page = browser_for(world.users["a_admin"], "pw-a_admin")
    page.goto(page.base + "/approvals/")
    line = page.locator(f"table.approvals [data-context='{req.pk}']").inner_text()
    assert line.startswith(f"F 2+1 of 4 · 10 free · ≈ 10.00 {currency} · Project a1: ")
    assert line.endswith("90 d: 1 approved, 1 rejected, 2 jobs (1 idle)")
    shot(page, "approval-context-inbox-en")

    page.click("table.approvals a:has-text('ctx-train')")
    page.wait_for_url(f"**/approvals/{req.pk}/")
    context = page.locator("#approval-context")
    assert "Context for the decision" in context.inner_text()
    usage = context.locator("table.context-usage tbody tr").first.locator("td").all_inner_texts()
    assert [c.strip() for c in usage] == ["Project a1 (pa1)", "4", "4", "2", "1"]
    assert context.locator(".free-now").inner_text() == "10"
    assert f"10.00 {currency}" in context.locator(".estimated-cost").inner_text()
    assert "of 100 card-hours left" in context.inner_text()
    assert "1 / 1" in context.locator("dl.history").inner_text()
    shot(page, "approval-context-detail-en")

    with page.expect_navigation():
        page.select_option("form.lang-switch select", "zh-hans")
    assert page.evaluate("document.documentElement.lang") == "zh-hans"
    context = page.locator("#approval-context")
    text = context.inner_text()
    assert "决策参考" in text and "F 的用量与配额" in text and "本月预算" in text
    assert "申请人近 90 天" in text and "预估费用" in text
    assert context.locator(".free-now").inner_text() == "10"
    shot(page, "approval-context-detail-zh-hans")
    page.goto(page.base + "/approvals/")
    line = page.locator(f"table.approvals [data-context='{req.pk}']").inner_text()
    assert "空闲 10" in line and "近 90 天：批准 1，驳回 1，任务 2（低利用率 1）" in line
    shot(page, "approval-context-inbox-zh-hans")

    with page.expect_navigation():
        page.select_option("form.lang-switch select", "en")
    page.goto(page.base + f"/approvals/{req.pk}/")
    page.fill("#id_comment", "budget and capacity allow it")
    with page.expect_navigation():
        page.click("section.decision button[value=approve]")
    assert f"Request #{req.pk} was approved." in page.inner_text("main")
    req.refresh_from_db()
    assert req.state == "approved" and req.steps.get().comment == "budget and capacity allow it"
