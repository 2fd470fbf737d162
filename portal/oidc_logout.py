"""OpenID Connect Back-Channel Logout 1.0: the provider tells the portal, server to server, that a
user's session there ended (they signed out at the provider or in another application, or an
administrator ended their sessions). docs/identity.md "When the provider ends a session or an
account".

``POST /oidc/backchannel-logout/`` with ``logout_token``, a JWT validated as §2.6 says: RS256
signed by a key of the provider's JWKS, ``iss`` our issuer, ``aud`` our client id, ``iat`` and
``exp`` present (not expired), a ``jti`` not seen before (replays refused), the back-channel
logout event in ``events``, no ``nonce`` (so an ID token is never taken for a logout token), and
a ``sub``, a ``sid`` or both. Then the portal sessions begun under that provider session end, and
the user's account is checked with the provider at once (portal/oidc_check.py): a user the
provider disabled or deleted is deactivated there, which also revokes their API tokens. A plain
sign-out does not touch the user's API tokens — scripts outlive browser sessions.

Answers (§2.8): 200 when done, 400 with ``{"error": "invalid_request", …}`` for a token that
fails any check (nothing changes), 404 when OpenID Connect is off; ``Cache-Control: no-store``.
"""

from __future__ import annotations

import logging
import time

import jwt
import requests
from django.core.cache import cache
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from . import oidc_sessions
from .enqueue import enqueue
from .models import OidcGrant
from .oidc import ALGORITHM, LEEWAY_SECONDS, ProviderUnreachable, config, enabled, endpoints, provider_key

log = logging.getLogger(__name__)

LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"
MAX_TOKEN_LENGTH = 16384


class LogoutRefused(Exception):
    """The logout token fails a check of §2.6; ``str(exc)`` says which (logged, and answered)."""


def _decode(raw: str) -> dict:
    try:
        header = jwt.get_unverified_header(raw)
        if header.get("alg") != ALGORITHM:
            raise LogoutRefused(f"algorithm {header.get('alg')!r} is not {ALGORITHM}")
        key = provider_key(endpoints().jwks, header, "the logout token")
        return jwt.decode(
            raw, key, algorithms=[ALGORITHM], audience=config()["CLIENT_ID"], issuer=config()["ISSUER"],
            leeway=LEEWAY_SECONDS, options={"require": ["iss", "aud", "iat", "exp", "jti"]},
        )
    except (jwt.PyJWTError, SuspiciousOperation) as exc:
        raise LogoutRefused(str(exc)) from exc


def _check_claims(claims: dict) -> None:
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(LOGOUT_EVENT), dict):
        raise LogoutRefused("no back-channel logout event in events")
    if "nonce" in claims:
        raise LogoutRefused("a logout token carries no nonce")
    sub, sid = claims.get("sub"), claims.get("sid")
    if not (isinstance(sub, str) and sub) and not (isinstance(sid, str) and sid):
        raise LogoutRefused("neither sub nor sid")
    for name in ("sub", "sid"):
        if name in claims and not isinstance(claims[name], str):
            raise LogoutRefused(f"{name} is not a string")
    if not isinstance(claims["jti"], str) or not claims["jti"]:
        raise LogoutRefused("jti is not a string")


def _first_use(claims: dict) -> None:
    """§2.6 step 10 (optional, done): a logout token is used once. Its jti is remembered until it
    expires (after which the token is refused as expired anyway)."""
    seconds = max(int(claims["exp"] - time.time()), 0) + LEEWAY_SECONDS
    if not cache.add(f"oidc-logout-jti:{config()['ISSUER']}:{claims['jti']}", 1, seconds):
        raise LogoutRefused("this logout token was used already")


def verify_logout_token(raw: str) -> dict:
    """The claims of a valid logout token; :class:`LogoutRefused` otherwise."""
    if not raw or len(raw) > MAX_TOKEN_LENGTH:
        raise LogoutRefused("no logout token")
    claims = _decode(raw)
    _check_claims(claims)
    _first_use(claims)  # last: a token refused for another reason does not spend its jti
    return claims


def _answer(status: int, **body) -> JsonResponse:
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    return response


@csrf_exempt  # server to server: the provider has no CSRF token; the signed token is the proof
@require_POST
def backchannel_logout(request):
    if not enabled():
        raise Http404
    try:
        claims = verify_logout_token(request.POST.get("logout_token", ""))
    except LogoutRefused as exc:
        log.warning("OIDC back-channel logout refused: %s", exc)
        return _answer(400, error="invalid_request", error_description=str(exc))
    except (ProviderUnreachable, requests.RequestException, ValueError) as exc:
        # The provider's keys cannot be read: the provider may try again (§2.8 lets it).
        log.warning("OIDC back-channel logout: the provider's keys cannot be read: %s", exc)
        return _answer(503, error="temporarily_unavailable")
    users = oidc_sessions.sessions_end(sub=claims.get("sub", ""), sid=claims.get("sid", ""))
    for user_id in OidcGrant.objects.filter(user_id__in=users).values_list("user_id", flat=True):
        # Not worth doing after the next round of the periodic check would have.
        enqueue("portal.oidc_check_account", user_id, expires=config()["CHECK_INTERVAL_SECONDS"])
    return _answer(200)
