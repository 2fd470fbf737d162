"""A directory user's name that belongs to another portal user (DESIGN §12): a local break-glass
admin is never taken over, a user created by hand is adopted, and a sync skips the conflict."""

import pytest

from portal.directory import DirectoryConflict, DirectoryIdentity, apply_identity, sync_directory
from portal.models import User
from tests import factories as fx

pytestmark = pytest.mark.django_db


def _ident(username="root", subject="sub-root", directory="oidc"):
    return DirectoryIdentity(directory=directory, subject=subject, username=username)


def test_a_local_admin_is_never_taken_over():
    admin = fx.platform_admin("root")
    admin.is_superuser = True
    admin.save()
    with pytest.raises(DirectoryConflict):
        apply_identity(_ident())
    admin.refresh_from_db()
    assert (admin.directory, admin.directory_subject) == ("local", "")


def test_a_user_of_another_directory_keeps_their_name():
    ldap_user = apply_identity(_ident(subject="uid=root,dc=x", directory="ldap"))
    with pytest.raises(DirectoryConflict):
        apply_identity(_ident())
    assert User.objects.get(username="root") == ldap_user


def test_a_plain_user_made_by_hand_is_adopted():
    made = User.objects.create_user("carol", password="pw-carol-123")
    assert apply_identity(_ident(username="carol", subject="sub-carol")).pk == made.pk
    made.refresh_from_db()
    assert (made.directory, made.directory_subject) == ("oidc", "sub-carol")


def test_a_sync_skips_a_conflicting_user_and_goes_on():
    User.objects.filter(pk=fx.platform_admin("root").pk).update(is_staff=True)
    report = sync_directory("oidc", [_ident(), _ident(username="dave", subject="sub-dave")], complete=False)
    assert report.created == 1 and User.objects.filter(username="dave", directory="oidc").exists()
