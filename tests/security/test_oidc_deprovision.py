"""An OpenID Connect centre deprovisions (issue 32 item 16, docs/identity.md "When the provider
ends a session or an account"), against the real provider (deploy/oidc/provider.mjs, npm's
oidc-provider):

- back-channel logout (OpenID Connect Back-Channel Logout 1.0): the provider's server tells the
  portal (a live server) that a session ended; the portal sessions begun under it end; every
  logout token that fails a check of §2.6 is refused and ends nothing;
- the account check: the refresh token of the user's latest sign-in (offline_access) is spent
  with the provider; a user disabled there is deactivated (sessions, API tokens), a plain
  sign-out is not a reason, a provider that does not answer changes nothing."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urljoin, urlsplit

import jwt
import pytest
import requests
from django.db import transaction
from django.test import Client

from portal import enqueue as enqueue_module
from portal import oidc_check
from portal.celery import app
from portal.models import OidcGrant, OidcSession, User
from tests import factories as fx
from tests.celery_procs import private_queue, start_worker
from tests.oidc_provider import (
    CLIENT_ID,
    CLIENT_SECRET,
    new_rsa_key,
    oidc_provider,  # noqa: F401 (a fixture)
    portal_settings,
    to_portal,
)
from tests.waiting import wait_until

PORTAL = "http://testserver"
OFFLINE = "openid email profile groups offline_access"
LOGOUT = "/oidc/backchannel-logout/"


# --- signing in and out at the provider, as a browser would --------------------------------------


def sign_in(client: Client, browser: requests.Session | None = None) -> requests.Session:
    """Signs ``client`` in to the portal through the provider with ``browser`` (its cookies are the
    provider's session: a second sign-in with the same browser is the same provider session)."""
    browser = browser or requests.Session()
    start = client.get("/oidc/authenticate/")
    assert start.status_code == 302, start.content
    page = to_portal(browser, browser.get(start["Location"], allow_redirects=False, timeout=30))
    if not isinstance(page, str):  # the provider's login page: no provider session yet
        action = re.search(r'action="([^"]+)"', page.text).group(1)
        answer = browser.post(urljoin(page.url, action), data={"login": "alice", "password": "alice-pw"},
                              allow_redirects=False, timeout=30)
        page = to_portal(browser, answer)
    assert isinstance(page, str), page.text
    parts = urlsplit(page)
    done = client.get(parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()})
    assert done.status_code == 302 and done["Location"] == "/", done.content
    return browser


def sign_out_at_provider(provider, browser: requests.Session) -> None:
    """The user signs out at the provider (not through the portal), and says yes to ending it."""
    page = browser.get(f"{provider.issuer}/session/end", timeout=30)
    xsrf = re.search(r'name="xsrf" value="([^"]+)"', page.text).group(1)
    answer = browser.post(f"{provider.issuer}/session/end/confirm", data={"xsrf": xsrf, "logout": "yes"},
                          allow_redirects=False, timeout=30)
    assert answer.status_code in (302, 303), answer.text


def signed_in(client: Client) -> bool:
    return client.get("/").status_code == 200


def _works(token: str) -> bool:
    return Client(HTTP_AUTHORIZATION=f"Token {token}").get("/api/v1/me/").status_code == 200


@pytest.fixture
def wired(oidc_provider, settings, live_server):  # noqa: F811 (the imported fixture)
    """The provider, told to send its logout tokens to the portal's live server; the portal asks for
    offline access (a refresh token for the account check)."""
    provider = oidc_provider(PORTAL, backchannel_logout_uri=f"{live_server.url}{LOGOUT}")
    portal_settings(settings, provider, SCOPES=OFFLINE)
    return provider


@pytest.fixture
def provider(oidc_provider, settings):  # noqa: F811
    provider = oidc_provider()
    portal_settings(settings, provider, SCOPES=OFFLINE)
    return provider


