"""The language switch renders the portal in Chinese and back in English, in a real browser."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_switching_to_chinese_renders_chinese(world, browser_for, shot):
    page = browser_for(world.users["a_admin"], "pw-a_admin", lang="en")
    assert page.locator("nav").get_by_text("Dashboard").is_visible()
    with page.expect_navigation():
        page.select_option("form.lang-switch select", "zh-hans")
    nav = page.locator("header nav").inner_text()
    assert "仪表盘" in nav, nav
    assert page.evaluate("document.documentElement.lang") == "zh-hans"
    shot(page, "dashboard-zh-hans")
    with page.expect_navigation():
        page.select_option("form.lang-switch select", "en")
    assert "Dashboard" in page.locator("header nav").inner_text()
    shot(page, "dashboard-en")
