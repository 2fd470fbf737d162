"""Sign-in through a real OpenLDAP (slapd) and the periodic sync (DESIGN §12): users land with the
roles their groups map to; leaving a group, being disabled or deleted in the directory takes effect
at the next sync; wrong passwords and a stopped directory are clear refusals that create nothing,
and never lock out the local break-glass admin."""

import subprocess
import tempfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from portal.ldap_sync import LdapSyncError, sync_ldap
from portal.models import DirectoryRule, Membership, Role, User
from tests import factories as fx
from tests.ldap_server import point_portal_at, slapd, start_slapd, unique  # noqa: F401

pytestmark = [pytest.mark.ldap, pytest.mark.django_db]


@pytest.fixture
def ldap_on(settings, slapd):  # noqa: F811
    point_portal_at(settings, slapd)
    return slapd


@pytest.fixture
def project():
    _f, proj = fx.single_project_pool()
    return proj


def _person_in_group(server, project, role=Role.MEMBER):
    """A fresh directory user in a fresh group, and the rule mapping the group to ``role``."""
    uid, group = unique("u"), unique("g")
    dn_group = server.add_group(group)
    server.add_person(uid, "pw-" + uid, groups=[group])
    rule = DirectoryRule.objects.create(directory="ldap", group=dn_group, role=role, project=project)
    return uid, group, rule


def _sign_in(client: Client, username: str, password: str):
    return client.post("/accounts/login/", {"username": username, "password": password})


def test_ldap_sign_in_lands_with_the_roles_of_the_users_groups(ldap_on, project):
    uid, _group, rule = _person_in_group(ldap_on, project)
    client = Client()
    response = _sign_in(client, uid, "pw-" + uid)
    assert response.status_code == 302 and response["Location"] == "/"
    user = User.objects.get(username=uid)
    assert (user.directory, user.directory_subject) == ("ldap", f"uid={uid},ou=people,dc=centre,dc=example")
    assert (user.unix_name, user.email, user.display_name) == (uid, f"{uid}@centre.example",
                                                               f"{uid.title()} Example")
    assert not user.has_usable_password()  # the directory holds the password, never the portal
    assert Membership.objects.filter(user=user, project=project, role=Role.MEMBER, rule=rule).exists()
    assert client.get("/api/v1/jobs/").status_code == 200
    token = Client().post("/api/v1/auth/token/", {"username": uid, "password": "pw-" + uid})
    assert token.status_code == 200  # scripts of directory users get tokens with the directory password
    wrong = Client().post("/api/v1/auth/token/", {"username": uid, "password": "nope"})
    assert wrong.status_code == 401


def test_leaving_a_group_in_the_directory_and_a_sync_remove_the_role(ldap_on, project):
    uid, group, rule = _person_in_group(ldap_on, project)
    assert _sign_in(Client(), uid, "pw-" + uid).status_code == 302
    user = User.objects.get(username=uid)
    manual = Membership.objects.create(user=user, project=project, role=Role.PROJECT_ADMIN)
    ldap_on.leave(uid, group)
    report, listing = sync_ldap()
    assert uid in {i.username for i in listing.identities} and report.roles_removed >= 1
    assert not Membership.objects.filter(user=user, rule=rule).exists()
    assert Membership.objects.filter(pk=manual.pk).exists()  # given by hand: stays
    user.refresh_from_db()
    assert user.is_active


def test_a_user_disabled_in_the_directory_is_shut_out_at_the_next_sync(ldap_on, project):
    uid, _group, _rule = _person_in_group(ldap_on, project)
    browser = Client()
    assert _sign_in(browser, uid, "pw-" + uid).status_code == 302
    user = User.objects.get(username=uid)
    token = fx.api_token(user)
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    ldap_on.disable(uid)
    report, _listing = sync_ldap()
    assert report.deactivated >= 1
    user.refresh_from_db()
    assert not user.is_active and user.deactivated_reason == "disabled in ldap"
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 401
    assert browser.get("/api/v1/jobs/").status_code in (401, 403)  # the open session is gone
    assert browser.get("/").status_code == 302  # back to the sign-in page
    refused = _sign_in(Client(), uid, "pw-" + uid)
    assert refused.status_code == 200 and refused.context["form"].errors


def test_a_user_deleted_from_the_directory_is_deactivated_at_the_next_sync(ldap_on, project):
    uid, group, _rule = _person_in_group(ldap_on, project)
    assert _sign_in(Client(), uid, "pw-" + uid).status_code == 302
    ldap_on.leave(uid, group)
    ldap_on.delete(f"uid={uid},ou=people,dc=centre,dc=example")
    sync_ldap()
    user = User.objects.get(username=uid)
    assert not user.is_active and user.deactivated_reason == "no longer in ldap"


def test_wrong_password_and_unknown_user_are_refused_and_create_nothing(ldap_on, project):
    uid, _group, _rule = _person_in_group(ldap_on, project)
    for name, password in [(uid, "wrong"), (unique("nobody"), "pw"), (uid + ")(uid=*", "pw-" + uid)]:
        response = _sign_in(Client(), name, password)
        assert response.status_code == 200
        assert "didn't match" in response.content.decode() or "不匹配" in response.content.decode()
    assert not User.objects.filter(directory="ldap").exists()
    assert not Membership.objects.exists()


