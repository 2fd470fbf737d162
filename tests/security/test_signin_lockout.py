"""Issue 18 item 10: password guessing is limited on every way in. The sign-in form and the API
token endpoint share one lockout, keyed per (account, client address) plus a per-address limit
across accounts; the client address honours the configured number of trusted proxies, so a
forged X-Forwarded-For — rotated at every request, as an attacker would — gains nothing, and the
ingress's own address never stands for everyone behind it. A wrong password is a 401."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from portal.security import client_address
from portal.signin import Attempt

pytestmark = pytest.mark.django_db

TOKEN = "/api/v1/auth/token/"
INGRESS = "10.0.0.1"
ATTACKER, VICTIM, OTHER = "203.0.113.7", "198.51.100.2", "192.0.2.44"
ADDRESSES = [INGRESS, ATTACKER, VICTIM, OTHER, "127.0.0.1"]
USERS = ["pa1_member", "pb_member", "a_admin", "b_admin", "auditor", "outsider", "nobody"]


@pytest.fixture(autouse=True)
def lockout(settings):
    """Small limits, and no counter of these addresses left before or after (they live in Redis)."""
    settings.LOGIN_FAILURE_LIMIT = 3
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 5
    settings.TRUSTED_PROXIES = 0
    keys = [Attempt(a, u).account_key for a in ADDRESSES for u in USERS]
    keys += [Attempt(a, "").address_key for a in ADDRESSES]
    keys += [f"throttle_signin_{a}" for a in ADDRESSES]
    cache.delete_many(keys)
    yield settings
    cache.delete_many(keys)


def _api(username, password, remote=ATTACKER, forwarded=None):
    extra = {"REMOTE_ADDR": remote, "HTTP_ACCEPT_LANGUAGE": "en"}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return APIClient().post(TOKEN, {"username": username, "password": password}, format="json", **extra)


def _form(username, password, remote=ATTACKER, forwarded=None):
    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return Client(HTTP_ACCEPT_LANGUAGE="en").post(
        "/accounts/login/", {"username": username, "password": password}, **extra
    )


SIGN_IN = {"api": _api, "form": _form}
OK = {"api": 200, "form": 302}
WRONG = {"api": 401, "form": 200}


def test_item10_a_wrong_password_on_the_token_endpoint_is_a_401(world):
    response = _api("pa1_member", "wrong")
    assert response.status_code == 401, response.content
    assert response.json() == {"detail": "Unknown user or wrong password."}
    assert response["WWW-Authenticate"] == "Token"
    assert _api("nobody", "wrong").status_code == 401  # an unknown user reads the same
    assert _api("pa1_member", "pw-pa1_member").status_code == 200


@pytest.mark.parametrize(("first", "then"), [("form", "api"), ("api", "form"), ("api", "api")])
def test_item10_the_form_and_the_token_endpoint_share_one_lockout(world, first, then):
    for _ in range(2):
        assert SIGN_IN[first]("pa1_member", "wrong").status_code == WRONG[first]
    assert SIGN_IN[then]("pa1_member", "wrong").status_code == WRONG[then]
    for way in ("api", "form"):  # locked both ways now, the right password included
        assert SIGN_IN[way]("pa1_member", "pw-pa1_member").status_code == 429, way
    locked = _api("pa1_member", "pw-pa1_member")
    assert locked.json() == {"detail": "Too many failed sign-ins. Try again in 15 minutes."}
    assert locked["Retry-After"] == "900"


@pytest.mark.parametrize("way", ["api", "form"])
def test_item10_rotating_a_forged_x_forwarded_for_does_not_evade_the_lockout(world, way):
    """No trusted proxy (the default): X-Forwarded-For is the client's own claim and is ignored."""
    for i in range(3):
        forged = f"100.64.{i}.{i + 1}"
        assert SIGN_IN[way]("pa1_member", "wrong", forwarded=forged).status_code == WRONG[way]
    for i in range(3, 6):
        right = SIGN_IN[way]("pa1_member", "pw-pa1_member", forwarded=f"100.64.{i}.9, 127.0.0.{i}")
        assert right.status_code == 429


