"""What the portal keeps of an OpenID Connect sign-in, so the provider can end it later
(docs/identity.md "When the provider ends a session or an account"):

- which portal session began under which provider session (``OidcSession``: the ID token's
  ``sid``), so a back-channel logout ends exactly those (portal/oidc_logout.py);
- the refresh token of the user's latest sign-in (``OidcGrant``), with which the account check
  asks the provider whether the user is still there (portal/oidc_check.py).

Ending sessions needs a server-side session store (Django's database sessions, the default):
a session is ended by deleting it from the store.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from importlib import import_module

from django.conf import settings
from django.utils import timezone

from .models import Directory, OidcGrant, OidcSession, User

log = logging.getLogger(__name__)


def session_record(*, user: User, sid: str, session_key: str | None) -> None:
    if not session_key:
        return
    OidcSession.objects.update_or_create(session_key=session_key, defaults={"user": user, "sid": sid[:255]})


def session_forget(session_key: str | None) -> None:
    """The portal session ended by itself (sign-out): nothing to end later."""
    if session_key:
        OidcSession.objects.filter(session_key=session_key).delete()


def _end(rows) -> int:
    store = import_module(settings.SESSION_ENGINE).SessionStore
    keys = list(rows.values_list("session_key", flat=True))
    for key in keys:
        store(session_key=key).delete()
    rows.delete()
    return len(keys)


def sessions_end(*, sub: str = "", sid: str = "") -> list[int]:
    """End the portal sessions a back-channel logout names (Back-Channel Logout 1.0 §2.7): those
    begun under provider session ``sid`` (of subject ``sub`` when it is given too), or, with a
    ``sub`` alone, every session of that user — also those begun before sessions were recorded:
    the user's session hash changes (their unusable password is drawn again). The users' ids."""
    if sid:
        rows = OidcSession.objects.filter(sid=sid)
        if sub:
            rows = rows.filter(user__directory=Directory.OIDC, user__directory_subject=sub)
        users = sorted(set(rows.values_list("user_id", flat=True)))
        ended = _end(rows)
    else:
        user = User.objects.filter(directory=Directory.OIDC, directory_subject=sub).first()
        if user is None:
            return []
        users = [user.pk]
        ended = _end(OidcSession.objects.filter(user=user))
        if not user.has_usable_password():  # a directory user: no password to lose
            user.set_unusable_password()
            user.save(update_fields=["password"])
    log.info("back-channel logout (sid %r, sub %r): %d portal sessions ended", sid, sub, ended)
    return users


def sessions_prune(*, now: datetime | None = None) -> int:
    """Forget sessions older than a session can live (ended by expiry: nothing left to end)."""
    cutoff = (now or timezone.now()) - timedelta(seconds=settings.SESSION_COOKIE_AGE)
    deleted, _ = OidcSession.objects.filter(created_at__lt=cutoff).delete()
    return deleted


def grant_store(*, user: User, refresh_token: str) -> None:
    """The latest sign-in's refresh token replaces the one kept; a sign-in without one (the
    provider gave none) leaves nothing to check with: an older token may be revoked already,
    and a refused one would deactivate the user."""
    if refresh_token:
        OidcGrant.objects.update_or_create(user=user, defaults={
            "refresh_token": refresh_token, "stored_at": timezone.now(), "lease_until": None,
        })
    else:
        OidcGrant.objects.filter(user=user).delete()
