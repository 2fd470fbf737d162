"""Issue 32 item 12: local passwords are stored with Argon2id at OWASP's cost, so a sign-in no
longer spends most of its time in Django's default PBKDF2 (1,000,000 iterations); passwords
stored before stay valid and are re-hashed on their next sign-in (docs/identity.md "Local
passwords"). The test settings hash with MD5 (speed): these tests use the production hashers."""

from __future__ import annotations

import pytest
from django.conf import global_settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher, get_hasher, identify_hasher
from django.test import Client

from portal.models import User
from portal.settings import base

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-enough-password"
# A sign-in's queries: the user; the session's existence check, insert (in a transaction) and
# save (in another); last_login. The re-hash adds the password's update.
SIGN_IN_QUERIES = 9
# What production uses: the base settings' hashers, Django's default when they name none.
PRODUCTION_HASHERS = getattr(base, "PASSWORD_HASHERS", global_settings.PASSWORD_HASHERS)


@pytest.fixture
def production_hashers(settings):
    settings.PASSWORD_HASHERS = PRODUCTION_HASHERS


def _sign_in() -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    response = client.post("/accounts/login/", {"username": "pat", "password": PASSWORD})
    assert (response.status_code, response["Location"]) == (302, "/")
    return client


def test_item12_production_hashes_passwords_with_argon2id_at_owasp_cost(production_hashers):
    hasher = get_hasher()
    assert hasher.algorithm == "argon2"
    # OWASP Password Storage Cheat Sheet, Argon2id: 19 MiB of memory, 2 passes, 1 lane.
    assert (hasher.memory_cost, hasher.time_cost, hasher.parallelism) == (19 * 1024, 2, 1)
    assert hasher.encode(PASSWORD, hasher.salt()).startswith("argon2$argon2id$v=19$m=19456,t=2,p=1$")
    # The hashers of the passwords stored before stay, so those still sign in.
    assert "django.contrib.auth.hashers.PBKDF2PasswordHasher" in PRODUCTION_HASHERS


def test_item12_a_pbkdf2_password_signs_in_once_re_hashed_then_as_argon2id(
    production_hashers, django_assert_max_num_queries
):
    legacy = PBKDF2PasswordHasher()
    # A password as gpupool stored it before (few iterations: the test's speed, same algorithm).
    User.objects.create(username="pat", password=legacy.encode(PASSWORD, legacy.salt(), 1000))

    with django_assert_max_num_queries(SIGN_IN_QUERIES + 1):
        _sign_in()
    stored = User.objects.get(username="pat").password
    assert identify_hasher(stored).algorithm == "argon2"
    assert not get_hasher().must_update(stored)

    with django_assert_max_num_queries(SIGN_IN_QUERIES):  # nothing left to re-hash
        _sign_in()
    assert User.objects.get(username="pat").password == stored
