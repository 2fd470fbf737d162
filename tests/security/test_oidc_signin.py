"""OpenID Connect sign-in (DESIGN §12) through the Django test client against a real provider
(deploy/oidc/provider.mjs): the happy path, then every hostile answer → a clear refusal on the
sign-in page, nothing created, never a 500. Forged and expired ID tokens are put in the provider's
token response by its test hook, signed with keys this test makes (or the provider's own)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt
import pytest
import requests
from django.test import Client

from portal.directory import deactivate_user
from portal.models import DirectoryRule, Membership, Role, User
from tests import factories as fx
from tests.oidc_provider import (
    CLIENT_ID,
    CLIENT_SECRET,
    new_rsa_key,
    oidc_provider,  # noqa: F401 (a fixture)
    portal_settings,
    to_portal,
)

pytestmark = pytest.mark.django_db
PORTAL = "http://testserver"


@pytest.fixture
def provider(oidc_provider, settings):  # noqa: F811 (the imported fixture)
    p = oidc_provider()
    portal_settings(settings, p)
    return p


@pytest.fixture
def vision(db):
    _f, proj = fx.single_project_pool()
    rule = DirectoryRule.objects.create(
        directory="oidc", group="vision-lab", role=Role.PROJECT_ADMIN, project=proj
    )
    return proj, rule


def start(client: Client) -> str:
    response = client.get("/oidc/authenticate/")
    assert response.status_code == 302, response.content
    return response["Location"]


def provider_login(authorization_url: str, login="alice", password="alice-pw"):
    """Signs in on the provider's own login page: the callback URL, or the page that refused."""
    browser = requests.Session()
    page = to_portal(browser, browser.get(authorization_url, allow_redirects=False, timeout=30))
    assert page.status_code == 200 and "Centre sign-in" in page.text, page.text
    action = re.search(r'action="([^"]+)"', page.text).group(1)
    answer = browser.post(urljoin(page.url, action), data={"login": login, "password": password},
                          allow_redirects=False, timeout=30)
    return to_portal(browser, answer)


def callback(client: Client, url: str):
    parts = urlsplit(url)
    return client.get(parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()})


def sign_in(client: Client, **kw):
    return callback(client, provider_login(start(client), **kw))


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def refused(response, status: int, words: str) -> None:
    assert response.status_code == status, response.content[:500]
    assert words in response.content.decode(), response.content.decode()[:2000]
    assert b'name="password"' in response.content  # the local form stays for break-glass admins


def test_sign_in_creates_the_user_from_the_claims_with_the_roles_of_their_groups(provider, vision):
    proj, rule = vision
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    authorization = start(client)
    query = parse_qs(urlsplit(authorization).query)
    assert query["code_challenge_method"] == ["S256"] and query["code_challenge"][0]
    assert query["nonce"][0] and query["state"][0] and query["client_id"] == [CLIENT_ID]
    response = callback(client, provider_login(authorization))
    assert response.status_code == 302 and response["Location"] == "/", response.content
    assert signed_in(client)
    user = User.objects.get(username="alice")
    assert (user.directory, user.directory_subject, user.unix_name) == ("oidc", "2f6b1c7e-alice", "alice1")
    assert (user.email, user.display_name) == ("alice@centre.example", "Alice Chen")
    assert not user.has_usable_password()
    assert Membership.objects.get(user=user, project=proj, role=Role.PROJECT_ADMIN).rule == rule


def test_leaving_the_group_at_the_provider_removes_the_role_at_the_next_sign_in(provider, vision):
    proj, _rule = vision
    sign_in(Client())
    user = User.objects.get(username="alice")
    manual = Membership.objects.create(user=user, project=proj, role=Role.MEMBER)
    provider.change("alice", groups=["gpu-users"])
    assert sign_in(Client()).status_code == 302
    assert not Membership.objects.filter(user=user, role=Role.PROJECT_ADMIN).exists()
    assert Membership.objects.filter(pk=manual.pk).exists()  # given by hand: stays


