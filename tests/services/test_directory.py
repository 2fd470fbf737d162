"""Directory identities (DESIGN §12): rules give roles and take them back, hand-given roles stay,
a disabled directory user is deactivated — sessions end, tokens answer 401, nothing is submitted."""

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client

from jobs.services import job_submit
from jobs.states import JobState
from portal.directory import DirectoryIdentity, apply_identity, sync_directory
from portal.models import ApiToken, DirectoryRule, Membership, Role
from tests import factories as fx

pytestmark = pytest.mark.django_db
GROUP = "cn=vision,ou=groups,dc=centre,dc=example"


@pytest.fixture
def tree():
    f, proj = fx.single_project_pool()
    fx.priority()
    DirectoryRule.objects.create(directory="ldap", group=GROUP, role=Role.MEMBER, project=proj)
    return f, proj


def _alice(groups=(GROUP,), active=True):
    return DirectoryIdentity(
        directory="ldap", subject="uid=alice,ou=people,dc=centre,dc=example", username="alice",
        unix_name="alice1", email="alice@centre.example", display_name="Alice", groups=frozenset(groups),
        active=active,
    )


def test_rules_give_roles_and_take_them_back_but_hand_given_roles_stay(tree):
    _f, proj = tree
    # Group DNs compare as LDAP does: case and spaces after commas do not matter.
    user = apply_identity(_alice(groups=["CN=Vision, OU=groups, DC=centre, DC=example"]))
    assert (user.unix_name, user.directory, user.has_usable_password()) == ("alice1", "ldap", False)
    ruled = Membership.objects.get(user=user, project=proj, role=Role.MEMBER)
    assert ruled.rule is not None
    manual = Membership.objects.create(user=user, project=proj, role=Role.PROJECT_ADMIN)
    apply_identity(_alice(groups=[]))
    assert not Membership.objects.filter(pk=ruled.pk).exists()
    assert Membership.objects.filter(pk=manual.pk).exists()  # given by hand: stays


def test_a_disabled_user_loses_sessions_tokens_and_submissions(tree):
    f, proj = tree
    user = apply_identity(_alice())
    token = fx.api_token(user)
    browser = Client()
    browser.force_login(user)
    assert browser.get("/api/v1/jobs/").status_code == 200
    apply_identity(_alice(active=False))
    user.refresh_from_db()
    assert not user.is_active and user.deactivated_reason == "disabled in ldap"
    assert browser.get("/api/v1/jobs/").status_code in (401, 403)
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
    assert not ApiToken.objects.filter(user=user, revoked_at__isnull=True).exists()
    with pytest.raises(PermissionDenied):
        job_submit(actor=user, project=proj, name="x", kind="training", flavor=f,
                   priority_class=fx.priority(), image="pytorch:2.3", gpus_per_worker=1)


def test_a_complete_sync_deactivates_users_gone_and_stops_their_jobs(
    tree, django_capture_on_commit_callbacks, settings
):
    settings.GPUPOOL = {**settings.GPUPOOL, "DEPROVISION_JOBS": "stop"}
    f, proj = tree
    user = apply_identity(_alice())
    job = job_submit(actor=user, project=proj, name="x", kind="training", flavor=f,
                     priority_class=fx.priority(), image="pytorch:2.3", gpus_per_worker=1)
    with django_capture_on_commit_callbacks(execute=True):
        report = sync_directory("ldap", [], complete=True)
    assert report.deactivated == 1
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
