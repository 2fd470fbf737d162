"""``/api/v1/directory-rules/`` (issue 21 item 3): every persona against every method, bad input
as 400 with nothing written, and a rule's effect on the users the directory last listed."""

import pytest
from django.urls import reverse

from portal.directory import DirectoryIdentity, apply_identity
from portal.models import DirectoryRule, Membership

pytestmark = pytest.mark.django_db
PERSONAS = ("platform", "auditor", "a_admin", "b_admin", "a_finance", "b_finance", "pa1_admin",
            "pa1_member", "pb_member", "outsider")
GROUP = "cn=vision,ou=groups,dc=centre,dc=example"


@pytest.fixture
def rule(world):
    return DirectoryRule.objects.create(directory="ldap", group=GROUP, role="member", project=world.pa1)


def _alice(groups=(GROUP,)):
    return apply_identity(DirectoryIdentity(directory="ldap", subject="uid=alice", username="alice",
                                            groups=frozenset(groups)))


# persona -> (list/get status, create, patch, delete). Readers who may not write get 403; who does
# not see rules at all gets 404 on a rule (its existence is not disclosed) and 403 on create.
EXPECTED = {p: (404, 403, 404, 404) for p in PERSONAS}
EXPECTED["platform"] = (200, 201, 200, 204)
EXPECTED["auditor"] = (200, 403, 403, 403)


@pytest.mark.parametrize("persona", PERSONAS)
def test_every_persona_against_every_method(world, api, rule, persona):
    read, create, patch, delete = EXPECTED[persona]
    client = api(world.users[persona])
    detail = reverse("api:directoryrule-detail", args=[rule.pk])
    listed = client.get(reverse("api:directoryrule-list")).json()["results"]
    assert [r["id"] for r in listed] == ([rule.pk] if read == 200 else [])
    assert client.get(detail).status_code == read
    body = {"directory": "oidc", "group": "gpu-users", "role": "member", "project": world.pa1.pk}
    assert client.post(reverse("api:directoryrule-list"), body, format="json").status_code == create
    assert client.patch(detail, {"group": "cn=other"}, format="json").status_code == patch
    assert DirectoryRule.objects.get(pk=rule.pk).group == ("cn=other" if patch == 200 else GROUP)
    assert client.delete(detail).status_code == delete
    assert DirectoryRule.objects.filter(pk=rule.pk).exists() == (delete != 204)
    assert DirectoryRule.objects.filter(group="gpu-users").exists() == (create == 201)


def test_anonymous_is_refused(world, api, rule):
    assert api(None).get(reverse("api:directoryrule-list")).status_code in (401, 403)
    assert api(None).delete(reverse("api:directoryrule-detail", args=[rule.pk])).status_code in (401, 403)
    assert DirectoryRule.objects.filter(pk=rule.pk).exists()


def test_a_created_rule_gives_the_role_and_shows_its_user_count(world, api):
    alice = _alice()
    client = api(world.users["platform"])
    body = {"directory": "ldap", "group": GROUP.upper(), "role": "project_admin", "project": world.pa1.pk}
    created = client.post(reverse("api:directoryrule-list"), body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["users"] == 1 and created.json()["created_by"] == "platform"
    membership = Membership.objects.get(user=alice)
    shown = client.get(reverse("api:membership-detail", args=[membership.pk])).json()
    assert (shown["rule"], shown["rule_group"]) == (created.json()["id"], GROUP.upper())
    refused = client.delete(reverse("api:membership-detail", args=[membership.pk]))
    assert refused.status_code == 400 and "managed by the directory" in refused.json()["detail"]
    listed = client.get(reverse("api:directoryrule-list")).json()["results"]
    assert [r["users"] for r in listed] == [1]
    assert client.delete(reverse("api:directoryrule-detail", args=[created.json()["id"]])).status_code == 204
    assert not Membership.objects.filter(user=alice).exists()


BAD = [
    ({"project": 999999}, "project"),  # unknown project
    ({"role": "department_admin"}, "department"),  # role and scope do not match
    ({"role": "platform_admin"}, "role"),
    ({"role": "emperor"}, "role"),
    ({"directory": "local"}, "directory"),
    ({"group": "x" * 501}, "group"),
    ({"group": ""}, "group"),
    ({"group": GROUP}, "group"),  # the fixture's rule again
    ({"group": " CN=Vision, OU=groups, DC=centre, DC=example "}, "group"),  # the same DN, as LDAP reads it
    ({"department": "nope"}, "department"),
]


@pytest.mark.parametrize(("change", "field"), BAD)
def test_bad_input_is_a_400_and_nothing_is_written(world, api, rule, change, field):
    _alice(groups=[GROUP, "cn=x"])
    body = {"directory": "ldap", "group": "cn=x", "role": "member", "project": world.pa1.pk, **change}
    before = (DirectoryRule.objects.count(), Membership.objects.count())
    response = api(world.users["platform"]).post(reverse("api:directoryrule-list"), body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert (DirectoryRule.objects.count(), Membership.objects.count()) == before


def test_a_bad_patch_is_a_400_and_changes_nothing(world, api, rule):
    client = api(world.users["platform"])
    url = reverse("api:directoryrule-detail", args=[rule.pk])
    for body in ({"role": "finance"}, {"group": "y" * 10_000}, {"project": 999999}):
        assert client.patch(url, body, format="json").status_code == 400, body
    rule.refresh_from_db()
    assert (rule.group, rule.role, rule.project_id) == (GROUP, "member", world.pa1.pk)
