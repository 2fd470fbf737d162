"""Webhooks: notifications sent on to chat robots and endpoints (issue 24 item 7,
docs/notifications.md). Writes (``webhook_*``), the reads of who may see which hook, and the
fan-out that ``notify`` calls; sending is ``portal.webhook_delivery``.

A user's own hooks get the notifications addressed to them; a project's hooks (managed by whoever
may edit the project: its admins, the department admins above it, platform admins) get every
notification about the project once per event — one ``notify`` call — however many people it
went to. A delivery row is written in the business transaction (the outbox) and sent after
commit."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.utils.translation import gettext as _

from . import permissions as perm
from .enqueue import enqueue
from .models import (
    DeliveryStatus,
    Notification,
    NotificationTopic,
    Project,
    User,
    Webhook,
    WebhookDelivery,
    WebhookKind,
)
from .selectors import scope_for

LOG_LENGTH = 50
# A send holds its claim this long (well past the request timeout); then a sweep may try again.
CLAIM_TIMEOUT = timedelta(minutes=2)
DELIVER_TASK = "portal.deliver_webhook"


# --- reads ---------------------------------------------------------------------------------


def _managed_projects_q(user: User) -> Q:
    scope = scope_for(user)
    if scope.platform_admin:
        return Q(project__isnull=False)
    return Q(project_id__in=scope.admin_projects) | Q(project__department_id__in=scope.admin_departments)


def visible_webhooks(user: User) -> QuerySet[Webhook]:
    """The user's own hooks and those of the projects they may edit; any other hook is a 404."""
    if not user.is_authenticated or not user.is_active:
        return Webhook.objects.none()
    return Webhook.objects.filter(Q(user=user) | _managed_projects_q(user)).select_related("project", "user")


def managed_projects(user: User) -> QuerySet[Project]:
    """The projects whose hooks ``user`` manages."""
    scope = scope_for(user)
    if scope.platform_admin:
        return Project.objects.all()
    return Project.objects.filter(
        Q(id__in=scope.admin_projects) | Q(department_id__in=scope.admin_departments)
    )


def webhook_log(webhook: Webhook, limit: int = LOG_LENGTH) -> QuerySet[WebhookDelivery]:
    """The hook's last attempts, newest first."""
    return webhook.deliveries.order_by("-id")[:limit]


# --- writes --------------------------------------------------------------------------------


