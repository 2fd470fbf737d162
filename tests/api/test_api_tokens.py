"""Personal API tokens (issue 32 item 16, docs/identity.md "API tokens"): many per user, named,
expiring, stored as a SHA-256 only, shown once, listed, revoked — on the API and on the page —
and dead with their user. Tokens from before (DRF's, kept in clear) are migrated, hashed."""

from __future__ import annotations

import hashlib
import importlib
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from portal import tokens
from portal.directory import deactivate_user
from portal.models import ApiToken, User

pytestmark = pytest.mark.django_db

LIST = reverse("api:apitoken-list")


def _script(secret: str) -> APIClient:
    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def _works(secret: str) -> bool:
    status = _script(secret).get(reverse("api:me")).status_code
    assert status in (200, 401), status
    return status == 200


@pytest.fixture
def alice(db):
    return User.objects.create_user(username="alice", password="pw-alice")


@pytest.fixture
def bob(db):
    return User.objects.create_user(username="bob", password="pw-bob")


def _signed_in(user) -> APIClient:
    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.force_authenticate(user)
    return client


def test_item16_a_token_is_stored_hashed_and_shown_only_in_the_answer_that_made_it(alice):
    made = _signed_in(alice).post(LIST, {"name": "laptop script", "expires_in_days": 30}, format="json")
    assert made.status_code == 201, made.content
    secret = made.json()["token"]
    assert secret.startswith("gpp_") and len(secret) >= 40
    row = ApiToken.objects.get(pk=made.json()["id"])
    assert row.digest == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in str(list(ApiToken.objects.values_list()))  # nothing stores it in clear
    assert made.json()["prefix"] == secret[:12] == row.prefix
    assert row.expires_at - row.created_at == timedelta(days=30)
    listed = _signed_in(alice).get(LIST).json()["results"]
    assert [(t["name"], t["token"], t["expired"]) for t in listed] == [("laptop script", None, False)]
    assert _signed_in(alice).get(reverse("api:apitoken-detail", args=[row.pk])).json()["token"] is None
    assert _works(secret)


def test_item16_many_named_tokens_per_user_each_works_until_revoked(alice):
    first = tokens.api_token_create(actor=alice, name="ci")
    second = tokens.api_token_create(actor=alice, name="notebook")
    assert _works(first.secret) and _works(second.secret)
    first.token.refresh_from_db()
    assert first.token.last_used_at is not None
    answer = _signed_in(alice).delete(reverse("api:apitoken-detail", args=[first.token.pk]))
    assert answer.status_code == 204
    assert not _works(first.secret) and _works(second.secret)
    response = _script(first.secret).get(reverse("api:me"))
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Token")
    assert [t["name"] for t in _signed_in(alice).get(LIST).json()["results"]] == ["notebook"]


def test_item16_an_expired_token_answers_401_and_is_shown_expired(alice):
    issued = tokens.api_token_create(actor=alice, name="old", expires_in_days=1,
                                     now=timezone.now() - timedelta(days=2))
    assert not _works(issued.secret)
    (row,) = _signed_in(alice).get(LIST).json()["results"]
    assert row["expired"] is True  # listed a week after expiry, so a failing script's cause shows


def test_item16_another_users_token_is_404_and_stays(alice, bob):
    issued = tokens.api_token_create(actor=alice, name="mine")
    detail = reverse("api:apitoken-detail", args=[issued.token.pk])
    assert _signed_in(bob).get(detail).status_code == 404
    assert _signed_in(bob).delete(detail).status_code == 404
    assert _signed_in(bob).get(LIST).json()["results"] == []
    assert _works(issued.secret)


@pytest.mark.parametrize("body", [
    {"name": "", "expires_in_days": 30},
    {"name": "   ", "expires_in_days": 30},
    {"name": "x" * 81, "expires_in_days": 30},
    {"name": "ok", "expires_in_days": 0},
    {"name": "ok", "expires_in_days": 366},
    {"name": "ok", "expires_in_days": "soon"},
    {"expires_in_days": 30},
])
def test_item16_bad_input_is_a_400_and_makes_nothing(alice, body):
    response = _signed_in(alice).post(LIST, body, format="json")
    assert response.status_code == 400, response.content
    assert not ApiToken.objects.exists()


def test_item16_the_longest_life_is_the_centres_setting(alice, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "API_TOKEN_MAX_DAYS": 30}
    client = _signed_in(alice)
    assert client.post(LIST, {"name": "a", "expires_in_days": 31}, format="json").status_code == 400
    assert client.post(LIST, {"name": "a", "expires_in_days": 30}, format="json").status_code == 201


def test_item16_deactivating_the_user_revokes_every_token(alice):
    issued = [tokens.api_token_create(actor=alice, name=f"t{i}") for i in range(3)]
    deactivate_user(alice, reason="left the centre")
    assert not any(_works(i.secret) for i in issued)
    reasons = set(ApiToken.objects.values_list("revoked_reason", flat=True))
    assert reasons == {"user deactivated: left the centre"}
    # Deactivated by hand in the admin (no service call): the tokens of an inactive user never work.
    bob = User.objects.create_user(username="bob2")
    kept = tokens.api_token_create(actor=bob, name="x")
    User.objects.filter(pk=bob.pk).update(is_active=False)
    assert not _works(kept.secret)


def test_item16_every_persona_sees_and_revokes_only_its_own_tokens(alice, bob):
    admin = User.objects.create_superuser(username="root", password="pw")
    mine = {u.username: tokens.api_token_create(actor=u, name=f"of {u.username}")
            for u in (alice, bob, admin)}
    for user in (alice, bob, admin):
        client = _signed_in(user)
        assert [t["name"] for t in client.get(LIST).json()["results"]] == [f"of {user.username}"]
        for owner, issued in mine.items():
            status = client.get(reverse("api:apitoken-detail", args=[issued.token.pk])).status_code
            assert status == (200 if owner == user.username else 404)
    assert APIClient().get(LIST).status_code in (401, 403)


