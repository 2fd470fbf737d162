"""Directory rules in a real browser (issue 21 item 3): a platform admin opens "More → Directory
rules", adds a rule for an LDAP group, sees it listed with the one known user it gives the role
to, finds the role on that user's page marked as from the group, and deletes the rule after the
confirmation — the role is gone."""

import pytest

from portal.directory import DirectoryIdentity, apply_identity
from portal.models import DirectoryRule, Membership

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
GROUP = "cn=vision,ou=groups,dc=centre,dc=example"


def test_a_platform_admin_adds_a_rule_and_sees_it_listed(world, browser_for, shot):
    alice = apply_identity(DirectoryIdentity(
        directory="ldap", subject="uid=alice,ou=people", username="alice", unix_name="alice1",
        groups=frozenset([GROUP])))
    page = browser_for(world.users["platform"], "pw-platform")
    page.click("details.nav-more summary")
    page.click("a.nav-directory-rules")
    page.wait_for_url("**/directory-rules/")
    assert "No directory rules" in page.inner_text("table.directory-rules")
    page.click("a.new-rule")
    page.wait_for_url("**/directory-rules/new/")
    page.select_option("select[name=directory]", "ldap")
    page.fill("input[name=group]", "CN=Vision, OU=groups, DC=centre, DC=example")
    page.select_option("select[name=role]", "member")
    page.select_option("select[name=project]", label="Project a1 (pa1)")
    with page.expect_navigation():
        page.click("form.directory-rule-form button[type=submit]")
    assert "it gives its role to 1 user now" in page.inner_text("article.message.success")
    rule = DirectoryRule.objects.get()
    row = page.locator(f"#rule-{rule.pk}")
    assert "CN=Vision, OU=groups" in row.inner_text() and "Project a1" in row.inner_text()
    assert row.locator("td.users").inner_text() == "1"
    shot(page, "directory-rules")

    page.goto(f"{page.base}/users/{alice.pk}/")
    source = page.inner_text(f"#membership-{Membership.objects.get(user=alice).pk}")
    assert "from directory group CN=Vision" in source and "Managed by the directory" in source
    assert page.inner_text("dd.unix-name") == "alice1"

    page.goto(f"{page.base}/directory-rules/")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.locator(f"#rule-{rule.pk} button[type=submit]").click()
    assert "was deleted" in page.inner_text("article.message.success")
    assert not Membership.objects.filter(user=alice).exists()
