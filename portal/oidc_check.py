"""The account check (docs/identity.md "When the provider ends a session or an account"): now and
then — and at once after a back-channel logout — the portal asks the OpenID Connect provider
whether each of its users is still there, by spending the refresh token of the user's latest
sign-in (``OidcGrant``; there only when ``GPUPOOL_OIDC_SCOPES`` asks for ``offline_access`` and
the provider gives one). An offline grant outlives the provider's sessions, so signing out does
not end it; disabling or deleting the account there (or revoking the portal's access) does.

- The provider answers with tokens: the user is there. A rotated refresh token is kept.
- It answers ``invalid_grant``: the grant is gone — the user is deactivated
  (``deactivate_user``: sessions end, API tokens are revoked, jobs follow
  ``GPUPOOL_DEPROVISION_JOBS``). If they sign in again later, they are active again (without the
  tokens).
- Anything else (no answer, a 5xx, ``invalid_client``…) says nothing about the user: nothing
  changes, the next round asks again.

A round that finds more than half of at least ``GUARD_MIN`` grants refused deactivates nobody and
fails loudly: that looks like the provider's or the portal's configuration (a new client secret,
a provider that lost its grants), not like half the centre leaving at once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import requests
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from . import oidc_sessions
from .directory import deactivate_user
from .models import OidcGrant, User
from .oidc import ProviderUnreachable, config, endpoints

log = logging.getLogger(__name__)

GUARD_MIN = 10
GONE_REASON = "the OpenID Connect provider no longer knows the user (disabled, deleted or access revoked)"


class CheckRefused(Exception):
    """A round found too many grants refused at once to believe it (see the module's words)."""


@dataclass
class CheckReport:
    alive: list[int] = field(default_factory=list)
    gone: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)
    deactivated: int = 0

    def as_dict(self) -> dict:
        return {"alive": len(self.alive), "gone": len(self.gone), "unknown": len(self.unknown),
                "deactivated": self.deactivated}


def _lease() -> timedelta:
    # Longer than one refresh can take (the timeout, twice: a retry of the connection).
    return timedelta(seconds=4 * config()["TIMEOUT_SECONDS"])


def _claim(user_id: int, now: datetime) -> OidcGrant | None:
    """The user's grant, held by this check until it is done (or the lease runs out: a worker
    that died). Refresh tokens may rotate: two checks spending the same one at once would make the
    provider take the second for a stolen token."""
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    held = OidcGrant.objects.filter(free, user_id=user_id, user__is_active=True).update(
        lease_until=now + _lease()
    )
    return OidcGrant.objects.filter(user_id=user_id).first() if held else None


def _refresh(refresh_token: str) -> tuple[str, str]:
    """Spend the refresh token: ("alive", the next refresh token), ("gone", "") or ("unknown", why)."""
    cfg = config()
    try:
        response = requests.post(endpoints().token, data={
            "grant_type": "refresh_token", "refresh_token": refresh_token,
            "client_id": cfg["CLIENT_ID"], "client_secret": cfg["CLIENT_SECRET"],
        }, timeout=cfg["TIMEOUT_SECONDS"])
        answer = response.json()
    except (ProviderUnreachable, requests.RequestException, ValueError) as exc:
        return "unknown", f"no answer: {exc}"
    if not isinstance(answer, dict):
        return "unknown", f"HTTP {response.status_code} without an object"
    if response.status_code == 200 and isinstance(answer.get("access_token"), str):
        rotated = answer.get("refresh_token")
        return "alive", rotated if isinstance(rotated, str) and rotated else refresh_token
    if response.status_code == 400 and answer.get("error") == "invalid_grant":
        return "gone", ""
    return "unknown", f"HTTP {response.status_code} {answer.get('error', '')}"


def _ask(user_id: int, now: datetime) -> tuple[str, OidcGrant | None, str]:
    grant = _claim(user_id, now)
    if grant is None:
        return "busy", None, ""
    outcome, detail = _refresh(grant.refresh_token)
    if outcome == "alive":
        # Only if no sign-in stored a newer grant meanwhile (it wins).
        OidcGrant.objects.filter(pk=grant.pk, refresh_token=grant.refresh_token).update(
            refresh_token=detail, checked_at=now, lease_until=None
        )
    elif outcome == "unknown":
        log.warning("OIDC account check of user %s: the provider said nothing about them: %s",
                    user_id, detail)
        OidcGrant.objects.filter(pk=grant.pk).update(lease_until=None)
    return outcome, grant, detail


@transaction.atomic
def _deactivate(grant: OidcGrant, now: datetime) -> bool:
    # The grant refused must still be the user's latest: a sign-in since then stored another.
    held = OidcGrant.objects.select_for_update().filter(pk=grant.pk, refresh_token=grant.refresh_token)
    if held.first() is None:
        return False
    user = User.objects.select_for_update().get(pk=grant.user_id)
    if not user.is_active:
        return False
    deactivate_user(user, reason=GONE_REASON, now=now)
    return True


def account_check(user_id: int, *, now: datetime | None = None) -> str:
    """Ask the provider about one user (after a back-channel logout): alive, gone (deactivated
    now), unknown, or busy (another check holds the grant, or there is none)."""
    now = now or timezone.now()
    outcome, grant, _detail = _ask(user_id, now)
    if outcome == "gone":
        _deactivate(grant, now)
        log.info("OIDC account check: user %s deactivated (%s)", user_id, GONE_REASON)
    return outcome


def accounts_check(*, now: datetime | None = None) -> CheckReport:
    """One round over every active user with a grant; then forget sessions that expired."""
    now = now or timezone.now()
    report = CheckReport()
    gone: list[OidcGrant] = []
    grants = OidcGrant.objects.filter(user__is_active=True).order_by("user_id")
    for user_id in list(grants.values_list("user_id", flat=True)):
        outcome, grant, _detail = _ask(user_id, now)
        if outcome in ("alive", "unknown", "gone"):
            getattr(report, outcome).append(user_id)
        if outcome == "gone":
            gone.append(grant)
    checked = len(report.alive) + len(report.gone)
    if len(gone) >= GUARD_MIN and len(gone) * 2 > checked:
        for grant in gone:  # asked again at the next round
            OidcGrant.objects.filter(pk=grant.pk).update(lease_until=None)
        raise CheckRefused(f"the provider refused {len(gone)} of {checked} grants at once; nobody was "
                           "deactivated (check the client secret and the provider)")
    report.deactivated = sum(_deactivate(grant, now) for grant in gone)
    oidc_sessions.sessions_prune(now=now)
    log.info("OIDC account check: %s", report.as_dict())
    return report
