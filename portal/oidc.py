"""Sign-in with the centre's OpenID Connect provider (DESIGN §12, docs/identity.md).

mozilla-django-oidc runs the authorization-code flow (state, nonce, PKCE S256, the code exchange);
this module decides the rest:

- where the provider is: its discovery document (``GPUPOOL_OIDC_ISSUER``), read when someone
  signs in, never at start-up, so a provider that is down never stops the portal or the local
  sign-in of break-glass admins; endpoints given one by one win over discovery;
- what an ID token must be: RS256 only (``alg: none`` and HMAC are refused), signed by a key of
  the provider's JWKS, issued by the configured issuer for our client id, not expired, carrying
  the nonce of this sign-in. The library itself checks neither issuer nor audience;
- who the user is: the claims (names are settings) become a ``DirectoryIdentity`` and go through
  ``apply_identity``, like LDAP users: rules give and take back roles at every sign-in;
- how a refusal looks: the sign-in page with a sentence saying what went wrong (400 for a
  sign-in that cannot be verified, 403 for a user the portal refuses, 503 for a provider that
  cannot be reached), never a 500, nothing created;
- what a sign-in leaves behind for the provider to end it later (portal/oidc_sessions.py): the
  ID token's ``sid`` beside the portal session (back-channel logout, portal/oidc_logout.py) and,
  with ``offline_access``, the refresh token (the account check, portal/oidc_check.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from urllib.parse import urlencode

import jwt
import requests
from django.conf import settings
from django.contrib.auth import BACKEND_SESSION_KEY, get_user_model
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import get_language, gettext_lazy
from django.utils.translation import gettext as _
from django.views.generic import View
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from . import oidc_sessions
from .directory import DirectoryConflict, DirectoryIdentity, apply_identity
from .models import Directory
from .oidc_claims import ClaimError, ClaimMap, identity_fields

log = logging.getLogger(__name__)

BACKEND = "portal.oidc.OIDCBackend"
ALGORITHM = "RS256"
DISCOVERY_SECONDS = 3600  # how long a discovery document is trusted before it is read again
LEEWAY_SECONDS = 60  # clock skew between the provider and us


class ProviderUnreachable(Exception):
    """The provider did not answer, or answered with something that is not OpenID Connect."""


class SignInRefused(Exception):
    """A verified user the portal will not sign in; ``str(exc)`` is shown to them."""


def config() -> dict:
    return settings.OIDC


def enabled() -> bool:
    return bool(config()["ENABLED"])


def button_label() -> str:
    """The sign-in button's words: the centre's own (per language) or ours."""
    cfg = config()
    if get_language() == "zh-hans" and cfg["BUTTON_LABEL_ZH_HANS"]:
        return cfg["BUTTON_LABEL_ZH_HANS"]
    return cfg["BUTTON_LABEL"] or _("Sign in with your centre account")


@dataclass(frozen=True)
class Endpoints:
    authorization: str
    token: str
    jwks: str
    userinfo: str = ""
    end_session: str = ""


def _discover(issuer: str) -> dict:
    key = f"oidc-discovery:{issuer}"
    document = cache.get(key)
    if document is not None:
        return document
    try:
        response = requests.get(
            f"{issuer}/.well-known/openid-configuration", timeout=config()["TIMEOUT_SECONDS"]
        )
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnreachable(f"discovery at {issuer}: {exc}") from exc
    # OpenID Connect Discovery §4.3: the document must name the issuer we asked.
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        raise ProviderUnreachable(f"discovery at {issuer}: the document names another issuer")
    cache.set(key, document, DISCOVERY_SECONDS)
    return document


def endpoints() -> Endpoints:
    cfg = config()
    given = {
        "authorization": cfg["AUTHORIZATION_ENDPOINT"], "token": cfg["TOKEN_ENDPOINT"],
        "jwks": cfg["JWKS_URI"], "userinfo": cfg["USERINFO_ENDPOINT"],
        "end_session": cfg["END_SESSION_ENDPOINT"],
    }
    if given["authorization"] and given["token"] and given["jwks"]:
        return Endpoints(**given)
    found = _discover(cfg["ISSUER"])
    names = {"authorization": "authorization_endpoint", "token": "token_endpoint", "jwks": "jwks_uri",
             "userinfo": "userinfo_endpoint", "end_session": "end_session_endpoint"}
    merged = {k: given[k] or str(found.get(names[k]) or "") for k in names}
    if not (merged["authorization"] and merged["token"] and merged["jwks"]):
        raise ProviderUnreachable("the discovery document lacks an authorization, token or JWKS endpoint")
    return Endpoints(**merged)


def wants_offline_access() -> bool:
    return "offline_access" in config()["SCOPES"].split()


def _setting(attr: str, *default):
    # mozilla-django-oidc reads its settings by name; ours are one dict read at every request.
    cfg = config()
    ours = {
        "OIDC_RP_CLIENT_ID": cfg["CLIENT_ID"], "OIDC_RP_CLIENT_SECRET": cfg["CLIENT_SECRET"],
        "OIDC_RP_SCOPES": cfg["SCOPES"], "OIDC_TIMEOUT": cfg["TIMEOUT_SECONDS"],
        "OIDC_RP_SIGN_ALGO": ALGORITHM,
        "OIDC_USE_PKCE": True, "OIDC_PKCE_CODE_CHALLENGE_METHOD": "S256", "OIDC_USE_NONCE": True,
        "OIDC_STORE_ID_TOKEN": True, "OIDC_ALLOW_UNSECURED_JWT": False,
        # OpenID Connect Core §11: offline access (the refresh token of the account check) is
        # asked with prompt=consent; without offline_access nothing is added.
        "OIDC_AUTH_REQUEST_EXTRA_PARAMS": {"prompt": "consent"} if wants_offline_access() else {},
    }
    if attr in ours:
        return ours[attr]
    return import_from_settings(attr, *default)


def _claim_map() -> ClaimMap:
    cfg = config()
    return ClaimMap(username=cfg["USERNAME_CLAIM"], email=cfg["EMAIL_CLAIM"], name=cfg["NAME_CLAIM"],
                    unix_name=cfg["UNIX_NAME_CLAIM"], groups=cfg["GROUPS_CLAIM"])


def provider_key(jwks_uri: str, header: dict, what: str) -> jwt.PyJWK:
    """The one RS256 signing key of the provider's JWKS that ``header`` names (by ``kid``)."""
    response = requests.get(jwks_uri, timeout=config()["TIMEOUT_SECONDS"])
    response.raise_for_status()
    document = response.json()
    listed = document.get("keys") if isinstance(document, dict) else None
    keys = [
        k for k in (listed if isinstance(listed, list) else [])
        if isinstance(k, dict) and k.get("kty") == "RSA" and k.get("use", "sig") == "sig"
        and k.get("alg", ALGORITHM) == ALGORITHM
    ]
    if "kid" in header:
        keys = [k for k in keys if k.get("kid") == header["kid"]]
    if len(keys) != 1:
        raise SuspiciousOperation(f"no single key of the provider's JWKS matches {what}")
    return jwt.PyJWK(keys[0], algorithm=ALGORITHM)