# --- back-channel logout ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the provider posts to the live server
def test_item16_signing_out_at_the_provider_ends_that_portal_session_by_back_channel(wired):
    laptop, desktop = Client(), Client()
    laptop_browser = sign_in(laptop)
    sign_in(desktop)  # another browser: another provider session
    user = User.objects.get(username="alice")
    assert OidcSession.objects.filter(user=user).exclude(sid="").count() == 2
    token = fx.api_token(user)
    sign_out_at_provider(wired, laptop_browser)
    # The provider waited for the portal's answer before it answered the browser.
    assert not signed_in(laptop)
    assert signed_in(desktop)  # another provider session: it goes on
    # A sign-out is not a deprovisioning: the user and their scripts go on.
    user.refresh_from_db()
    assert user.is_active and _works(token)
    assert "backchannel.error" not in (wired.workdir / "provider.log").read_text()


@pytest.mark.django_db(transaction=True)
def test_item16_a_user_disabled_at_the_provider_is_deprovisioned_after_its_back_channel_logout(
    wired, monkeypatch
):
    """End to end, with a real Celery worker: the provider disables the user and ends their
    session; the logout token ends the portal session and asks for the account check, which the
    worker makes — the refresh is refused, the user deactivated, their API tokens revoked."""
    queue = private_queue()
    monkeypatch.setattr(enqueue_module, "send", lambda name, *args, expires=None: app.send_task(
        name, args=args, queue=queue, expires=expires))
    client = Client()
    browser = sign_in(client)
    user = User.objects.get(username="alice")
    assert OidcGrant.objects.filter(user=user).exists()  # offline_access gave a refresh token
    token = fx.api_token(user)
    worker = start_worker(queue, GPUPOOL_AUTH_BACKENDS="local,oidc", GPUPOOL_OIDC_ISSUER=wired.issuer,
                          GPUPOOL_OIDC_CLIENT_ID=CLIENT_ID, GPUPOOL_OIDC_CLIENT_SECRET=CLIENT_SECRET,
                          GPUPOOL_OIDC_SCOPES=OFFLINE)
    try:
        wired.change("alice", disabled=True)
        sign_out_at_provider(wired, browser)
        assert not signed_in(client)
        wait_until(lambda: not User.objects.get(pk=user.pk).is_active, "the worker to deactivate alice")
    finally:
        worker.terminate()
        print(worker.communicate(timeout=60)[0].decode(errors="replace"))
    user.refresh_from_db()
    assert user.deactivated_reason == oidc_check.GONE_REASON
    assert not _works(token)


@pytest.mark.django_db
def test_item16_a_logout_token_with_only_sub_ends_every_session_of_the_user(provider):
    first, second = Client(), Client()
    sign_in(first)
    sign_in(second)
    user = User.objects.get(username="alice")
    unrecorded = Client()
    # A session from before sessions were recorded: no row names it.
    unrecorded.force_login(user, backend="portal.oidc.OIDCBackend")
    answer = Client().post(LOGOUT, {"logout_token": provider.logout_token()})
    assert answer.status_code == 200 and answer["Cache-Control"] == "no-store"
    assert not signed_in(first) and not signed_in(second) and not signed_in(unrecorded)
    assert not OidcSession.objects.filter(user=user).exists()
    user.refresh_from_db()
    assert user.is_active


