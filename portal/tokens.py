"""Personal API tokens (docs/identity.md "API tokens"): every signed-in user makes, lists and
revokes their own, on a page and through the API, so directory users (OpenID Connect users have
no portal password to exchange) need no operator for their scripts.

A token reads ``gpp_`` and 43 url-safe characters (256 random bits). It is shown once, when it is
made; the portal keeps its SHA-256 (``ApiToken.digest``) and its first characters (``prefix``)
to tell tokens apart. A token works until it expires or is revoked; deactivating its user
revokes them all (``portal.directory.deactivate_user``), and an inactive user's token never
authenticates anyway.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from .models import ApiToken, User

log = logging.getLogger(__name__)

PREFIX = "gpp_"  # says what a leaked string is (secret scanners, log redaction)
PREFIX_SHOWN = 12  # "gpp_" and 8 characters of the secret: enough to tell one's tokens apart
MAX_LENGTH = 200  # longer presented strings are not looked up
DEFAULT_DAYS = 90
# last_used_at is written at most once a minute per token: a script's every request need not write.
LAST_USED_STEP = timedelta(minutes=1)
SHOWN_EXPIRED = timedelta(days=7)  # an expired token stays listed this long (why a script fails)
KEEP_ENDED = timedelta(days=90)  # revoked and expired tokens stay in the admin this long


@dataclass(frozen=True)
class Issued:
    token: ApiToken
    secret: str  # the token itself: shown once, the portal cannot show it again


def digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def max_days() -> int:
    return settings.GPUPOOL["API_TOKEN_MAX_DAYS"]


def visible_api_tokens(user: User, *, now: datetime | None = None) -> QuerySet[ApiToken]:
    """A user's own tokens that were not revoked, newest first, with those that expired in the
    last week (so a failing script's cause shows); nobody sees anyone else's, platform admins
    included (they revoke in the admin)."""
    if not user.is_authenticated:  # the schema's generator asks as nobody
        return ApiToken.objects.none()
    since = (now or timezone.now()) - SHOWN_EXPIRED
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True, expires_at__gt=since).order_by(
        "-created_at", "-id"
    )


def _cleaned(name: str, days) -> tuple[str, int]:
    name = (name or "").strip()
    errors = {}
    if not name:
        errors["name"] = _("Name the token after what will use it.")
    elif len(name) > 80:
        errors["name"] = _("At most 80 characters.")
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= max_days():
        errors["expires_in_days"] = _("Choose between 1 and %(max)d days.") % {"max": max_days()}
    if errors:
        raise ValidationError(errors)
    return name, days


def api_token_create(
    *, actor: User, name: str, expires_in_days: int = DEFAULT_DAYS, now: datetime | None = None
) -> Issued:
    """A new token of ``actor``'s, valid ``expires_in_days`` days; its secret is in the answer only."""
    if not actor.is_active:
        raise PermissionDenied(_("Your portal account is deactivated."))
    name, days = _cleaned(name, expires_in_days)
    now = now or timezone.now()
    secret = PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=actor, name=name, prefix=secret[:PREFIX_SHOWN], digest=digest(secret), created_at=now,
        expires_at=now + timedelta(days=days),
    )
    log.info("API token %s (%s…) made for %s, expires %s", token.pk, token.prefix, actor.username,
             token.expires_at.isoformat())
    return Issued(token, secret)


def api_token_revoke(*, actor: User, token: ApiToken, now: datetime | None = None) -> ApiToken:
    """Revoke one of ``actor``'s own tokens (at once: the next request with it answers 401)."""
    if token.user_id != actor.pk:
        raise PermissionDenied(_("This is not your token."))
    ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now(), revoked_reason="revoked by its owner"
    )
    token.refresh_from_db()
    log.info("API token %s (%s…) of %s revoked", token.pk, token.prefix, actor.username)
    return token


def api_tokens_revoke_all(user: User, *, reason: str, now: datetime | None = None) -> int:
    """Every live token of ``user`` revoked (deactivation); how many."""
    return ApiToken.objects.filter(user=user, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now(), revoked_reason=reason[:120]
    )


def token_user(raw: str, *, now: datetime | None = None) -> tuple[User, ApiToken] | None:
    """Whose token ``raw`` is, or None: unknown, expired, revoked, or its user is deactivated.
    Looked up by its digest (a unique index): nothing compares the secret itself."""
    if not raw or len(raw) > MAX_LENGTH:
        return None
    token = ApiToken.objects.select_related("user").filter(digest=digest(raw)).first()
    now = now or timezone.now()
    if token is None or not token.usable(now) or not token.user.is_active:
        return None
    if token.last_used_at is None or token.last_used_at <= now - LAST_USED_STEP:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token.user, token


def api_tokens_prune(*, now: datetime | None = None) -> int:
    """Delete tokens revoked or expired more than ``KEEP_ENDED`` ago (they never work again, and
    scripts that make one per run would otherwise grow the table for ever); how many."""
    cutoff = (now or timezone.now()) - KEEP_ENDED
    deleted, _ = ApiToken.objects.filter(Q(revoked_at__lt=cutoff) | Q(expires_at__lt=cutoff)).delete()
    return deleted