def test_item16_the_password_exchange_makes_a_new_hashed_token_each_time(alice):
    url = reverse("api:token")
    credentials = {"username": "alice", "password": "pw-alice"}
    answers = [APIClient().post(url, credentials, format="json") for _ in "ab"]
    assert [a.status_code for a in answers] == [200, 200]
    first, second = (a.json()["token"] for a in answers)
    assert first != second and _works(first) and _works(second)
    assert ApiToken.objects.filter(user=alice, name="password exchange").count() == 2
    named = APIClient().post(url, {"username": "alice", "password": "pw-alice", "name": "cron",
                                   "expires_in_days": 7}, format="json")
    row = ApiToken.objects.get(user=alice, name="cron")
    assert row.expires_at - row.created_at == timedelta(days=7)
    assert named.json()["expires_at"]


def test_item16_tokens_from_before_are_hashed_and_keep_working(alice):
    """The migration: DRF's clear keys (authtoken_token) become personal tokens, and are deleted."""
    migration = importlib.import_module("portal.migrations.0012_personal_api_tokens")
    key = "0123456789abcdef0123456789abcdef01234567"
    with connection.cursor() as cursor:
        cursor.execute('CREATE TABLE "authtoken_token" ("key" varchar(40) PRIMARY KEY, '
                       '"created" timestamptz NOT NULL, "user_id" integer NOT NULL)')
        cursor.execute('INSERT INTO "authtoken_token" VALUES (%s, now(), %s)', [key, alice.pk])
    from django.apps import apps

    with connection.schema_editor() as editor:
        migration.hash_legacy_tokens(apps, editor)
    with connection.cursor() as cursor:
        cursor.execute('SELECT count(*) FROM "authtoken_token"')
        assert cursor.fetchone()[0] == 0
    row = ApiToken.objects.get(user=alice)
    assert (row.prefix, row.digest) == (key[:8], hashlib.sha256(key.encode()).hexdigest())
    assert row.expires_at > timezone.now() + timedelta(days=360)
    assert _works(key)


def test_item16_long_ended_tokens_are_pruned(alice):
    old = tokens.api_token_create(actor=alice, name="old", expires_in_days=1,
                                  now=timezone.now() - timedelta(days=100))
    live = tokens.api_token_create(actor=alice, name="live")
    assert tokens.api_tokens_prune() == 1
    assert list(ApiToken.objects.values_list("pk", flat=True)) == [live.token.pk]
    assert not ApiToken.objects.filter(pk=old.token.pk).exists()


# --- the page -------------------------------------------------------------------------------------


def _page(user, language="en") -> Client:
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client


def test_item16_the_page_makes_a_token_shows_it_once_lists_and_revokes(alice, bob):
    page = _page(alice)
    url = reverse("api-token-list")
    assert b'href="/account/api-tokens/"' in page.get("/").content  # the user menu links it
    made = page.post(url, {"name": "batch runner", "expires_in_days": "30"})
    assert made.status_code == 200 and made["Cache-Control"] == "no-store"
    row = ApiToken.objects.get(user=alice)
    secret = made.context["issued"].secret
    body = made.content.decode()
    assert secret in body and "shown only this once" in body
    assert _works(secret)
    again = page.get(url).content.decode()
    assert secret not in again and row.prefix in again and "batch runner" in again
    assert _page(bob).post(reverse("api-token-revoke", args=[row.pk])).status_code == 404
    assert _works(secret)
    assert page.post(reverse("api-token-revoke", args=[row.pk])).status_code == 302
    assert not _works(secret)
    after = page.get(url).content.decode()
    assert f'id="api-token-{row.pk}"' not in after and "was revoked" in after


@pytest.mark.parametrize("form", [
    {"name": "", "expires_in_days": "30"}, {"name": "x", "expires_in_days": "9999"},
    {"name": "x", "expires_in_days": "abc"},
])
def test_item16_the_page_refuses_bad_input_with_a_400(alice, form):
    response = _page(alice).post(reverse("api-token-list"), form)
    assert response.status_code == 400 and response.context["form"].errors
    assert not ApiToken.objects.exists()


def test_item16_the_page_speaks_chinese(alice):
    page = _page(alice, "zh-hans")
    body = page.get(reverse("api-token-list")).content.decode()
    assert "API 令牌" in body and "新建令牌" in body
    made = page.post(reverse("api-token-list"), {"name": "脚本", "expires_in_days": "7"}).content.decode()
    assert "只显示这一次" in made


def test_item16_platform_admins_revoke_any_token_in_the_admin_without_seeing_its_digest(alice):
    from tests import factories as fx

    issued = tokens.api_token_create(actor=alice, name="forgotten laptop")
    admin = Client(HTTP_ACCEPT_LANGUAGE="en")
    admin.force_login(fx.platform_admin())
    url = reverse("admin:portal_apitoken_changelist")
    listing = admin.get(url).content.decode()
    assert "forgotten laptop" in listing and issued.token.digest not in listing
    detail = admin.get(reverse("admin:portal_apitoken_change", args=[issued.token.pk])).content.decode()
    assert issued.token.digest not in detail
    answer = admin.post(url, {"action": "revoke", "_selected_action": [issued.token.pk]})
    assert answer.status_code == 302
    assert not _works(issued.secret)
    assert ApiToken.objects.get().revoked_reason == "revoked by root-admin in the admin"
