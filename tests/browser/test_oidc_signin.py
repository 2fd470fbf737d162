"""Sign-in through the centre's OpenID Connect provider in a real browser (DESIGN §12): the
provider's own login page (deploy/oidc/provider.mjs, npm's oidc-provider), the roles its groups
claim maps to, sign-out at the provider too, a group left and an account disabled there."""

import pytest

from portal.models import DirectoryRule, Membership, Role, User
from tests import factories as fx
from tests.oidc_provider import (
    ALICE,
    oidc_provider,  # noqa: F401 (a fixture)
    portal_settings,
)
from tests.waiting import TIMEOUT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _sign_in_at_provider(page, portal: str, provider, password: str = ALICE["password"]):
    page.goto(f"{portal}/accounts/login/")
    page.click("a.oidc-sign-in")
    page.wait_for_url(f"{provider.issuer}/interaction/**")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")


def _sign_out(page, portal: str, provider):
    page.click("header form[action='/accounts/logout/'] button")
    # The provider asks whether to end its session too (RP-initiated logout), then sends us back.
    page.wait_for_url(f"{provider.issuer}/session/end**")
    page.click("button[name=logout][value=yes]")
    page.wait_for_url(f"{portal}/accounts/login/")


def test_sign_in_through_the_provider_groups_give_roles_and_leaving_takes_them(
    chromium, live_server, settings, oidc_provider, shot  # noqa: F811
):
    portal = live_server.url
    provider = oidc_provider(portal)
    portal_settings(settings, provider)
    _f, proj = fx.single_project_pool()
    DirectoryRule.objects.create(directory="oidc", group="vision-lab", role=Role.PROJECT_ADMIN, project=proj)
    context = chromium.new_context(locale="en")
    context.set_default_timeout(TIMEOUT * 1000)
    page = context.new_page()
    blocked = []
    page.on("console", lambda msg: "Content Security Policy" in msg.text and blocked.append(msg.text))
    try:
        _sign_in_at_provider(page, portal, provider)
        page.wait_for_url(f"{portal}/")
        shot(page, "oidc-signed-in")
        assert "Project admin" in page.locator("main").inner_text()  # the dashboard's "Your roles"
        user = User.objects.get(username="alice")
        assert (user.directory, user.unix_name) == ("oidc", "alice1")
        given = Membership.objects.filter(user=user, project=proj, role=Role.PROJECT_ADMIN)
        assert given.get().rule is not None

        provider.change("alice", groups=["gpu-users"])  # left vision-lab at the provider
        _sign_out(page, portal, provider)
        _sign_in_at_provider(page, portal, provider)  # the provider's session ended: its login page again
        page.wait_for_url(f"{portal}/")
        assert not Membership.objects.filter(user=user, role=Role.PROJECT_ADMIN).exists()
        assert "Project admin" not in page.locator("main").inner_text()

        _sign_out(page, portal, provider)
        provider.change("alice", disabled=True)
        _sign_in_at_provider(page, portal, provider)
        page.get_by_text("This account is disabled.").wait_for()
        shot(page, "oidc-disabled-at-provider")
        assert page.url.startswith(provider.issuer)
        page.goto(f"{portal}/")
        page.wait_for_url(f"{portal}/accounts/login/**")  # not signed in to the portal
    finally:
        context.close()
    assert not blocked, blocked
