"""The directory sync at scale (issue 32 item 23): a resync of an unchanged directory writes
nothing and says so, and a sync's statements do not grow with its users — while keeping every
rule of apply_identity: roles given by hand stay, disabled users are deactivated, a hand-made
local user is adopted, a break-glass admin's name is a conflict."""

import pytest
from django.db import connection
from django.db.models.signals import post_save
from django.test.utils import CaptureQueriesContext

from portal.directory import DirectoryIdentity, sync_directory
from portal.models import Department, DirectoryRule, Membership, Project, Role, User

pytestmark = pytest.mark.django_db
WRITES = ("INSERT", "UPDATE", "DELETE")


def _group(n: int) -> str:
    return f"cn=group{n},ou=groups,dc=centre,dc=example"


@pytest.fixture
def rules():
    """Four groups: 0 and 1 make members of p0, 2 of p1, 3 department admins of d0."""
    dept = Department.objects.create(code="d0", name="d0")
    p0, p1 = (Project.objects.create(code=f"p{i}", name=f"p{i}", department=dept) for i in range(2))
    for group, scope in [(0, {"project": p0}), (1, {"project": p0}), (2, {"project": p1})]:
        DirectoryRule.objects.create(directory="ldap", group=_group(group), role=Role.MEMBER, **scope)
    DirectoryRule.objects.create(directory="ldap", group=_group(3), role=Role.DEPARTMENT_ADMIN,
                                 department=dept)
    return p0, p1, dept


def _person(n: int, prefix: str = "u", **changes) -> DirectoryIdentity:
    fields = {
        "directory": "ldap", "subject": f"uid={prefix}{n},ou=people,dc=centre,dc=example",
        "username": f"{prefix}{n}", "unix_name": f"{prefix}{n}", "email": f"{prefix}{n}@centre.example",
        "display_name": f"User {n}", "groups": frozenset({_group(n % 4), _group((n + 1) % 4)}),
        "active": n % 10 != 9,  # every tenth is disabled in the directory
    }
    return DirectoryIdentity(**{**fields, **changes})


def _listing(count: int, prefix: str = "u") -> list[DirectoryIdentity]:
    return [_person(n, prefix) for n in range(count)]


def _writes(queries) -> list[str]:
    return [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith(WRITES)]


def test_item23_a_resync_with_nothing_changed_writes_nothing(rules):
    p0, _p1, _dept = rules
    User.objects.create_user("u0", password="pw-by-hand-0")  # adopted at the first sync
    first = sync_directory("ldap", _listing(30), complete=True)
    assert (first.created, first.updated, first.conflicts) == (26, 1, 0)  # 27 active; u0 adopted
    u4 = User.objects.get(username="u4")
    hand = Membership.objects.create(user=u4, role=Role.PROJECT_ADMIN, project=p0)
    synced = dict(User.objects.values_list("username", "directory_synced_at"))

    with CaptureQueriesContext(connection) as queries:
        again = sync_directory("ldap", _listing(30), complete=True)

    assert again.as_dict() == {"created": 0, "updated": 0, "deactivated": 0, "roles_added": 0,
                               "roles_removed": 0, "conflicts": 0}
    assert _writes(queries.captured_queries) == []
    assert dict(User.objects.values_list("username", "directory_synced_at")) == synced
    assert Membership.objects.filter(pk=hand.pk).exists()


def test_item23_a_resync_writes_only_the_users_that_changed(rules):
    p0, _p1, dept = rules
    sync_directory("ldap", _listing(30), complete=True)
    u1 = User.objects.get(username="u1")  # groups 1 and 2: member of p0 and p1 by rules
    hand = Membership.objects.create(user=u1, role=Role.PROJECT_ADMIN, project=p0)
    listing = _listing(30)
    listing[1] = _person(1, groups=frozenset({_group(3)}))  # left groups 1 and 2, joined 3
    listing[2] = _person(2, email="new@centre.example")
    listing[3] = _person(3, active=False)

    with CaptureQueriesContext(connection) as queries:
        report = sync_directory("ldap", listing, complete=True)

    assert (report.created, report.updated, report.deactivated) == (0, 2, 1)
    assert (report.roles_added, report.roles_removed) == (1, 2)
    updates = [sql for sql in _writes(queries.captured_queries) if sql.startswith('UPDATE "portal_user"')]
    assert len(updates) == 3  # u1's groups and u2's mail (one statement each), u3 deactivated
    assert User.objects.get(username="u2").email == "new@centre.example"
    assert not User.objects.get(username="u3").is_active
    roles = set(Membership.objects.filter(user=u1).values_list("role", "project_id", "department_id", "rule"))
    rule3 = DirectoryRule.objects.get(group=_group(3)).pk
    assert roles == {(Role.PROJECT_ADMIN, p0.pk, None, None), (Role.DEPARTMENT_ADMIN, None, dept.pk, rule3)}
    assert Membership.objects.filter(pk=hand.pk, rule=None).exists()  # given by hand: stays


def _count_sync(listing: list[DirectoryIdentity]) -> int:
    with CaptureQueriesContext(connection) as queries:
        sync_directory("ldap", listing, complete=True)
    return len(queries.captured_queries)


def test_item23_a_syncs_statements_do_not_grow_with_its_users(rules):
    counts = {}
    for size in (10, 50):
        User.objects.filter(directory="ldap").delete()  # their roles go with them
        counts[size] = (_count_sync(_listing(size)), _count_sync(_listing(size)))  # first, then a resync
        # groups 0 and 1 both make members of p0: one role; any other two consecutive groups, two
        roles = sum(1 if n % 4 == 0 else 2 for n in range(size) if _person(n).active)
        assert Membership.objects.filter(rule__isnull=False).count() == roles
    assert counts[10] == counts[50], counts


def test_a_sync_keeps_the_directory_rules_for_names_and_adoption(rules):
    admin = User.objects.create_superuser("u5", password="break-glass")
    made = User.objects.create_user("u6", password="pw-by-hand-6")
    report = sync_directory("ldap", _listing(8), complete=False)
    assert report.conflicts == 1 and report.created == 6
    admin.refresh_from_db()
    assert (admin.directory, admin.check_password("break-glass")) == ("local", True)
    made.refresh_from_db()
    assert (made.directory, made.has_usable_password(), made.unix_name) == ("ldap", False, "u6")
    assert made.directory_groups == sorted({_group(2), _group(3)})


def test_a_user_re_enabled_in_the_directory_comes_back_at_the_next_sync(rules):
    sync_directory("ldap", _listing(3), complete=True)
    sync_directory("ldap", _listing(3)[:2], complete=True)
    gone = User.objects.get(username="u2")
    assert not gone.is_active and gone.deactivated_reason == "no longer in ldap"
    report = sync_directory("ldap", _listing(3), complete=True)
    gone.refresh_from_db()
    assert (report.updated, gone.is_active, gone.deactivated_at) == (1, True, None)


def test_roles_a_sync_gives_still_reach_the_membership_listeners(rules):
    heard = []

    def listener(sender, **kwargs):
        heard.append(kwargs["instance"])

    post_save.connect(listener, sender=Membership, dispatch_uid="test-item23-listener")
    try:
        sync_directory("ldap", _listing(5), complete=True)
        assert heard and all(isinstance(m, Membership) and m.pk for m in heard)
        heard.clear()
        sync_directory("ldap", _listing(5), complete=True)
        assert heard == []  # nothing changed: nothing to tell
    finally:
        post_save.disconnect(listener, sender=Membership, dispatch_uid="test-item23-listener")
