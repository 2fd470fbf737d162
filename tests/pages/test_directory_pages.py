"""The directory pages (issue 21): the rules page (add, change, delete, user counts), the user
page (directory, Unix name, last seen, deactivation; roles from a rule marked and kept), and bad
input as form errors with nothing written."""

import pytest
from django.urls import reverse

from portal.directory import DirectoryIdentity, apply_identity, deactivate_user
from portal.models import DirectoryRule, Membership

pytestmark = pytest.mark.django_db
GROUP = "cn=vision,ou=groups,dc=centre,dc=example"


def _alice(groups=(GROUP,)):
    return apply_identity(DirectoryIdentity(directory="ldap", subject="uid=alice,ou=people", username="alice",
                                            unix_name="alice1", display_name="Alice Liddell",
                                            groups=frozenset(groups)))


def _form(world, **change):
    return {"directory": "ldap", "group": GROUP, "role": "member", "project": world.pa1.pk, "department": "",
            **change}


def test_a_platform_admin_adds_a_rule_and_sees_how_many_users_it_gives_the_role(world, page_client):
    alice = _alice()
    client = page_client("platform")
    response = client.post(reverse("directory-rule-new"), _form(world), follow=True)
    assert "it gives its role to 1 user now" in response.content.decode()
    rule = DirectoryRule.objects.get()
    assert Membership.objects.get(user=alice).rule == rule
    page = client.get(reverse("directory-rule-list")).content.decode()
    assert GROUP in page and 'class="num users">1<' in page and "Project a1" in page
    assert reverse("directory-rule-edit", args=[rule.pk]) in page


def test_the_auditor_reads_the_rules_without_the_buttons(world, page_client):
    rule = DirectoryRule.objects.create(directory="oidc", group="gpu-users", role="member", project=world.pa1)
    page = page_client("auditor").get(reverse("directory-rule-list")).content.decode()
    assert "gpu-users" in page
    assert reverse("directory-rule-edit", args=[rule.pk]) not in page
    assert reverse("directory-rule-new") not in page


def test_changing_and_deleting_a_rule_moves_and_takes_back_the_role(world, page_client):
    alice = _alice()
    client = page_client("platform")
    client.post(reverse("directory-rule-new"), _form(world))
    rule = DirectoryRule.objects.get()
    edit = client.get(reverse("directory-rule-edit", args=[rule.pk])).content.decode()
    assert GROUP in edit
    response = client.post(reverse("directory-rule-edit", args=[rule.pk]), _form(world, project=world.pb.pk))
    assert response.status_code == 302
    assert Membership.objects.get(user=alice).project == world.pb
    assert client.get(reverse("directory-rule-delete", args=[rule.pk])).status_code == 302  # GET: nothing
    assert DirectoryRule.objects.exists()
    done = client.post(reverse("directory-rule-delete", args=[rule.pk]), follow=True).content.decode()
    assert "was deleted, and the roles it gave with it" in done
    assert not Membership.objects.filter(user=alice).exists()


BAD = [
    ({"project": 999999}, "project"),  # unknown project
    ({"role": "department_admin"}, "department"),  # role and scope do not match
    ({"role": "auditor"}, "role"),
    ({"group": "x" * 501}, "group"),
    ({"group": "   "}, "group"),
    ({"directory": "local"}, "directory"),
    ({"group": "CN=Vision, OU=groups, DC=centre, DC=example"}, "group"),  # a duplicate, as LDAP reads it
]


@pytest.mark.parametrize(("change", "field"), BAD)
def test_bad_input_is_a_form_error_and_nothing_is_written(world, page_client, change, field):
    _alice(groups=[GROUP, "cn=x"])
    DirectoryRule.objects.create(directory="ldap", group=GROUP, role="member", project=world.pa1)
    before = (DirectoryRule.objects.count(), Membership.objects.count())
    response = page_client("platform").post(reverse("directory-rule-new"),
                                            _form(world, group="cn=x", **change) if "group" not in change
                                            else _form(world, **change))
    assert response.status_code == 200
    assert field in response.context["form"].errors, response.context["form"].errors
    assert (DirectoryRule.objects.count(), Membership.objects.count()) == before


def test_the_user_page_shows_the_identity_and_where_each_role_comes_from(world, page_client):
    alice = _alice()
    rule = DirectoryRule.objects.create(directory="ldap", group=GROUP, role="member", project=world.pa1)
    _alice()  # signs in again: the rule gives the role
    hand = Membership.objects.create(user=alice, role="member", project=world.pa)
    ruled = Membership.objects.get(rule=rule)
    client = page_client("platform")
    page = client.get(reverse("user-detail", args=[alice.pk])).content.decode()
    assert "LDAP" in page and "alice1" in page and "Alice Liddell" in page
    assert f"from directory group {GROUP}" in page and "Managed by the directory" in page
    assert reverse("membership-remove", args=[hand.pk]) in page
    assert reverse("membership-remove", args=[ruled.pk]) not in page
    refused = client.post(reverse("membership-remove", args=[ruled.pk]), follow=True).content.decode()
    assert "managed by the directory" in refused and Membership.objects.filter(pk=ruled.pk).exists()
    removed = client.post(reverse("membership-remove", args=[hand.pk]), follow=True).content.decode()
    assert "was removed" in removed and not Membership.objects.filter(pk=hand.pk).exists()
    deactivate_user(alice, reason="disabled in ldap")
    page = client.get(reverse("user-detail", args=[alice.pk])).content.decode()
    assert "Deactivated" in page and "disabled in ldap" in page
    listed = client.get(reverse("user-list") + "?q=alice").content.decode()
    assert "alice1" in listed and "deactivated" in listed and "pa1_member" not in listed


def test_the_pages_speak_chinese(world, page_client):
    alice = _alice()
    DirectoryRule.objects.create(directory="ldap", group=GROUP, role="member", project=world.pa1)
    _alice()
    client = page_client("platform", language="zh-hans")
    rules = client.get(reverse("directory-rule-list")).content.decode()
    assert "目录规则" in rules
    user = client.get(reverse("user-detail", args=[alice.pk])).content.decode()
    assert f"来自目录组 {GROUP}" in user and "Unix 用户名" in user


def test_item2_the_user_search_searches_what_was_typed_whole(world, page_client):
    """The server cut the search at 150 characters without a word (issue 32 item 2): a longer
    search is searched whole, so it finds nobody rather than whoever matches its first 150."""
    from portal.models import User

    user = User.objects.create_user(username="q" * 150)
    link = reverse("user-detail", args=[user.pk])
    client = page_client("platform")
    assert link in client.get(reverse("user-list"), {"q": "q" * 150}).content.decode()
    assert link not in client.get(reverse("user-list"), {"q": "q" * 151}).content.decode()
