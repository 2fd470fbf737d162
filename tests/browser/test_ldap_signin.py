"""Signing in through the real OpenLDAP (slapd) in a real browser: the user lands on the dashboard
with the role their directory group maps to (DESIGN §12)."""

from types import SimpleNamespace

import pytest

from portal.models import DirectoryRule, Membership, Role, User
from tests import factories as fx
from tests.ldap_server import point_portal_at, slapd, unique  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.ldap, pytest.mark.django_db(transaction=True)]


def test_an_ldap_user_signs_in_and_lands_with_the_roles_of_their_groups(
    slapd, settings, browser_for, shot  # noqa: F811
):
    point_portal_at(settings, slapd)
    _f, proj = fx.single_project_pool()
    uid, group = unique("web"), unique("team")
    rule = DirectoryRule.objects.create(directory="ldap", group=slapd.add_group(group), role=Role.MEMBER,
                                        project=proj)
    slapd.add_person(uid, "pw-" + uid, groups=[group])
    page = browser_for(SimpleNamespace(username=uid), "pw-" + uid, lang="en")
    assert f"{uid.title()} Example" in page.locator("header").inner_text()
    shot(page, "ldap-signed-in")
    user = User.objects.get(username=uid)
    assert user.directory == "ldap"
    assert Membership.objects.filter(user=user, project=proj, role=Role.MEMBER, rule=rule).exists()
