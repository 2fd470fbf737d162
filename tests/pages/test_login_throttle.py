"""The sign-in form stops a password guesser: after LOGIN_FAILURE_LIMIT wrong passwords for one
account from one address, even the right password is refused (429) until the window passes."""

import pytest
from django.core.cache import cache
from django.test import Client

from portal.signin import Attempt

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_counters(settings):
    settings.LOGIN_FAILURE_LIMIT = 3
    settings.LANGUAGE_CODE = "en"
    keys = [
        f"login-failures:{ip}:{name}"
        for ip in ("127.0.0.1", "10.0.0.9")
        for name in ("pa1_member", "pb_member")
    ]
    cache.delete_many(keys)
    yield
    cache.delete_many(keys)


def _login(username, password, ip="127.0.0.1"):
    client = Client(REMOTE_ADDR=ip)
    return client, client.post("/accounts/login/", {"username": username, "password": password})


def test_wrong_passwords_lock_the_account_from_that_address(world):
    for _ in range(3):
        _, response = _login("pa1_member", "wrong")
        assert response.status_code == 200 and "didn" in response.content.decode()
    client, response = _login("pa1_member", "pw-pa1_member")
    assert response.status_code == 429
    assert "Too many failed sign-ins" in response.content.decode()
    assert "_auth_user_id" not in client.session  # the right password did not get in


def test_the_lock_is_per_account_and_per_address(world):
    for _ in range(3):
        _login("pa1_member", "wrong")
    _, other_account = _login("pb_member", "pw-pb_member")
    assert other_account.status_code == 302
    _, other_address = _login("pa1_member", "pw-pa1_member", ip="10.0.0.9")
    assert other_address.status_code == 302


def test_a_successful_sign_in_resets_the_count(world):
    for _ in range(2):
        _login("pa1_member", "wrong")
    _, ok = _login("pa1_member", "pw-pa1_member")
    assert ok.status_code == 302
    assert cache.get("login-failures:127.0.0.1:pa1_member") is None
    for _ in range(2):
        _login("pa1_member", "wrong")
    _, still_ok = _login("pa1_member", "pw-pa1_member")
    assert still_ok.status_code == 302


def test_the_counter_key_uses_the_normalised_username(rf):
    request = rf.post("/accounts/login/", {"username": "  PA1_Member "}, REMOTE_ADDR="127.0.0.1")
    attempt = Attempt.of(request, request.POST["username"])
    assert attempt.account_key == "login-failures:127.0.0.1:pa1_member"