def _forged(provider) -> dict[str, str]:
    other = new_rsa_key()
    sub = {"sub": "2f6b1c7e-alice"}
    return {
        "another key, the provider's kid": provider.logout_token(key=other),
        "another key, its own kid": provider.logout_token(key=other, kid="attacker"),
        "alg none": jwt.encode({"iss": provider.issuer, "aud": CLIENT_ID, "iat": 1, "exp": 2**40, "jti": "n",
                                "events": {"http://schemas.openid.net/event/backchannel-logout": {}}, **sub},
                               None, algorithm="none"),
        "HS256 with the client secret": provider.logout_token(key=CLIENT_SECRET, alg="HS256"),
        "another audience": provider.logout_token(aud="someone-else"),
        "another issuer": provider.logout_token(iss="http://evil.example"),
        "expired": provider.logout_token(iat=1_700_000_000, exp=1_700_000_600),
        "no exp": provider.logout_token(drop=("exp",)),
        "no iat": provider.logout_token(drop=("iat",)),
        "no jti": provider.logout_token(drop=("jti",)),
        "no events": provider.logout_token(drop=("events",)),
        "another event": provider.logout_token(events={"http://schemas.openid.net/event/other": {}}),
        "events not an object": provider.logout_token(events=["http://schemas.openid.net/event/backchannel-logout"]),
        "a nonce (an ID token)": provider.logout_token(nonce="n"),
        "neither sub nor sid": provider.logout_token(drop=("sub",)),
        "an ID token": provider.id_token(nonce="n"),
        "not a JWT": "not-a-jwt",
        "nothing": "",
    }


CASES = [
    "another key, the provider's kid", "another key, its own kid", "alg none", "HS256 with the client secret",
    "another audience", "another issuer", "expired", "no exp", "no iat", "no jti", "no events",
    "another event", "events not an object", "a nonce (an ID token)", "neither sub nor sid", "an ID token",
    "not a JWT", "nothing",
]


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES)
def test_item16_a_logout_token_failing_a_check_is_refused_and_ends_nothing(provider, case):
    client = Client()
    sign_in(client)
    answer = Client().post(LOGOUT, {"logout_token": _forged(provider)[case]})
    assert answer.status_code == 400, answer.content
    assert answer.json()["error"] == "invalid_request"
    assert signed_in(client)
    assert OidcSession.objects.exists()


@pytest.mark.django_db
def test_item16_a_replayed_logout_token_is_refused(provider):
    token = provider.logout_token(sid="no-such-session")
    assert Client().post(LOGOUT, {"logout_token": token}).status_code == 200
    again = Client().post(LOGOUT, {"logout_token": token})
    assert again.status_code == 400 and "used already" in again.json()["error_description"]


@pytest.mark.django_db
def test_item16_a_sid_of_another_subject_ends_nothing(provider):
    client = Client()
    sign_in(client)
    sid = OidcSession.objects.get().sid
    other = provider.logout_token(sid=sid, sub="someone-else")
    assert Client().post(LOGOUT, {"logout_token": other}).status_code == 200
    assert signed_in(client)
    assert Client().post(LOGOUT, {"logout_token": provider.logout_token(sid=sid)}).status_code == 200
    assert not signed_in(client)


@pytest.mark.django_db
def test_item16_the_back_channel_endpoint_is_off_without_oidc_and_takes_only_post(settings, provider):
    assert Client().get(LOGOUT).status_code == 405
    settings.OIDC = {**settings.OIDC, "ENABLED": False}
    assert Client().post(LOGOUT, {"logout_token": provider.logout_token()}).status_code == 404


# --- the account check ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_item16_the_account_check_deactivates_a_user_disabled_at_the_provider(provider):
    client = Client()
    sign_in(client)
    user = User.objects.get(username="alice")
    grant = OidcGrant.objects.get(user=user)
    token = fx.api_token(user)
    # Still there: nothing changes (the refresh token may rotate).
    report = oidc_check.accounts_check()
    assert report.as_dict() == {"alive": 1, "gone": 0, "unknown": 0, "deactivated": 0}
    grant.refresh_from_db()
    assert grant.checked_at is not None and grant.lease_until is None
    assert signed_in(client) and _works(token)
    provider.change("alice", disabled=True)
    report = oidc_check.accounts_check()
    assert report.as_dict() == {"alive": 0, "gone": 1, "unknown": 0, "deactivated": 1}
    user.refresh_from_db()
    assert not user.is_active and user.deactivated_reason == oidc_check.GONE_REASON
    assert not signed_in(client) and not _works(token)
    assert not OidcGrant.objects.filter(user=user).exists()
    # Enabled again at the provider: the next sign-in brings the user back (without the old tokens).
    provider.change("alice", disabled=False)
    sign_in(Client())
    user.refresh_from_db()
    assert user.is_active and not _works(token)