def test_a_user_disabled_at_the_provider_cannot_sign_in(provider, vision):
    provider.change("alice", disabled=True)
    page = provider_login(start(Client()))
    assert page.status_code == 403 and "This account is disabled." in page.text
    assert not User.objects.filter(username="alice").exists()


def test_api_tokens_work_for_scripts_and_die_with_the_user(provider, vision):
    sign_in(Client())
    user = User.objects.get(username="alice")
    script = Client(HTTP_AUTHORIZATION=f"Token {fx.api_token(user)}")
    assert script.get("/api/v1/me/").status_code == 200
    deactivate_user(user, reason="left the centre")
    assert script.get("/api/v1/me/").status_code == 401


def test_replayed_and_forged_state_are_refused(provider, vision):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    url = provider_login(start(client))
    assert callback(client, url).status_code == 302
    refused(callback(client, url), 400, "could not be verified")  # replayed: the state was used
    refused(callback(Client(HTTP_ACCEPT_LANGUAGE="en"), url), 400, "could not be verified")  # no session
    forged = Client(HTTP_ACCEPT_LANGUAGE="en")
    real = provider_login(start(forged))
    parts = urlsplit(real)
    code = parse_qs(parts.query)["code"][0]
    refused(forged.get(parts.path, {"code": code, "state": "forged-state"}), 400, "could not be verified")
    assert User.objects.count() == 1  # alice, from the first sign-in only


def _nonce_of(client: Client) -> str:
    (entry,) = client.session["oidc_states"].values()
    return entry["nonce"]


def _forged(provider, client):
    other = new_rsa_key()
    nonce = _nonce_of(client)
    none_token = jwt.encode({"iss": provider.issuer, "aud": CLIENT_ID, "sub": "x", "nonce": nonce}, None,
                            algorithm="none")
    return {
        "another key, the provider's kid": provider.id_token(key=other, nonce=nonce),
        "another key, its own kid": provider.id_token(key=other, kid="attacker", nonce=nonce),
        "alg none": none_token,
        "HS256 with the client secret": provider.id_token(key=CLIENT_SECRET, alg="HS256", nonce=nonce),
        "expired": provider.id_token(nonce=nonce, iat=1_700_000_000, exp=1_700_000_600),
        "another audience": provider.id_token(nonce=nonce, aud="someone-else"),
        "another issuer": provider.id_token(nonce=nonce, iss="http://evil.example"),
        "no nonce": provider.id_token(),
        "not a JWT": "not-a-jwt",
    }


@pytest.mark.parametrize("case", [
    "another key, the provider's kid", "another key, its own kid", "alg none", "HS256 with the client secret",
    "expired", "another audience", "another issuer", "no nonce", "not a JWT",
])
def test_forged_or_expired_id_tokens_are_refused_and_nothing_is_created(provider, vision, case):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    authorization = start(client)
    provider.next_id_token(_forged(provider, client)[case])
    refused(callback(client, provider_login(authorization)), 400, "could not be verified")
    assert not User.objects.filter(username="alice").exists()
    assert not signed_in(client)


def test_a_token_made_by_the_provider_key_with_the_right_nonce_is_accepted(provider, vision):
    # The control of the test above: the hook and the test's key are what the portal trusts.
    client = Client()
    authorization = start(client)
    provider.next_id_token(provider.id_token(nonce=_nonce_of(client)))
    assert callback(client, provider_login(authorization)).status_code == 302
    assert signed_in(client)


def test_a_replayed_nonce_is_refused(provider, vision):
    first = Client()
    sign_in(first)
    old_token = first.session["oidc_id_token"]  # a real ID token, for another sign-in's nonce
    user = User.objects.get(username="alice")
    deactivate_user(user, reason="to see that nothing brings the user back")
    second = Client(HTTP_ACCEPT_LANGUAGE="en")
    authorization = start(second)
    provider.next_id_token(old_token)
    refused(callback(second, provider_login(authorization)), 400, "could not be verified")
    user.refresh_from_db()
    assert not user.is_active and not signed_in(second)


