"""The webhooks API (issue 24 item 7) against personas: one's own hooks, a project's hooks for
those who may edit the project, another's a 404; the secret is never shown back; bad input is a
400 that changes nothing; a test send answers with its log row."""

from __future__ import annotations

import pytest
from django.urls import reverse

from portal.models import Webhook, WebhookDelivery
from tests.webhook_receiver import start_receiver

pytestmark = pytest.mark.django_db
LIST = reverse("api:webhook-list")


@pytest.fixture
def receiver(settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": ["127.0.0.1"]}
    rec, server = start_receiver(secrets={"dingtalk": "SECsecret"})
    yield rec
    server.shutdown()
    server.server_close()


def _detail(hook, suffix=""):
    return reverse(f"api:webhook-{suffix or 'detail'}", args=[hook.pk])


def test_a_user_adds_their_own_hook_and_never_sees_the_secret_again(world, api, receiver):
    member = api(world.users["pa1_member"])
    url = f"{receiver.url}/dingtalk?access_token=abcdef0123456789xyz"
    body = {"kind": "dingtalk", "name": "team", "url": url,
            "secret": "SECsecret", "topics": ["job", "quota"], "language": "en"}
    response = member.post(LIST, body, format="json")
    assert response.status_code == 201, response.json()
    out = response.json()
    assert out["has_secret"] is True and "secret" not in out and out["owner"] == "user"
    assert "abcdef0123456789xyz" not in str(out) and out["url"].endswith("access_token=abcd…")
    hook = Webhook.objects.get(pk=out["id"])
    assert (hook.user, hook.secret, hook.created_by) == (world.users["pa1_member"], "SECsecret", hook.user)
    assert [h["id"] for h in member.get(LIST).json()["results"]] == [hook.pk]
    assert api(world.users["pb_member"]).get(LIST).json()["results"] == []
    assert api(world.users["platform"]).get(_detail(hook)).status_code == 404  # personal, even to admins

    # A blank secret keeps the saved one; a new one replaces it.
    assert member.patch(_detail(hook), {"secret": "", "name": "team 2"}, format="json").status_code == 200
    hook.refresh_from_db()
    assert (hook.name, hook.secret) == ("team 2", "SECsecret")

    sent = member.post(_detail(hook, "test"))
    assert sent.status_code == 201 and sent.json()["status"] == "delivered", sent.json()
    assert receiver.received[0].verified
    log = member.get(_detail(hook, "deliveries")).json()
    assert [(d["status"], d["http_status"], d["notification"]) for d in log] == [("delivered", 200, None)]

    assert member.delete(_detail(hook)).status_code == 204
    assert not Webhook.objects.exists() and not WebhookDelivery.objects.exists()


def test_project_hooks_are_for_those_who_may_edit_the_project(world, api):
    body = {"kind": "wecom", "name": "pa1 room", "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k",
            "project": world.pa1.pk}
    # A member cannot name the project (it is not one they manage): a field error, nothing saved.
    refused = api(world.users["pa1_member"]).post(LIST, body, format="json")
    assert refused.status_code == 400 and "project" in refused.json()
    created = api(world.users["pa1_admin"]).post(LIST, body, format="json")
    assert created.status_code == 201 and created.json()["owner"] == "project"
    hook = Webhook.objects.get()
    assert hook.project == world.pa1 and hook.user is None
    for persona in ("pa1_admin", "a_admin", "platform"):
        assert api(world.users[persona]).get(_detail(hook)).status_code == 200, persona
    for persona in ("pa1_member", "pb_member", "b_admin", "auditor", "outsider"):
        client = api(world.users[persona])
        assert client.get(_detail(hook)).status_code == 404, persona
        assert client.patch(_detail(hook), {"name": "x"}, format="json").status_code == 404, persona
        assert client.delete(_detail(hook)).status_code == 404, persona
        assert client.post(_detail(hook, "test")).status_code == 404, persona
        assert client.get(_detail(hook, "deliveries")).status_code == 404, persona
    # Another project's admin cannot put a hook on pa1 either.
    other = api(world.users["b_admin"]).post(LIST, body, format="json")
    assert other.status_code == 400 and Webhook.objects.count() == 1


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "slack"}, "kind"),
    ({"url": "http://hooks.example.com/x"}, "url"),
    ({"url": "https://192.168.1.10/x"}, "url"),
    ({"url": "https://169.254.169.254/latest"}, "url"),
    ({"url": "https://[::1]/x"}, "url"),
    ({"url": "not a url"}, "url"),
    ({"url": "https://x" + "x" * 600 + ".cn/"}, "url"),
    ({"kind": "json", "secret": ""}, "secret"),
    ({"topics": ["weather"]}, "topics"),
    ({"language": "fr"}, "language"),
    ({"name": ""}, "name"),
    ({"project": 999999}, "project"),
])
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(world, api, body, field):
    good = {"kind": "wecom", "name": "x", "url": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=k"}
    response = api(world.users["pa1_admin"]).post(LIST, {**good, **body}, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert not Webhook.objects.exists()


def test_an_update_cannot_change_the_kind_or_point_at_a_private_address(world, api):
    client = api(world.users["pa1_member"])
    hook = client.post(LIST, {"kind": "wecom", "name": "x", "url": "https://qyapi.weixin.qq.com/s?key=k"},
                       format="json").json()
    refused = client.patch(reverse("api:webhook-detail", args=[hook["id"]]), {"url": "https://10.0.0.1/"},
                           format="json")
    assert refused.status_code == 400 and "url" in refused.json()
    assert Webhook.objects.get().url == "https://qyapi.weixin.qq.com/s?key=k"
    ignored = client.patch(reverse("api:webhook-detail", args=[hook["id"]]), {"kind": "json"}, format="json")
    assert ignored.status_code == 200 and Webhook.objects.get().kind == "wecom"


def test_item22_test_sends_are_throttled_on_the_api_and_the_page(world, api, receiver):
    """Each test message is an outbound request made at once on the user's behalf: 5 a minute per
    user, all hooks together; beyond, the API answers 429 with Retry-After and the page says so,
    and nothing is sent or logged."""
    from django.test import Client

    from portal.webhook_delivery import TEST_SENDS

    member = api(world.users["pa1_member"])
    body = {"kind": "wecom", "name": "team", "url": f"{receiver.url}/wecom/robot"}
    hook = Webhook.objects.get(pk=member.post(LIST, body, format="json").json()["id"])
    for _ in range(TEST_SENDS):
        assert member.post(_detail(hook, "test")).status_code == 201
    refused = member.post(_detail(hook, "test"))
    assert refused.status_code == 429, refused.content
    assert 1 <= int(refused["Retry-After"]) <= 61
    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(world.users["pa1_member"])
    answer = page.post(reverse("webhook-test", args=[hook.pk]), follow=True)
    assert "Too many test messages: try again in" in answer.content.decode()
    assert WebhookDelivery.objects.count() == TEST_SENDS and len(receiver.received) == TEST_SENDS
