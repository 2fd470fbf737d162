"""Webhooks in a real browser (issue 24 item 7), in English and in Chinese: a project admin
opens Notifications → Webhooks, adds a signed JSON webhook (their own in English, the project's
in Chinese), sends a test and sees it delivered in the log; the secret is not shown back."""

import pytest

from portal.models import Webhook
from tests.webhook_receiver import start_receiver

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXTS = {
    "en": {"saved": "was saved", "delivered": "The test message was delivered.", "status": "Delivered",
           "own": "— none: my own webhook —"},
    "zh-hans": {"saved": "已保存", "delivered": "测试消息已送达。", "status": "已送达",
                "own": "— 无：我自己的 Webhook —"},
}


@pytest.fixture
def receiver(settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": ["127.0.0.1"]}
    rec, server = start_receiver(secrets={"json": "browser-secret"})
    yield rec
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_a_project_admin_adds_a_webhook_and_sees_the_test_delivery_in_the_log(
    world, browser_for, shot, receiver, lang
):
    texts = TEXTS[lang]
    page = browser_for(world.users["pa1_admin"], "pw-pa1_admin", lang)
    page.goto(f"{page.base}/notifications/")
    page.click("a.nav-webhooks")
    page.wait_for_url("**/notifications/webhooks/")
    page.click("a.new-webhook")
    page.wait_for_url("**/notifications/webhooks/new/")
    page.fill("input[name=name]", f"CI {lang}")
    page.select_option("select[name=kind]", "json")
    if lang == "zh-hans":
        page.select_option("select[name=project]", label="Project a1 (pa1)")
    else:
        assert page.locator("select[name=project] option").first.inner_text() == texts["own"]
    page.fill("input[name=url]", f"{receiver.url}/json/hook")
    page.fill("input[name=secret]", "browser-secret")
    page.check("input[name=topics][value=job]")
    page.select_option("form.webhook-form select[name=language]", lang)
    with page.expect_navigation():
        page.click("form.webhook-form button[type=submit]")
    assert texts["saved"] in page.inner_text("article.message.success")
    hook = Webhook.objects.get()
    assert (hook.project_id is not None) == (lang == "zh-hans") and hook.secret == "browser-secret"
    assert page.input_value("input[name=secret]") == "" and "browser-secret" not in page.content()
    assert page.input_value("form.webhook-form input[name=url]") == "" and receiver.url in page.content()

    with page.expect_navigation():
        page.click("form button.send-test")
    assert texts["delivered"] in page.inner_text("article.message.success")
    row = page.locator("table.delivery-log tbody tr").first
    assert texts["status"] in row.locator("td.status").inner_text()
    (received,) = receiver.received
    assert received.verified and received.body["event"] == "test" and received.body["language"] == lang
    shot(page, f"webhooks-log-{lang}")

    page.goto(f"{page.base}/notifications/webhooks/")
    listed = page.locator(f"#webhook-{hook.pk}")
    assert f"CI {lang}" in listed.inner_text()
    assert texts["status"] in listed.locator("td.last-status").inner_text()
    shot(page, f"webhooks-list-{lang}")