@pytest.mark.django_db
def test_item16_signing_out_through_the_portal_does_not_fail_the_account_check(provider):
    client = Client()
    browser = sign_in(client)
    user = User.objects.get(username="alice")
    response = client.post("/accounts/logout/")  # RP-initiated logout: the provider's session ends too
    end = browser.get(response["Location"], timeout=30)
    xsrf = re.search(r'name="xsrf" value="([^"]+)"', end.text).group(1)
    browser.post(f"{provider.issuer}/session/end/confirm", data={"xsrf": xsrf, "logout": "yes"},
                 allow_redirects=False, timeout=30)
    assert not OidcSession.objects.filter(user=user).exists()  # forgotten at the portal's sign-out
    # The offline grant outlives the provider's session: the user is still there.
    assert oidc_check.account_check(user.pk) == "alive"
    user.refresh_from_db()
    assert user.is_active


@pytest.mark.django_db
def test_item16_a_provider_that_does_not_answer_deactivates_nobody(provider):
    sign_in(Client())
    user = User.objects.get(username="alice")
    provider.stop()
    assert oidc_check.accounts_check().as_dict() == {"alive": 0, "gone": 0, "unknown": 1, "deactivated": 0}
    user.refresh_from_db()
    assert user.is_active and OidcGrant.objects.get(user=user).lease_until is None


@pytest.mark.django_db
def test_item16_a_wrong_client_secret_says_nothing_about_users(provider, settings):
    sign_in(Client())
    settings.OIDC = {**settings.OIDC, "CLIENT_SECRET": "not-the-secret-" + "y" * 24}
    assert oidc_check.account_check(User.objects.get(username="alice").pk) == "unknown"
    assert User.objects.get(username="alice").is_active


@pytest.mark.django_db
def test_item16_a_round_refusing_most_grants_at_once_deactivates_nobody(provider):
    users = [User.objects.create(username=f"u{i}", directory="oidc", directory_subject=f"s{i}")
             for i in range(10)]
    for user in users:
        OidcGrant.objects.create(user=user, refresh_token=f"lost-by-the-provider-{user.pk}")
    with pytest.raises(oidc_check.CheckRefused):
        oidc_check.accounts_check()
    assert User.objects.filter(is_active=True).count() == 10
    assert not OidcGrant.objects.exclude(lease_until=None).exists()  # asked again at the next round
    OidcGrant.objects.filter(user__in=users[1:]).delete()
    assert oidc_check.accounts_check().as_dict()["deactivated"] == 1  # one alone: believed


@pytest.mark.django_db
def test_item16_a_check_holding_the_grant_keeps_a_second_one_off_it(provider):
    sign_in(Client())
    user = User.objects.get(username="alice")
    with transaction.atomic():
        held = oidc_check._claim(user.pk, oidc_check.timezone.now())
        assert held is not None
        assert oidc_check.account_check(user.pk) == "busy"


@pytest.mark.django_db
def test_item16_a_sign_in_without_offline_access_keeps_no_grant(provider, settings):
    settings.OIDC = {**settings.OIDC, "SCOPES": "openid email profile groups"}
    start = Client().get("/oidc/authenticate/")
    assert "prompt" not in parse_qs(urlsplit(start["Location"]).query)
    sign_in(Client())
    assert not OidcGrant.objects.exists()
    settings.OIDC = {**settings.OIDC, "SCOPES": OFFLINE}
    query = parse_qs(urlsplit(Client().get("/oidc/authenticate/")["Location"]).query)
    assert query["prompt"] == ["consent"] and "offline_access" in query["scope"][0]