class OIDCBackend(OIDCAuthenticationBackend):
    """Authenticates the OIDC callback only; password sign-ins pass through it untouched."""

    get_settings = staticmethod(_setting)

    def __init__(self, *args, **kwargs):
        # Django builds every backend for every sign-in, password ones too: nothing here may
        # need the provider or its settings.
        self.UserModel = get_user_model()

    def authenticate(self, request, **kwargs):
        if request is None or "nonce" not in kwargs or not enabled():
            return None  # not our callback (only it passes the nonce)
        found = endpoints()
        self.OIDC_OP_TOKEN_ENDPOINT, self.OIDC_OP_JWKS_ENDPOINT = found.token, found.jwks
        self.OIDC_OP_USER_ENDPOINT = found.userinfo
        self.OIDC_RP_CLIENT_ID, self.OIDC_RP_CLIENT_SECRET = config()["CLIENT_ID"], config()["CLIENT_SECRET"]
        self.OIDC_RP_SIGN_ALGO, self.OIDC_RP_IDP_SIGN_KEY = ALGORITHM, None
        return super().authenticate(request, **kwargs)

    def _signing_key(self, header: dict) -> jwt.PyJWK:
        return provider_key(self.OIDC_OP_JWKS_ENDPOINT, header, "the ID token")

    def get_token(self, payload):
        answer = super().get_token(payload)
        if not isinstance(answer, dict):
            raise SuspiciousOperation("the token endpoint answered with something else than an object")
        # Kept for the account check (portal/oidc_check.py) once the sign-in succeeds.
        refresh = answer.get("refresh_token")
        self.request.oidc_refresh_token = refresh if isinstance(refresh, str) else ""
        return answer

    def verify_token(self, token, **kwargs):
        """The ID token: RS256 with the provider's key, our issuer and audience, not expired,
        this sign-in's nonce (a token replayed from another sign-in carries another)."""
        if not isinstance(token, str):
            raise SuspiciousOperation("the provider sent no ID token")
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != ALGORITHM:
                raise SuspiciousOperation(f"ID token algorithm {header.get('alg')!r} is not {ALGORITHM}")
            payload = jwt.decode(
                token, self._signing_key(header), algorithms=[ALGORITHM], audience=self.OIDC_RP_CLIENT_ID,
                issuer=config()["ISSUER"], leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iat", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}") from exc
        if "nonce" in kwargs and payload.get("nonce") != kwargs["nonce"]:
            raise SuspiciousOperation("ID token nonce does not match this sign-in")
        # The provider's session id: a back-channel logout names it (portal/oidc_logout.py).
        sid = payload.get("sid")
        self.request.oidc_sid = sid if isinstance(sid, str) else ""
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        if not self.OIDC_OP_USER_ENDPOINT:
            return dict(payload)
        claims = super().get_userinfo(access_token, id_token, payload)
        # OpenID Connect Core §5.3.2: userinfo about anyone else must not be used.
        if not isinstance(claims, dict) or claims.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo is about another subject than the ID token")
        return {**payload, **claims}

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        try:
            fields = identity_fields(claims, _claim_map())
        except ClaimError as exc:
            log.warning("OIDC sign-in refused: %s", exc)
            raise SignInRefused(_("Your account at the sign-in service cannot be used here: %(why)s.")
                                % {"why": exc}) from exc
        try:
            user = apply_identity(DirectoryIdentity(directory=Directory.OIDC, **fields))
        except DirectoryConflict as exc:
            log.warning("OIDC sign-in refused: %s", exc)
            raise SignInRefused(_("The user name %(name)s belongs to another portal account. "
                                  "Ask the platform administrators.") % {"name": fields["username"]}) from exc
        if user is None or not user.is_active:
            raise SignInRefused(_("Your portal account is deactivated."))
        return user

    def get_user(self, user_id):
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None