@pytest.mark.parametrize("way", ["api", "form"])
def test_item10_behind_one_proxy_the_right_most_entry_is_the_client(world, lockout, way):
    """The ingress appends the address it saw; what the attacker put left of it is ignored, and the
    victim behind the same ingress is not locked out with the attacker."""
    lockout.TRUSTED_PROXIES = 1
    for i in range(3):
        forged = f"100.64.0.{i}, {VICTIM}, {ATTACKER}"  # the attacker even claims to be the victim
        assert SIGN_IN[way]("pa1_member", "wrong", INGRESS, forged).status_code == WRONG[way]
    rotated = SIGN_IN[way]("pa1_member", "pw-pa1_member", INGRESS, f"100.64.9.9, {ATTACKER}")
    assert rotated.status_code == 429
    victim = SIGN_IN[way]("pa1_member", "pw-pa1_member", INGRESS, VICTIM)
    assert victim.status_code == OK[way]


@pytest.mark.parametrize("way", ["api", "form"])
def test_item10_password_spraying_from_one_address_locks_that_address_out(world, way):
    sprayed = ["pa1_member", "pb_member", "a_admin", "b_admin", "nobody"]  # one guess each: under 3
    for name in sprayed:
        assert SIGN_IN[way](name, "Summer2026!").status_code == WRONG[way]
    for name in ("auditor", "outsider"):  # fresh accounts, right passwords: the address is refused
        assert SIGN_IN[way](name, f"pw-{name}").status_code == 429
    assert SIGN_IN[way]("auditor", "pw-auditor", remote=OTHER).status_code == OK[way]


def test_item10_a_right_password_resets_the_account_count_but_not_the_address_count(world):
    for _ in range(2):
        _api("pa1_member", "wrong")
    assert _api("pa1_member", "pw-pa1_member").status_code == 200
    assert cache.get(Attempt(ATTACKER, "pa1_member").account_key) is None
    assert cache.get(Attempt(ATTACKER, "").address_key) == 2
    for _ in range(2):
        assert _api("pa1_member", "wrong").status_code == 401
    assert _api("pa1_member", "pw-pa1_member").status_code == 200


def test_item10_the_token_throttle_keys_on_the_client_address_not_a_forged_header(world):
    """20 token requests a minute from one address, whatever X-Forwarded-For says."""
    answers = [
        _api("pa1_member", "pw-pa1_member", remote=OTHER, forwarded=f"100.64.1.{i}").status_code
        for i in range(21)
    ]
    assert answers == [200] * 20 + [429]


def test_item10_the_admin_has_no_password_form_of_its_own(world):
    anonymous = Client()
    for response in (anonymous.get("/admin/login/"), anonymous.post("/admin/login/", {"username": "x"})):
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=/admin/")
    assert anonymous.get("/admin/").status_code == 302
    member = Client()
    member.force_login(world.users["pa1_member"])
    assert member.get("/admin/login/").status_code == 403
    admin = Client()
    admin.force_login(world.users["platform"])
    assert admin.get("/admin/").status_code == 200


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, None, "10.0.0.1"),
        (0, "203.0.113.7", "10.0.0.1"),
        (1, None, "10.0.0.1"),
        (1, "203.0.113.7", "203.0.113.7"),
        (1, "1.2.3.4, 203.0.113.7", "203.0.113.7"),
        (1, " 1.2.3.4 ,203.0.113.7 ", "203.0.113.7"),
        (2, "1.2.3.4, 203.0.113.7, 10.9.9.9", "203.0.113.7"),
        (2, "203.0.113.7", "203.0.113.7"),  # fewer entries than proxies: DRF's rule, the left-most
        (1, "not-an-address", "10.0.0.1"),
        (1, "1.2.3.4, 2001:db8::1", "2001:db8::1"),
    ],
)
def test_item10_the_client_address_follows_the_trusted_proxy_count(settings, proxies, forwarded, expected):
    settings.TRUSTED_PROXIES = proxies
    extra = {"REMOTE_ADDR": "10.0.0.1"}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    assert client_address(RequestFactory().get("/", **extra)) == expected


def test_item10_drf_throttles_use_the_same_proxy_count():
    assert django_settings.REST_FRAMEWORK["NUM_PROXIES"] == django_settings.TRUSTED_PROXIES


@pytest.mark.parametrize("name", ["Alice ", "пользователь", "a b\x06c", "x" * 150, "用户"])
def test_item10_counter_keys_stay_short_and_plain_whatever_the_username(name):
    key = Attempt.of(RequestFactory().post("/", REMOTE_ADDR="2001:db8::1"), name).account_key
    assert key.isascii() and key.isprintable() and " " not in key and len(key) < 220, key
    assert Attempt.of(RequestFactory().post("/"), "  PA1_Member ").account_key.endswith(":pa1_member")
