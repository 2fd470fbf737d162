"""In-app notifications and their e-mail (DESIGN §6).

A ``Notification`` row is written in the business transaction and is the outbox of its mail:
after commit a task sends the pending mails, and the minute beat task retries what is still
pending, so a crashed worker or a mail server down for a while delays a mail but loses none.
Each mail is claimed with a conditional update before it is sent, so two workers never send
one twice (a crash between sending and marking can still repeat it once, after the claim
times out — a duplicate mail is better than a lost one)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from .enqueue import enqueue
from .models import ApprovalRequest, MailState, Notification, NotificationTopic, Project, User
from .texts import Message, is_message, render_for_site, render_in
from .webhooks import webhooks_fan_out

log = logging.getLogger(__name__)

CLAIM_TIMEOUT = timedelta(minutes=10)
MAX_MAIL_ATTEMPTS = 5


def notify(
    *,
    recipients: Iterable[User],
    text: str | Message,
    link: str = "",
    request: ApprovalRequest | None = None,
    topic: str = "",
    project: Project | None = None,
) -> list[Notification]:
    """One in-app notification per distinct active recipient; those with an e-mail address
    also get a mail, sent after the transaction commits. ``text`` is a message
    (``portal.texts.message``) that every reader gets in their own language, or a plain text.
    ``topic`` (``NotificationTopic``; an approval's kind by default) and ``project`` (an
    approval's project by default) choose the webhooks it also goes to (``portal.webhooks``)."""
    now = timezone.now()
    if request is not None:
        topic = topic or request.kind
        project = project if project is not None else request.project
    topic = topic if topic in NotificationTopic.values else NotificationTopic.OTHER
    stored = text if is_message(text) else None
    text = render_for_site(text)
    seen, rows = set(), []
    for user in recipients:
        if user.pk in seen or not user.is_active:
            continue
        seen.add(user.pk)
        rows.append(
            Notification(
                recipient=user,
                request=request,
                text=text[:500],
                message=stored,
                link=link[:300],
                topic=topic,
                project=project,
                created_at=now,
                mail_state=MailState.PENDING if user.email else MailState.NONE,
            )
        )
    created = Notification.objects.bulk_create(rows)
    ids = [n.pk for n in created if n.mail_state == MailState.PENDING]
    if ids:
        enqueue("portal.send_notification_mail", ids)
    webhooks_fan_out(created)
    return created


def _claim(pk: int, now) -> bool:
    stale = now - CLAIM_TIMEOUT
    return bool(
        Notification.objects.filter(pk=pk, mail_state=MailState.PENDING)
        .filter(Q(mail_claimed_at__isnull=True) | Q(mail_claimed_at__lt=stale))
        .update(mail_claimed_at=now, mail_attempts=F("mail_attempts") + 1)
    )


def mail_pending(ids: Iterable[int] | None = None, *, now=None) -> int:
    """Send the pending mails (all of them, or those of ``ids``). Returns how many were sent."""
    now = now or timezone.now()
    pending = Notification.objects.filter(mail_state=MailState.PENDING)
    if ids is not None:
        pending = pending.filter(pk__in=list(ids))
    sent = 0
    for pk in pending.order_by("id").values_list("pk", flat=True)[:500]:
        if not _claim(pk, now):
            continue
        note = Notification.objects.select_related("recipient").get(pk=pk)
        text = mail_text(note)
        try:
            send_mail(
                subject=f"[gpupool] {text[:120]}",
                message=_mail_body(note, text),
                from_email=settings.DEFAULT_FROM_EMAIL,
                recipient_list=[note.recipient.email],
            )
        except Exception:  # any transport error: keep the row pending and retry later
            log.exception("mail for notification %s failed", pk)
            final = note.mail_attempts >= MAX_MAIL_ATTEMPTS
            Notification.objects.filter(pk=pk).update(
                mail_claimed_at=None, mail_state=MailState.FAILED if final else MailState.PENDING
            )
            continue
        Notification.objects.filter(pk=pk).update(mail_state=MailState.SENT)
        sent += 1
    return sent


def mail_text(note: Notification) -> str:
    """The notification as its mail says it. Users have no language preference of their own
    (the language switch lives in the browser session), so mails are in the site language,
    rendered when sent."""
    return render_in(settings.LANGUAGE_CODE, note.message, fallback=note.text)


def _mail_body(note: Notification, text: str) -> str:
    link = note.link
    if link.startswith("/"):
        link = settings.GPUPOOL["SITE_URL"].rstrip("/") + link
    return f"{text}\n\n{link}\n" if link else f"{text}\n"


# --- reads and the read flag ---------------------------------------------------------------


def notifications_for(user: User) -> QuerySet[Notification]:
    """A user's own notifications; nobody sees another user's."""
    if not user.is_authenticated:
        return Notification.objects.none()
    return Notification.objects.filter(recipient=user)


def unread_notifications(user: User) -> QuerySet[Notification]:
    return notifications_for(user).filter(read_at__isnull=True)


def notification_mark_read(*, actor: User, notification: Notification) -> Notification:
    if notification.recipient_id != actor.pk:
        raise Notification.DoesNotExist
    Notification.objects.filter(pk=notification.pk, read_at__isnull=True).update(read_at=timezone.now())
    notification.refresh_from_db()
    return notification


def notifications_mark_all_read(*, actor: User) -> int:
    return unread_notifications(actor).update(read_at=timezone.now())
