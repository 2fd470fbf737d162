"""Sending one webhook attempt (docs/notifications.md): claim the row, check where the URL
leads, POST the vendor's payload, record what came back, and queue the next attempt with
backoff or give up.

Safety: the host is resolved here, at send time, and the request goes to the address that was
checked (no second lookup a rebinding DNS could answer differently); private, loopback,
link-local and other non-public addresses are refused, and plain http too, unless the host is
in ``GPUPOOL["WEBHOOK_ALLOW_HOSTS"]``. Redirects are never followed (a 3xx is a failure).

The log a hook's owner reads never says where a name leads (issue 32 item 22): a name that does
not resolve and one that resolves to a non-public address get the same words and the same
retries, and a transport error is named by its kind (timed out, could not connect, TLS), never by
the exception's text, which carries the address connected to. The detail goes to the server log.
A user's test messages are limited to ``TEST_SENDS`` a minute: each is an outbound request the
portal makes on their behalf, at once."""

from __future__ import annotations

import ipaddress
import logging
import socket
import ssl
import time
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import urllib3
from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.utils import timezone, translation
from django.utils.translation import gettext, gettext_noop

from . import webhook_formats as formats
from .models import DeliveryStatus, NotificationTopic, WebhookDelivery
from .texts import message, render_in
from .webhooks import CLAIM_TIMEOUT, is_public

log = logging.getLogger(__name__)

# Attempt n failed → attempt n+1 after BACKOFF[n-1]; the attempt after the last one is the last.
BACKOFF = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=30), timedelta(hours=2))
MAX_ATTEMPTS = len(BACKOFF) + 1
ANSWER_BYTES = 65536
# Test messages a user may send a minute, all hooks together (the page and the API alike).
TEST_SENDS = 5
TEST_WINDOW_SECONDS = 60


class Refused(Exception):
    """The target is not allowed; trying again will not change that."""


class NoPublicAddress(OSError):
    """The host did not resolve, or not to public addresses only: not sent, tried again later
    (DNS may change). One message for both, so the log is no oracle for internal names."""


class TooManyTestSends(Exception):
    def __init__(self, wait: int):
        super().__init__(f"too many test messages: wait {wait} s")
        self.wait = wait


def _claim(pk: int, now: datetime) -> bool:
    due = Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=DeliveryStatus.SENDING, claimed_at__lt=now - CLAIM_TIMEOUT
    )
    return bool(
        WebhookDelivery.objects.filter(due, pk=pk).update(status=DeliveryStatus.SENDING, claimed_at=now)
    )


def delivery_attempt(pk: int, *, now: datetime | None = None) -> str:
    """Make attempt ``pk`` if it is due and nobody else is making it; returns its status after
    (or "" when there was nothing to do). Idempotent: a repeated task finds the row claimed or ended."""
    now = now or timezone.now()
    if not _claim(pk, now):
        return ""
    related = ("webhook", "notification__recipient", "notification__project")
    row = WebhookDelivery.objects.select_related(*related).get(pk=pk)
    hook = row.webhook
    if not hook.active:
        return _finish(row, now, DeliveryStatus.GAVE_UP, None, gettext_noop("The webhook is switched off."))
    try:
        outgoing = formats.build(hook.kind, hook.url, _event(row), secret=hook.secret, now_s=now.timestamp())
        code, answer = _post(outgoing)
    except Refused as exc:
        return _finish(row, now, DeliveryStatus.GAVE_UP, None, str(exc))
    except Exception as exc:  # any transport error (timeout, refused connection, TLS): retry later
        log.info("webhook %s delivery %s failed: %r", hook.pk, pk, exc)
        return _failed(row, now, None, transport_error(exc, hook.url))
    if not 200 <= code < 300:
        return _failed(row, now, code, f"HTTP {code}: {answer[:150].decode(errors='replace')}")
    problem = formats.vendor_error(hook.kind, answer)
    if problem:
        return _failed(row, now, code, problem)
    return _finish(row, now, DeliveryStatus.DELIVERED, code, "")


def _failed(row: WebhookDelivery, now: datetime, code: int | None, error: str) -> str:
    if row.notification_id is None or row.attempt >= MAX_ATTEMPTS:  # a test message is tried once
        suffix = "" if row.notification_id is None else f" — gave up after {row.attempt} attempts"
        return _finish(row, now, DeliveryStatus.GAVE_UP, code, error[: 300 - len(suffix)] + suffix)
    status = _finish(row, now, DeliveryStatus.FAILED, code, error)
    if status == DeliveryStatus.FAILED:
        when = now + BACKOFF[row.attempt - 1]
        WebhookDelivery.objects.get_or_create(
            webhook_id=row.webhook_id, notification_id=row.notification_id, attempt=row.attempt + 1,
            defaults={"next_attempt_at": when, "created_at": now},
        )
    return status


def _finish(row: WebhookDelivery, now: datetime, status: str, code: int | None, error: str) -> str:
    # Only the claim that is still ours ends the row: a send that outlived its claim and was
    # retried by someone else leaves the row to them.
    done = WebhookDelivery.objects.filter(pk=row.pk, status=DeliveryStatus.SENDING, claimed_at=now).update(
        status=status, http_status=code, error=error[:300], at=now
    )
    return status if done else ""


