"""Personal API tokens in a real browser, in Chinese and in English (issue 32 item 16): from the
user menu to the API tokens page, a token made (shown once, and it works against the API),
listed without its secret after a reload, revoked after the confirmation (it stops working)."""

import pytest
import requests

from portal.models import ApiToken, User

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORDS = {
    "en": {"title": "API tokens", "once": "shown only this once", "revoked": "was revoked", "never": "never"},
    "zh-hans": {"title": "API 令牌", "once": "只显示这一次", "revoked": "已撤销", "never": "从未"},
}


def _api_status(base: str, secret: str) -> int:
    answer = requests.get(f"{base}/api/v1/me/", headers={"Authorization": f"Token {secret}"}, timeout=60)
    return answer.status_code


@pytest.mark.parametrize("lang", ["zh-hans", "en"])
def test_item16_make_a_token_see_it_once_list_it_and_revoke_it(browser_for, shot, lang):
    words = WORDS[lang]
    user = User.objects.create_user(username=f"lin-{lang}", password="pw-lin")
    page = browser_for(user, "pw-lin", lang)
    page.click("details.user-menu summary")
    page.click("a.nav-api-tokens")
    page.wait_for_url("**/account/api-tokens/")
    assert words["title"] in page.inner_text("h1")

    page.fill("input[name=name]", "nightly sync")
    page.select_option("select[name=expires_in_days]", "30")
    with page.expect_navigation():
        page.click("button.create-token")
    secret = page.inner_text("code.token-secret").strip()
    assert secret.startswith("gpp_")
    assert words["once"] in page.inner_text("article.new-token")
    shot(page, f"api-token-made-{lang}")
    assert _api_status(page.base, secret) == 200

    token = ApiToken.objects.get(user=user)
    page.goto(f"{page.base}/account/api-tokens/")
    assert page.locator("code.token-secret").count() == 0 and secret not in page.content()
    row = page.locator(f"#api-token-{token.pk}")
    assert "nightly sync" in row.inner_text() and token.prefix in row.inner_text()
    assert words["never"] not in row.inner_text()  # the API call above used it

    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        row.locator("button.revoke").click()
    assert words["revoked"] in page.inner_text("article.message.success")
    assert page.locator(f"#api-token-{token.pk}").count() == 0
    shot(page, f"api-token-revoked-{lang}")
    assert _api_status(page.base, secret) == 401
