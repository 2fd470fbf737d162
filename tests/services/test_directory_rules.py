"""Directory rules edited by platform admins (issue 21 item 3): a new rule gives its role at once
to the users the directory last listed in its group, a changed rule moves the role, a deleted rule
takes back exactly the roles it gave — hand-given roles stay, and only platform admins write."""

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import translation

from portal.directory import (
    DirectoryIdentity,
    apply_identity,
    directory_rule_create,
    directory_rule_delete,
    directory_rule_update,
)
from portal.models import DirectoryRule, Membership, Role, User
from portal.selectors import scope_for
from portal.services import membership_delete

pytestmark = pytest.mark.django_db
VISION = "cn=vision,ou=groups,dc=centre,dc=example"
NLP = "cn=nlp,ou=groups,dc=centre,dc=example"


def _sign_in(name, groups, directory="ldap"):
    return apply_identity(DirectoryIdentity(
        directory=directory, subject=f"uid={name},ou=people", username=name, groups=frozenset(groups)))


def _roles(user):
    return set(Membership.objects.filter(user=user).values_list("role", "project__code", "rule__group"))


def test_the_groups_last_seen_are_kept_normalised(world):
    user = _sign_in("alice", ["CN=Vision, OU=groups, DC=centre, DC=example"])
    assert user.directory_groups == [VISION]
    assert _sign_in("alice", []).directory_groups == []


def test_a_new_rule_gives_its_role_at_once_to_known_members_of_the_group(world):
    alice, bob = _sign_in("alice", [VISION]), _sign_in("bob", [NLP])
    legacy = User.objects.create_user(username="carol", directory="ldap")  # groups never seen
    rule = directory_rule_create(actor=world.users["platform"], directory="ldap",
                                 group="CN=Vision,OU=groups,DC=centre,DC=example", role=Role.MEMBER,
                                 project=world.pa1)
    assert _roles(alice) == {("member", "pa1", rule.group)}
    assert _roles(bob) == set() and _roles(legacy) == set()
    assert world.pa1.pk in scope_for(User.objects.get(pk=alice.pk)).member_projects


def test_deleting_a_rule_takes_back_its_roles_but_not_hand_given_ones(world):
    alice = _sign_in("alice", [VISION])
    platform = world.users["platform"]
    rule = directory_rule_create(actor=platform, directory="ldap", group=VISION, role=Role.MEMBER,
                                 project=world.pa1)
    admin = directory_rule_create(actor=platform, directory="ldap", group=VISION, role=Role.PROJECT_ADMIN,
                                  project=world.pa1)
    hand = Membership.objects.create(user=alice, role=Role.MEMBER, project=world.pa)
    directory_rule_delete(actor=platform, rule=rule)
    assert _roles(alice) == {("project_admin", "pa1", VISION), ("member", "pa", None)}
    directory_rule_delete(actor=platform, rule=admin)
    assert _roles(alice) == {("member", "pa", None)}
    assert Membership.objects.filter(pk=hand.pk).exists()


def test_deleting_one_of_two_rules_giving_the_same_role_keeps_the_role(world):
    alice = _sign_in("alice", [VISION, NLP])
    platform = world.users["platform"]
    first = directory_rule_create(actor=platform, directory="ldap", group=VISION, role=Role.MEMBER,
                                  project=world.pa1)
    directory_rule_create(actor=platform, directory="ldap", group=NLP, role=Role.MEMBER, project=world.pa1)
    assert _roles(alice) == {("member", "pa1", VISION)}
    directory_rule_delete(actor=platform, rule=first)
    assert _roles(alice) == {("member", "pa1", NLP)}  # the other rule gives it now


