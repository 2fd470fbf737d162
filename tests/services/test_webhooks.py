"""Webhooks (issue 24 item 7): each vendor's payload and signature checked by a real HTTP
receiver that verifies them as the vendor documents; one project delivery per event; retries
with backoff driven by an explicit clock; vendor errors in 200 answers; SSRF refusals."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_noop

from portal.models import DeliveryStatus, Webhook, WebhookDelivery
from portal.notifications import notify
from portal.texts import message
from portal.webhook_delivery import (
    MAX_ATTEMPTS,
    TEST_SENDS,
    TooManyTestSends,
    delivery_attempt,
    webhook_test_send,
)
from portal.webhooks import deliveries_due_ids, url_problem, webhook_create
from tests.webhook_receiver import start_receiver

SECRETS = {"dingtalk": "SECdingtalk-secret", "feishu": "feishu-secret", "json": "json-secret"}
TEXT = gettext_noop("Approved: %(summary)s")


@pytest.fixture
def receiver(settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": ["127.0.0.1"],
                        "SITE_URL": "https://gpupool.example"}
    rec, server = start_receiver(secrets=dict(SECRETS))
    yield rec
    server.shutdown()
    server.server_close()


def _hook(owner, kind, receiver, *, project=None, language="en", secret=None, topics=()):
    return webhook_create(
        actor=owner, kind=kind, name=f"{kind} hook", url=f"{receiver.url}/{kind}/robot",
        secret=SECRETS.get(kind, "") if secret is None else secret, topics=topics, language=language,
        project=project,
    )


def _notify(world, recipients, **kw):
    kw.setdefault("project", world.pa1)
    kw.setdefault("topic", "job")
    return notify(recipients=recipients, text=message(TEXT, summary="job train-7"), link="/jobs/7/", **kw)


def _send_all(now=None) -> list[str]:
    now = now or timezone.now()
    return [delivery_attempt(pk, now=now) for pk in deliveries_due_ids(now)]


def test_each_kind_is_delivered_in_its_vendor_format_with_a_signature_the_receiver_verifies(world, receiver):
    member = world.users["pa1_member"]
    for kind in ("wecom", "dingtalk", "feishu", "json"):
        _hook(member, kind, receiver)
    (note,) = _notify(world, [member])
    assert _send_all() == ["delivered"] * 4
    assert all(r.verified for r in receiver.received) and len(receiver.received) == 4

    wecom = receiver.of("wecom")[0].body
    assert wecom["msgtype"] == "markdown"
    assert "Approved: job train-7" in wecom["markdown"]["content"]
    assert "[Open](https://gpupool.example/jobs/7/)" in wecom["markdown"]["content"]
    ding = receiver.of("dingtalk")[0]
    assert ding.body["msgtype"] == "markdown" and ding.body["markdown"]["title"] == "gpupool · Job approvals"
    assert {"timestamp", "sign"} <= set(ding.query)
    feishu = receiver.of("feishu")[0].body
    assert feishu["msg_type"] == "text" and "https://gpupool.example/jobs/7/" in feishu["content"]["text"]
    js = receiver.of("json")[0]
    assert js.body == {
        "event": "notification", "id": f"n{note.pk}-w{Webhook.objects.get(kind='json').pk}", "topic": "job",
        "title": "gpupool · Job approvals", "text": "Approved: job train-7",
        "link": "https://gpupool.example/jobs/7/", "project": "pa1", "recipient": "pa1_member",
        "created_at": note.created_at.isoformat(), "language": "en",
    }
    assert js.headers["x-gpupool-event"] == js.body["id"]
    log = WebhookDelivery.objects.filter(notification=note)
    assert {(d.status, d.http_status, d.attempt) for d in log} == {
        ("delivered", 200, 1), ("delivered", 204, 1)}


def test_a_hook_speaks_its_own_language(world, receiver):
    member = world.users["pa1_member"]
    _hook(member, "wecom", receiver, language="zh-hans")
    _notify(world, [member])
    _send_all()
    content = receiver.of("wecom")[0].body["markdown"]["content"]
    assert "任务审批" in content and "已批准" in content and "[打开]" in content


def test_a_project_hook_gets_one_delivery_per_event_and_each_recipient_their_own(world, receiver):
    admin, member = world.users["pa1_admin"], world.users["pa1_member"]
    project_hook = _hook(admin, "json", receiver, project=world.pa1)
    own = _hook(member, "wecom", receiver)
    budget_only = _hook(admin, "feishu", receiver, project=world.pa1, topics=["budget"])
    notes = _notify(world, [admin, member, world.users["a_admin"]])
    assert project_hook.deliveries.count() == 1 and own.deliveries.get().notification.recipient == member
    assert not budget_only.deliveries.exists()
    other = notify(recipients=[member], text="x", project=world.pb, topic="job")
    assert project_hook.deliveries.count() == 1 and own.deliveries.count() == 2
    assert _send_all() == ["delivered"] * 3
    assert receiver.of("json")[0].body["recipient"] == "" and notes and other


def test_inactive_hooks_get_nothing(world, receiver):
    member = world.users["pa1_member"]
    hook = _hook(member, "wecom", receiver)
    Webhook.objects.filter(pk=hook.pk).update(active=False)
    _notify(world, [member])
    assert not WebhookDelivery.objects.exists()


def test_a_failing_receiver_is_retried_with_backoff_until_it_answers(world, receiver):
    member = world.users["pa1_member"]
    hook = _hook(member, "dingtalk", receiver)
    receiver.script["dingtalk"] = [(500, b"down"), (503, b"still down")]
    (note,) = _notify(world, [member])
    t0 = note.created_at
    assert _send_all(t0) == ["failed"]
    assert _send_all(t0 + timedelta(seconds=59)) == []  # the backoff has not passed
    assert _send_all(t0 + timedelta(minutes=1)) == ["failed"]
    assert _send_all(t0 + timedelta(minutes=5)) == []
    assert _send_all(t0 + timedelta(minutes=6)) == ["delivered"]
    log = list(hook.deliveries.order_by("attempt"))
    assert [(d.attempt, d.status, d.http_status) for d in log] == [
        (1, "failed", 500), (2, "failed", 503), (3, "delivered", 200)]
    assert log[0].error == "HTTP 500: down"
    assert log[1].next_attempt_at == t0 + timedelta(minutes=1)
    assert log[2].next_attempt_at == t0 + timedelta(minutes=6)
    assert len(receiver.received) == 3 and receiver.received[-1].verified


def test_it_gives_up_after_the_last_attempt_and_says_so(world, receiver):
    member = world.users["pa1_member"]
    hook = _hook(member, "wecom", receiver)
    receiver.script["wecom"] = [(500, b"no")] * 10
    now = timezone.now()
    _notify(world, [member])
    for _ in range(MAX_ATTEMPTS + 2):
        _send_all(now)
        now += timedelta(hours=3)
    log = list(hook.deliveries.order_by("attempt"))
    assert [d.status for d in log] == ["failed"] * (MAX_ATTEMPTS - 1) + ["gave_up"]
    assert log[-1].error.endswith(f"gave up after {MAX_ATTEMPTS} attempts")
    assert len(receiver.received) == MAX_ATTEMPTS


@pytest.mark.parametrize(("kind", "error"), [
    ("dingtalk", "errcode 310000: sign not match"),
    ("feishu", "code 19021: sign match fail"),
])
def test_a_vendor_error_in_a_200_answer_is_a_failure(world, receiver, kind, error):
    member = world.users["pa1_member"]
    hook = _hook(member, kind, receiver, secret="the-wrong-secret")
    _notify(world, [member])
    assert _send_all() == ["failed"]
    first = hook.deliveries.get(attempt=1)
    assert (first.http_status, first.error) == (200, error)
    assert hook.deliveries.filter(attempt=2, status="pending").exists()


def test_wecom_errcode_is_a_failure(world, receiver):
    member = world.users["pa1_member"]
    hook = _hook(member, "wecom", receiver)
    receiver.script["wecom"] = [(200, b'{"errcode":93000,"errmsg":"invalid webhook url"}')]
    _notify(world, [member])
    assert _send_all() == ["failed"]
    assert hook.deliveries.get(attempt=1).error == "errcode 93000: invalid webhook url"


def test_a_replayed_json_timestamp_is_rejected_by_the_receiver(world, receiver):
    member = world.users["pa1_member"]
    hook = _hook(member, "json", receiver)
    receiver.clock = timezone.now().timestamp() + 3600  # the receiver's clock: an hour later
    _notify(world, [member])
    assert _send_all() == ["failed"]
    assert hook.deliveries.get(attempt=1).http_status == 401


def test_a_redirect_is_not_followed(world, receiver):
    member = world.users["pa1_member"]
    hook = _hook(member, "json", receiver)
    receiver.script["json"] = [(302, b"")]
    _notify(world, [member])
    assert _send_all() == ["failed"]
    assert hook.deliveries.get(attempt=1).http_status == 302 and len(receiver.received) == 1


def test_a_claimed_attempt_is_made_once(world, receiver):
    member = world.users["pa1_member"]
    _hook(member, "wecom", receiver)
    _notify(world, [member])
    (pk,) = deliveries_due_ids(timezone.now())
    assert delivery_attempt(pk) == "delivered"
    assert delivery_attempt(pk) == "" and len(receiver.received) == 1


@pytest.mark.parametrize("url", [
    "http://hooks.example.com/x",  # not https
    "https://127.0.0.1/x", "https://10.1.2.3/x", "https://169.254.169.254/latest/meta-data",
    "https://[::1]/x", "https://[::ffff:192.168.0.1]/x", "https://user:pw@hooks.example.com/x",
    "ftp://hooks.example.com/x", "not a url",
])
def test_unsafe_urls_are_refused_when_saved(world, url, english):
    assert url_problem(url)
    with pytest.raises(ValidationError) as exc:
        webhook_create(actor=world.users["pa1_member"], kind="wecom", name="x", url=url)
    assert "url" in exc.value.error_dict


def test_a_name_that_resolves_to_a_private_address_is_refused_at_send_time(world, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": []}
    member = world.users["pa1_member"]
    hook = webhook_create(actor=member, kind="wecom", name="x", url="https://localhost/robot")
    plain = Webhook.objects.create(user=member, kind="wecom", name="y", url="http://127.0.0.1:9/robot")
    _notify(world, [member])
    # Not sent; tried again later like a name that does not resolve (DNS may change).
    assert sorted(_send_all()) == ["failed", "gave_up"]
    assert hook.deliveries.get(attempt=1).error == "not sent: localhost has no address a webhook may use"
    assert plain.deliveries.get().error == "refused: the URL must use https"


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_item22_delivery_errors_do_not_say_where_a_name_leads(world, settings):
    """The log a hook's owner reads: a name resolving to a private address and a name that does
    not resolve read alike and are retried alike; a transport error names its kind and the host
    as written, not the address connected to (the exception's text has it)."""
    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": []}
    member = world.users["pa1_member"]
    private = webhook_create(actor=member, kind="wecom", name="p", url="https://localhost/robot")
    nowhere = webhook_create(actor=member, kind="wecom", name="n", url="https://no-such-host.invalid/robot")
    _notify(world, [member])
    assert _send_all() == ["failed", "failed"]
    errors = {hook.name: hook.deliveries.get(attempt=1).error for hook in (private, nowhere)}
    assert errors == {"p": "not sent: localhost has no address a webhook may use",
                      "n": "not sent: no-such-host.invalid has no address a webhook may use"}
    assert {h.deliveries.filter(attempt=2, status="pending").count() for h in (private, nowhere)} == {1}

    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": ["localhost"]}
    closed = webhook_create(actor=member, kind="wecom", name="c", url=f"http://localhost:{_closed_port()}/x")
    row = webhook_test_send(actor=member, webhook=closed)
    assert (row.status, row.error) == ("gave_up", "could not connect: localhost")
    logged = " ".join(WebhookDelivery.objects.values_list("error", flat=True))
    assert "127.0.0.1" not in logged and "::1" not in logged and "Errno" not in logged


def test_item22_test_messages_are_limited_per_user(world, receiver):
    member, other = world.users["pa1_member"], world.users["pb_member"]
    hooks = [_hook(member, "wecom", receiver), _hook(member, "feishu", receiver)]
    for i in range(TEST_SENDS):
        assert webhook_test_send(actor=member, webhook=hooks[i % 2], now_s=1000.0 + i).status == "delivered"
    with pytest.raises(TooManyTestSends) as refused:
        webhook_test_send(actor=member, webhook=hooks[0], now_s=1010.0)
    assert refused.value.wait == 51  # the first of the five leaves the minute at 1060
    assert WebhookDelivery.objects.count() == TEST_SENDS and len(receiver.received) == TEST_SENDS
    # Another user's budget is their own; the member's comes back as the minute slides.
    assert webhook_test_send(actor=other, webhook=_hook(other, "wecom", receiver), now_s=1010.0).status
    assert webhook_test_send(actor=member, webhook=hooks[0], now_s=1060.5).status == "delivered"


def test_a_json_hook_needs_a_secret(world, receiver, english):
    with pytest.raises(ValidationError) as exc:
        _hook(world.users["pa1_member"], "json", receiver, secret="")
    assert "secret" in exc.value.error_dict
    assert DeliveryStatus.PENDING == "pending"