def _event(row: WebhookDelivery) -> formats.Event:
    hook, note = row.webhook, row.notification
    language = hook.language
    with translation.override(language):
        site = settings.GPUPOOL["SITE_URL"].rstrip("/")
        if note is None:
            test = gettext_noop("This is a test message from gpupool: the webhook %(name)s works.")
            text = render_in(language, message(test, name=hook.name))
            return formats.Event(
                event_id=f"test-{row.pk}", title="gpupool", text=text, link=site + "/notifications/webhooks/",
                link_label=gettext("Open"), language=language, test=True,
            )
        topic = note.topic if note.topic in NotificationTopic.values else NotificationTopic.OTHER
        link = note.link
        if link.startswith("/"):
            link = site + link
        return formats.Event(
            event_id=f"n{note.pk}-w{hook.pk}",
            title=f"gpupool · {NotificationTopic(topic).label}",
            text=render_in(language, note.message, fallback=note.text),
            link=link,
            link_label=gettext("Open"),
            topic=topic,
            project=note.project.code if note.project_id else "",
            recipient=note.recipient.username if hook.user_id else "",
            created_at=note.created_at.isoformat(),
            language=language,
        )


def _target(url: str) -> tuple[str, str, int, bool]:
    """(scheme, host, port, allowed) after the checks that need no lookup."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    allowed = host in settings.GPUPOOL["WEBHOOK_ALLOW_HOSTS"]
    if parts.scheme != "https" and not (parts.scheme == "http" and allowed):
        raise Refused("refused: the URL must use https")
    return parts.scheme, host, parts.port or (443 if parts.scheme == "https" else 80), allowed


def _resolve(host: str, port: int, allowed: bool) -> str:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        log.info("webhook host %r does not resolve: %r", host, exc)
        raise NoPublicAddress(host) from exc
    addresses = [info[4][0] for info in infos]
    if not allowed:
        for address in addresses:
            if not is_public(ipaddress.ip_address(address.split("%")[0])):
                log.info("webhook host %r resolves to the non-public address %s", host, address)
                raise NoPublicAddress(host)
    return addresses[0]


def transport_error(exc: BaseException, url: str) -> str:
    """What the log says of a failed send: the kind of failure and the host as the URL names it —
    never the exception's text, which names the address connected to."""
    host = (urlsplit(url).hostname or "").lower()
    if isinstance(exc, NoPublicAddress):
        return f"not sent: {host} has no address a webhook may use"
    # urllib3's NewConnectionError is a ConnectTimeoutError too: ask for it first.
    if isinstance(exc, urllib3.exceptions.NewConnectionError | ConnectionError):
        return f"could not connect: {host}"
    if isinstance(exc, urllib3.exceptions.TimeoutError | socket.timeout | TimeoutError):
        return f"timed out: {host}"
    if isinstance(exc, urllib3.exceptions.SSLError | ssl.SSLError):
        return f"TLS failed: {host}"
    if isinstance(exc, urllib3.exceptions.ProtocolError):
        return f"the connection to {host} broke off"
    return f"not sent: {host} ({type(exc).__name__})"


def _post(outgoing: formats.Outgoing) -> tuple[int, bytes]:
    scheme, host, port, allowed = _target(outgoing.url)
    address = _resolve(host, port, allowed)
    seconds = settings.GPUPOOL["WEBHOOK_TIMEOUT_SECONDS"]
    timeout = urllib3.Timeout(connect=seconds, read=seconds)
    if scheme == "https":
        # Connect to the checked address; TLS still names and verifies the host.
        pool = urllib3.HTTPSConnectionPool(
            address, port, timeout=timeout, retries=False, server_hostname=host, assert_hostname=host
        )
    else:
        pool = urllib3.HTTPConnectionPool(address, port, timeout=timeout, retries=False)
    parts = urlsplit(outgoing.url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {**outgoing.headers, "Host": parts.netloc, "User-Agent": "gpupool-webhooks/1"}
    with pool:
        response = pool.urlopen(
            "POST", path, body=outgoing.body, headers=headers, redirect=False, retries=False,
            preload_content=False,
        )
        try:
            return response.status, response.read(ANSWER_BYTES)
        finally:
            response.release_conn()


def _spend_test_send(actor, now_s: float) -> None:
    """One of the user's ``TEST_SENDS`` a minute (a sliding window kept in the cache), or
    ``TooManyTestSends`` saying how long to wait."""
    key = f"webhook-test-sends:{actor.pk}"
    recent = [t for t in cache.get(key, []) if now_s - t < TEST_WINDOW_SECONDS]
    if len(recent) >= TEST_SENDS:
        raise TooManyTestSends(max(1, int(TEST_WINDOW_SECONDS - (now_s - min(recent))) + 1))
    cache.set(key, [*recent, now_s], timeout=TEST_WINDOW_SECONDS)


def webhook_test_send(*, actor, webhook, now_s: float | None = None) -> WebhookDelivery:
    """Send a test message to ``webhook`` now, once, and return its log row: whoever asked is
    looking at the page for the answer (up to the request timeout). The row commits first, so
    a crash mid-send leaves it for the sweep like any other attempt. Over the user's budget of
    test messages: ``TooManyTestSends``, and nothing is written or sent."""
    from django.db import transaction

    from .webhooks import webhook_test_queue

    with transaction.atomic():
        row = webhook_test_queue(actor=actor, webhook=webhook)  # may the actor? first
        _spend_test_send(actor, time.time() if now_s is None else now_s)
    delivery_attempt(row.pk, now=row.next_attempt_at)
    row.refresh_from_db()
    return row