def test_claims_the_portal_cannot_use_are_refused(provider, vision):
    provider.change("alice", unix_name="Alice; rm -rf /")
    response = sign_in(Client(HTTP_ACCEPT_LANGUAGE="en"))
    refused(response, 403, "cannot be used here")
    assert not User.objects.filter(username="alice").exists()


def test_a_directory_user_cannot_take_over_a_local_admin(provider, vision):
    admin = fx.platform_admin("alice")
    admin.is_staff = admin.is_superuser = True
    admin.save()
    response = sign_in(Client(HTTP_ACCEPT_LANGUAGE="en"))
    refused(response, 403, "belongs to another portal account")
    admin.refresh_from_db()
    assert admin.directory == "local" and admin.directory_subject == "" and admin.has_usable_password()


def test_provider_unreachable_local_admins_still_sign_in(settings, oidc_provider):  # noqa: F811
    provider = oidc_provider()
    portal_settings(settings, provider)
    provider.stop()  # nothing listens at the issuer any more
    admin = fx.platform_admin("root")
    admin.set_password("break-glass-pw")
    admin.save()
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    page = client.get("/accounts/login/")
    assert page.status_code == 200 and b"Sign in with your centre account" in page.content
    refused(client.get("/oidc/authenticate/"), 503, "cannot be reached")
    response = client.post("/accounts/login/", {"username": "root", "password": "break-glass-pw"})
    assert response.status_code == 302 and signed_in(client)


def test_the_provider_going_down_mid_sign_in_is_a_refusal(provider, vision):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    url = provider_login(start(client))
    provider.stop()
    refused(callback(client, url), 503, "cannot be reached")
    assert not User.objects.filter(username="alice").exists()


def test_sign_out_ends_the_provider_session_too(provider, vision):
    client = Client()
    sign_in(client)
    id_token = client.session["oidc_id_token"]
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    location = urlsplit(response["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == f"{provider.issuer}/session/end"
    query = parse_qs(location.query)
    assert query["id_token_hint"] == [id_token]
    assert query["post_logout_redirect_uri"] == [f"{PORTAL}/accounts/login/"]
    assert not signed_in(client)
    # The provider accepts the request (it checks the hint's signature and the return address;
    # a refusal is a 400 error page).
    assert requests.get(response["Location"], timeout=30).status_code == 200


def test_without_oidc_the_login_page_has_no_button_and_the_flow_is_off(settings):
    settings.OIDC = {**settings.OIDC, "ENABLED": False}
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    assert b"oidc-sign-in" not in client.get("/accounts/login/").content
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/", {"code": "x", "state": "y"}).status_code == 404


def test_the_login_page_offers_the_centre_button_in_both_languages(settings):
    settings.OIDC = {**settings.OIDC, "ENABLED": True, "ISSUER": "http://127.0.0.1:9", "CLIENT_ID": "gpupool"}
    english = Client(HTTP_ACCEPT_LANGUAGE="en").get("/accounts/login/?next=/jobs/").content.decode()
    assert "Sign in with your centre account" in english
    assert 'href="/oidc/authenticate/?next=/jobs/"' in english
    chinese = Client(HTTP_ACCEPT_LANGUAGE="zh-hans").get("/accounts/login/").content.decode()
    assert "使用中心统一账号登录" in chinese and "本地账号" in chinese
    settings.OIDC = {**settings.OIDC, "BUTTON_LABEL": "Campus SSO", "BUTTON_LABEL_ZH_HANS": "校园统一认证"}
    assert "Campus SSO" in Client(HTTP_ACCEPT_LANGUAGE="en").get("/accounts/login/").content.decode()
    assert "校园统一认证" in Client(HTTP_ACCEPT_LANGUAGE="zh-hans").get("/accounts/login/").content.decode()


def test_an_error_from_the_provider_is_a_refusal_and_uses_up_the_state(provider, vision):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    state = parse_qs(urlsplit(start(client)).query)["state"][0]
    answer = client.get("/oidc/callback/", {"error": "access_denied", "state": state})
    refused(answer, 400, "could not be verified")
    assert state not in client.session["oidc_states"]
    refused(client.get("/oidc/callback/", {"code": "c"}), 400, "could not be verified")  # no state at all