def url_problem(url: str) -> str:
    """Why ``url`` cannot be a hook's address, or "". Send time checks again, with the address
    the name resolves to then (docs/notifications.md)."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        parts.port  # noqa: B018 — raises on a port that is not a number
    except ValueError:
        return _("Enter a valid URL.")
    if not host or parts.scheme not in ("http", "https"):
        return _("Enter a valid URL.")
    if parts.username or parts.password:
        return _("A webhook URL cannot carry a user name or password.")
    allowed = host in settings.GPUPOOL["WEBHOOK_ALLOW_HOSTS"]
    if parts.scheme != "https" and not allowed:
        return _(
            "A webhook URL must use https (plain http only to hosts listed in GPUPOOL_WEBHOOK_ALLOW_HOSTS)."
        )
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return ""
    if not allowed and not is_public(address):
        return _(
            "A webhook cannot point at a private, loopback or link-local address (unless its host is "
            "listed in GPUPOOL_WEBHOOK_ALLOW_HOSTS)."
        )
    return ""


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return address.is_global and not address.is_multicast


def _clean(data: dict, *, creating: bool, kind: str) -> dict:
    errors: dict[str, str] = {}
    if "name" in data and not (data["name"] or "").strip():
        errors["name"] = _("This field is required.")
    if "url" in data and (problem := url_problem(data["url"] or "")):
        errors["url"] = problem
    topics = data.get("topics")
    if topics is not None and any(t not in NotificationTopic.values for t in topics):
        errors["topics"] = _("Unknown topic.")
    if "language" in data and data["language"] not in dict(settings.LANGUAGES):
        errors["language"] = _("Unknown language.")
    if kind not in WebhookKind.values:
        errors["kind"] = _("Unknown kind.")
    if errors:
        raise ValidationError(errors)
    return data


def _require_owner(actor: User, *, user: User | None, project: Project | None) -> None:
    if project is not None:
        perm.require(perm.can_edit_project(scope_for(actor), project))
    elif user is None or user.pk != actor.pk:
        raise PermissionDenied(_("You do not have permission to change this."))


FIELDS = ("name", "url", "topics", "language", "active")


def webhook_create(
    *, actor: User, kind: str, name: str, url: str, secret: str = "", topics: Sequence[str] = (),
    language: str | None = None, active: bool = True, project: Project | None = None,
) -> Webhook:
    """A hook of ``project`` (its editors) or, without one, of ``actor`` themselves."""
    owner = None if project is not None else actor
    _require_owner(actor, user=owner, project=project)
    data = _clean({"name": name, "url": url, "topics": list(dict.fromkeys(topics)),
                   "language": language or settings.LANGUAGE_CODE}, creating=True, kind=kind)
    if kind == WebhookKind.JSON and not secret:
        raise ValidationError(
            {"secret": _("A JSON webhook needs a secret: receivers check the signature with it.")}
        )
    return Webhook.objects.create(
        user=owner, project=project, kind=kind, secret=secret.strip(), active=active, created_by=actor,
        **{**data, "name": data["name"].strip()},
    )


def webhook_update(*, actor: User, webhook: Webhook, secret: str | None = None, **changes) -> Webhook:
    """Change a hook. ``secret`` None or "" keeps the one saved (it is never shown back); the
    kind and the owner stay."""
    _require_owner(actor, user=webhook.user, project=webhook.project)
    unknown = set(changes) - set(FIELDS)
    if unknown:
        names = ", ".join(sorted(unknown))
        raise ValidationError({"detail": _("These cannot be changed: %(f)s") % {"f": names}})
    if "topics" in changes:
        changes["topics"] = list(dict.fromkeys(changes["topics"]))
    _clean(changes, creating=False, kind=webhook.kind)
    for name, value in changes.items():
        setattr(webhook, name, value.strip() if name == "name" else value)
    if secret:
        webhook.secret = secret.strip()
    webhook.save()
    return webhook


def webhook_delete(*, actor: User, webhook: Webhook) -> None:
    """Deletes the hook and its log."""
    _require_owner(actor, user=webhook.user, project=webhook.project)
    webhook.delete()


def webhook_test_queue(*, actor: User, webhook: Webhook) -> WebhookDelivery:
    """A test message to the hook: one attempt, no retries (whoever asked is looking at the
    result). The caller sends it (``webhook_delivery.delivery_attempt``) after commit."""
    _require_owner(actor, user=webhook.user, project=webhook.project)
    return WebhookDelivery.objects.create(webhook=webhook, notification=None)


# --- fan-out from notify() ------------------------------------------------------------------


def webhooks_fan_out(notes: Sequence[Notification]) -> list[WebhookDelivery]:
    """The first attempt of every delivery ``notes`` (one ``notify`` call) make: each
    recipient's own active hooks that want the topic, and once (with the first notification)
    each active hook of the project the notes concern. Sent after commit."""
    if not notes:
        return []
    first = notes[0]
    by_user = {n.recipient_id: n for n in notes}
    wanted = Q(user_id__in=list(by_user))
    if first.project_id is not None:
        wanted |= Q(project_id=first.project_id)
    rows = []
    for hook in Webhook.objects.filter(wanted, active=True).order_by("id"):
        if not hook.wants(first.topic):
            continue
        note = by_user[hook.user_id] if hook.user_id is not None else first
        rows.append(WebhookDelivery(webhook=hook, notification=note, next_attempt_at=note.created_at,
                                    created_at=note.created_at))
    created = WebhookDelivery.objects.bulk_create(rows)
    if created:
        enqueue(DELIVER_TASK, [d.pk for d in created])
    return created


def deliveries_due_ids(now) -> list[int]:
    """Pending attempts whose time has come (first attempts whose message was lost, retries
    after their backoff) and sends that have not finished within the claim timeout."""
    due = Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=DeliveryStatus.SENDING, claimed_at__lt=now - CLAIM_TIMEOUT
    )
    rows = WebhookDelivery.objects.filter(due).order_by("next_attempt_at", "id")
    return list(rows.values_list("pk", flat=True)[:500])


def deliveries_dispatch(now) -> int:
    """Beat: send the due attempts, one task each (a slow endpoint holds up only its own)."""
    ids = deliveries_due_ids(now)
    for pk in ids:
        enqueue(DELIVER_TASK, [pk])
    return len(ids)