def test_a_directory_name_never_takes_over_a_local_superuser(ldap_on, project):
    uid, _group, _rule = _person_in_group(ldap_on, project)
    admin = User.objects.create_superuser(uid, password="break-glass")
    response = _sign_in(Client(), uid, "pw-" + uid)  # the directory's password for that name
    assert response.status_code == 200
    admin.refresh_from_db()
    assert (admin.directory, admin.directory_subject) == ("local", "")
    assert admin.check_password("break-glass")
    assert not Membership.objects.filter(user=admin).exists()
    report, _listing = sync_ldap()
    assert report.conflicts >= 1
    admin.refresh_from_db()
    assert admin.directory == "local" and admin.is_active


def test_the_sync_reads_the_directory_a_page_at_a_time(ldap_on, project, settings):
    names = [_person_in_group(ldap_on, project)[0] for _ in range(5)]
    settings.LDAP_SYNC = {**settings.LDAP_SYNC, "PAGE_SIZE": 2}
    report, listing = sync_ldap()
    assert set(names) <= {i.username for i in listing.identities}
    assert report.created == sum(i.active for i in listing.identities) - report.conflicts
    assert Membership.objects.filter(user__username__in=names, rule__isnull=False).count() == 5


def test_an_empty_listing_changes_nothing(ldap_on, project, settings):
    uid, _group, _rule = _person_in_group(ldap_on, project)
    sync_ldap()
    settings.LDAP_SYNC = {**settings.LDAP_SYNC, "USER_BASE": "ou=services,dc=centre,dc=example"}
    with pytest.raises(LdapSyncError, match="listed no users"):
        sync_ldap()
    assert User.objects.get(username=uid).is_active


@pytest.fixture
def stopped_directory(settings):
    """A directory of its own that has a user, then stops (the shared one keeps running)."""
    run_dir = Path(tempfile.mkdtemp(prefix="gpupool-slapd-down-"))
    server = start_slapd(run_dir)
    try:
        point_portal_at(settings, server)
        yield server
    finally:
        server.stop()
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)


def test_a_stopped_directory_refuses_directory_users_but_not_the_local_admin(stopped_directory, project):
    server = stopped_directory
    uid, _group, rule = _person_in_group(server, project)
    assert _sign_in(Client(), uid, "pw-" + uid).status_code == 302
    synced_before = User.objects.get(username=uid).directory_synced_at
    admin = User.objects.create_superuser("breakglass", password="break-glass-pw")
    server.stop()

    response = _sign_in(Client(), uid, "pw-" + uid)
    assert response.status_code == 200
    assert response.context["directory_down"]
    assert "cannot be reached" in response.content.decode() or "无法连接" in response.content.decode()
    unknown = _sign_in(Client(), unique("new"), "pw")
    assert unknown.status_code == 200 and unknown.context["directory_down"]

    token = Client().post("/api/v1/auth/token/", {"username": uid, "password": "pw-" + uid})
    assert token.status_code == 503 and "LDAP" in token.json()["detail"]

    local = Client()
    assert _sign_in(local, "breakglass", "break-glass-pw").status_code == 302
    assert local.get("/").status_code == 200

    with pytest.raises(LdapSyncError, match="could not be read"):
        sync_ldap()
    with pytest.raises(CommandError, match="nothing was changed"):
        call_command("sync_ldap")
    user = User.objects.get(username=uid)  # the outage changed nothing
    assert user.is_active and user.directory_synced_at == synced_before
    assert Membership.objects.filter(user=user, rule=rule).exists()
    assert User.objects.count() == 2 and admin.is_active


def test_the_beat_task_and_the_command_run_the_sync(ldap_on, project):
    from portal.tasks import sync_ldap as task

    uid, _group, rule = _person_in_group(ldap_on, project)
    counts = task()
    assert counts["users"] >= 1 and counts["groups"] >= 1
    assert Membership.objects.filter(user__username=uid, rule=rule).exists()
    call_command("sync_ldap", stdout=open("/dev/null", "w"))  # noqa: SIM115
    assert User.objects.get(username=uid).is_active


def test_starttls_refuses_a_server_whose_certificate_the_ca_file_does_not_vouch_for(
    ldap_on, project, settings, tmp_path
):
    import ldap

    uid, _group, _rule = _person_in_group(ldap_on, project)
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=127.0.0.1", "-keyout", str(tmp_path / "key.pem"), "-out", str(other_ca)],
                   check=True, capture_output=True)
    options = {k: v for k, v in settings.AUTH_LDAP_CONNECTION_OPTIONS.items() if k != ldap.OPT_X_TLS_NEWCTX}
    settings.AUTH_LDAP_CONNECTION_OPTIONS = {**options, ldap.OPT_X_TLS_CACERTFILE: str(other_ca),
                                             ldap.OPT_X_TLS_NEWCTX: 0}
    response = _sign_in(Client(), uid, "pw-" + uid)
    assert response.status_code == 200 and response.context["form"].errors
    with pytest.raises(LdapSyncError):
        sync_ldap()
    assert not User.objects.filter(username=uid).exists()