def test_changing_a_rule_moves_the_role(world):
    alice, bob = _sign_in("alice", [VISION]), _sign_in("bob", [NLP])
    platform = world.users["platform"]
    rule = directory_rule_create(actor=platform, directory="ldap", group=VISION, role=Role.MEMBER,
                                 project=world.pa1)
    directory_rule_update(actor=platform, rule=rule, project=world.pb)
    assert _roles(alice) == {("member", "pb", VISION)}
    directory_rule_update(actor=platform, rule=rule, group=NLP)
    assert _roles(alice) == set() and _roles(bob) == {("member", "pb", NLP)}


def test_a_role_held_by_hand_stays_a_hand_given_role(world):
    alice = _sign_in("alice", [VISION])
    Membership.objects.create(user=alice, role=Role.MEMBER, project=world.pa1)
    rule = directory_rule_create(actor=world.users["platform"], directory="ldap", group=VISION,
                                 role=Role.MEMBER, project=world.pa1)
    assert _roles(alice) == {("member", "pa1", None)}
    directory_rule_delete(actor=world.users["platform"], rule=rule)
    assert _roles(alice) == {("member", "pa1", None)}


def test_a_rule_given_role_cannot_be_removed_by_hand(world):
    alice = _sign_in("alice", [VISION])
    directory_rule_create(actor=world.users["platform"], directory="ldap", group=VISION, role=Role.MEMBER,
                          project=world.pa1)
    membership = Membership.objects.get(user=alice)
    refused = pytest.raises(ValidationError, match=f"managed by the directory .*{VISION}")
    with translation.override("en"), refused:
        membership_delete(actor=world.users["a_admin"], membership=membership)
    assert Membership.objects.filter(pk=membership.pk).exists()


@pytest.mark.parametrize("persona", ["auditor", "a_admin", "pa1_admin", "pa1_member", "outsider"])
def test_only_platform_admins_write_rules(world, persona):
    actor = world.users[persona]
    rule = DirectoryRule.objects.create(directory="ldap", group=VISION, role=Role.MEMBER, project=world.pa1)
    with pytest.raises(PermissionDenied):
        directory_rule_create(actor=actor, directory="ldap", group=NLP, role=Role.MEMBER, project=world.pa1)
    with pytest.raises(PermissionDenied):
        directory_rule_update(actor=actor, rule=rule, group=NLP)
    with pytest.raises(PermissionDenied):
        directory_rule_delete(actor=actor, rule=rule)
    assert list(DirectoryRule.objects.values_list("group", flat=True)) == [VISION]


@pytest.mark.parametrize(("fields", "error"), [
    ({"role": Role.MEMBER}, "project"),  # a project role without a project
    ({"role": Role.MEMBER, "department": "A"}, "project"),
    ({"role": Role.DEPARTMENT_ADMIN, "project": "pa1"}, "department"),
    ({"role": Role.AUDITOR, "project": "pa1"}, "role"),
    ({"role": Role.MEMBER, "project": "pa1", "group": "  "}, "group"),
    ({"role": Role.MEMBER, "project": "pa1", "group": "x" * 501}, "group"),
    ({"role": Role.MEMBER, "project": "pa1", "directory": "local"}, "directory"),
    ({"role": "emperor", "project": "pa1"}, "role"),
    # The same rule again, as LDAP compares DNs: case and spaces do not make it another.
    ({"role": Role.MEMBER, "project": "pa1", "group": "CN=Vision, OU=groups,DC=centre,DC=example"}, "group"),
])
def test_bad_rules_are_refused_and_nothing_is_written(world, fields, error):
    directory_rule_create(actor=world.users["platform"], directory="ldap", group=VISION, role=Role.MEMBER,
                          project=world.pa1)
    args = {"directory": "ldap", "group": NLP, **fields}
    for name in ("project", "department"):
        if name in args:
            args[name] = getattr(world, args[name])
    before = (DirectoryRule.objects.count(), Membership.objects.count())
    with pytest.raises(ValidationError) as caught:
        directory_rule_create(actor=world.users["platform"], **args)
    assert error in caught.value.message_dict
    assert (DirectoryRule.objects.count(), Membership.objects.count()) == before