def refusal(request: HttpRequest, message: str, status: int) -> HttpResponse:
    """The sign-in page again, saying why; the local form still works (break-glass admins)."""
    context = {"form": AuthenticationForm(request), "oidc_error": message, "next": "",
               "oidc_button": button_label() if enabled() else ""}
    return render(request, "portal/login.html", context, status=status)


UNVERIFIED = gettext_lazy(
    "The sign-in could not be verified (it may have expired or been used already). Please sign in again."
)
UNREACHABLE = gettext_lazy(
    "The sign-in service cannot be reached. Try again later, or ask the platform administrators."
)


class OIDCStartView(OIDCAuthenticationRequestView):
    """The sign-in button: off to the provider with a fresh state, nonce and PKCE challenge."""

    get_settings = staticmethod(_setting)

    def __init__(self, **kwargs):
        View.__init__(self, **kwargs)  # the library's reads settings we keep elsewhere

    def get(self, request):
        if not enabled():
            raise Http404
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoints().authorization
        except ProviderUnreachable as exc:
            log.warning("OIDC provider unreachable: %s", exc)
            return refusal(request, str(UNREACHABLE), 503)
        self.OIDC_RP_CLIENT_ID = config()["CLIENT_ID"]
        return super().get(request)


class OIDCCallbackView(OIDCAuthenticationCallbackView):
    """The provider's answer. Every way it can be wrong ends on the sign-in page, never a 500."""

    get_settings = staticmethod(_setting)

    def get(self, request):
        if not enabled():
            raise Http404
        try:
            return super().get(request)
        except SignInRefused as exc:
            return refusal(request, str(exc), 403)
        except (ProviderUnreachable, requests.ConnectionError, requests.Timeout) as exc:
            log.warning("OIDC provider unreachable: %s", exc)
            return refusal(request, str(UNREACHABLE), 503)
        except (SuspiciousOperation, requests.RequestException, ValueError) as exc:
            # Forged or replayed state, a refused code, a token that fails verification.
            log.warning("OIDC sign-in refused: %s", exc)
            return refusal(request, str(UNVERIFIED), 400)

    def login_success(self):
        response = super().login_success()
        request = self.request
        oidc_sessions.session_record(user=self.user, sid=getattr(request, "oidc_sid", ""),
                                     session_key=request.session.session_key)
        oidc_sessions.grant_store(user=self.user, refresh_token=getattr(request, "oidc_refresh_token", ""))
        return response

    def login_failure(self):
        # No state in the session, or the provider answered with an error (e.g. the user cancelled).
        return refusal(self.request, str(UNVERIFIED), 400)


def end_session_url(request: HttpRequest) -> str:
    """Where to send a user signing out who signed in through the provider ("" for nowhere):
    its end_session endpoint (RP-initiated logout), which returns them to our sign-in page."""
    if not enabled() or request.session.get(BACKEND_SESSION_KEY) != BACKEND:
        return ""
    try:
        endpoint = endpoints().end_session
    except ProviderUnreachable:
        return ""  # signed out of the portal; the provider's session is the provider's business
    if not endpoint:
        return ""
    params = {"client_id": config()["CLIENT_ID"],
              "post_logout_redirect_uri": request.build_absolute_uri(reverse("login"))}
    if request.session.get("oidc_id_token"):
        params["id_token_hint"] = request.session["oidc_id_token"]
    return f"{endpoint}?{urlencode(params)}"
