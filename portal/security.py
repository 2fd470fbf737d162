"""Defences at the edge of the portal: a Content-Security-Policy on every HTML page, NUL
characters refused before they reach PostgreSQL, secrets kept out of the logs, and the one
answer to "which address is this client" behind our proxies.

See docs/reliability.md ("Hostile input and security") for what each one protects.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.translation import gettext as _

from .parsers import json_loads_bounded

# Scripts only from our own static files: no inline <script>, no on*= handlers (static/js/site.js
# replaces them); our templates have no style="" either, but plotly needs inline styles (below).
# Pico's icons and plotly's "download as PNG" are data: images; frame-ancestors repeats X-Frame-Options.
DEFAULT_POLICY = {
    "default-src": "'self'",
    "script-src": "'self'",
    # plotly.js inserts its own <style> element when it loads (the browser tests saw it blocked);
    # styles cannot run code, scripts stay strict.
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data: blob:",
    "font-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def policy_header(policy: dict[str, str]) -> str:
    return "; ".join(f"{directive} {sources}" for directive, sources in policy.items())


def _policy() -> dict[str, str]:
    return getattr(settings, "CONTENT_SECURITY_POLICY", DEFAULT_POLICY)


def _sign_in_provider_origins() -> list[str]:
    """The OpenID Connect provider's origins when its sign-in is on: signing out POSTs to us and
    is redirected to the provider's end_session endpoint, and browsers hold a form's redirects
    to ``form-action`` too (docs/identity.md)."""
    oidc = getattr(settings, "OIDC", None) or {}
    if not oidc.get("ENABLED"):
        return []
    urls = (oidc.get("ISSUER", ""), oidc.get("END_SESSION_ENDPOINT", ""))
    return sorted({f"{p.scheme}://{p.netloc}" for p in map(urlsplit, urls) if p.scheme in ("http", "https")})


class ContentSecurityPolicyMiddleware:
    """Adds the policy to every HTML response that has none of its own (Django 5.2 has no CSP
    support of its own). No page widens it: even the API docs are served from our own files."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.header = policy_header(_policy())

    def _header(self) -> str:
        origins = _sign_in_provider_origins()  # read per response: tests switch the sign-in on and off
        if not origins:
            return self.header
        policy = dict(_policy())
        policy["form-action"] = " ".join([policy.get("form-action", "'self'"), *origins])
        return policy_header(policy)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        is_html = response.get("Content-Type", "").startswith("text/html")
        if is_html and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = self._header()
        return response


# --- NUL characters -----------------------------------------------------------------------------
# PostgreSQL text cannot hold U+0000: a lookup or an insert with one raises DataError, a 500. No
# legitimate input carries one, so it is refused at the door with a 400 naming the field. HTML form
# bodies are left to the forms (Django's CharField refuses NUL with a message on the field).

_FORM = "application/x-www-form-urlencoded"


def _nul_in_json(value, path: str = "") -> str | None:
    """The dotted path of the first key or string holding NUL, or None."""
    if isinstance(value, str):
        return (path or "detail") if "\x00" in value else None
    if isinstance(value, dict):
        items: Iterator = ((str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return None
    for key, item in items:
        where = f"{path}.{key}" if path else key
        if "\x00" in key:
            return where
        found = _nul_in_json(item, where)
        if found:
            return found
    return None


def _nul_in_pairs(pairs) -> str | None:
    for key, values in pairs.lists():
        if "\x00" in key or any("\x00" in v for v in values):
            return key.replace("\x00", "") or "detail"
    return None


def _nul_in_body(request: HttpRequest) -> str | None:
    # Multipart too: DRF's parsers accept it on every endpoint, and it reaches the same queries.
    # Reading request.POST here is safe: DRF falls back to it when the stream is consumed.
    if request.content_type in (_FORM, "multipart/form-data"):
        return _nul_in_pairs(request.POST)
    if request.content_type == "application/json" or request.content_type.endswith("+json"):
        body = request.body
        if b"\x00" not in body and b"\\u0000" not in body.lower():
            return None  # the common case: nothing to parse twice
        try:
            return _nul_in_json(json_loads_bounded(body))
        except ValueError:
            return None  # malformed or too deeply nested JSON is the parser's 400
    return None


class RejectNulMiddleware:
    """400 for a NUL character in the query string (every request) or in an API body."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        field = _nul_in_pairs(request.GET)
        if field is None and request.path.startswith("/api/") and request.method in ("POST", "PUT", "PATCH"):
            field = _nul_in_body(request)
        if field is None:
            return self.get_response(request)
        return JsonResponse({field: [_("Null characters are not allowed.")]}, status=400)


# --- secrets in logs ------------------------------------------------------------------------------

_SECRET_PATTERNS = [
    # "Authorization: Token abc…", "Bearer …", "Basic …" in a header dump or a message.
    (re.compile(r"(?i)\b(Token|Bearer|Basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 [redacted]"),
    # password=…, secret_key: …, sessionid=…, csrftoken=…, api_key=… in query strings, cookies, dicts.
    (
        re.compile(
            r"(?i)\b(password|passwd|secret[_-]?key|secret|token|api[_-]?key|sessionid|csrftoken|"
            r"csrfmiddlewaretoken)(['\"]?\s*[:=]\s*['\"]?)[^\s&;,'\"}]+"
        ),
        r"\1\2[redacted]",
    ),
    # Credentials inside a URL: scheme://user:password@host.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]*):[^/\s@]+@"), r"\1:[redacted]@"),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactSecretsFilter(logging.Filter):
    """Last line of defence on the log handlers: whatever a library decides to log (a URL with a
    password, a header dump), tokens, passwords and session ids are replaced before it is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


# --- the client's address -----------------------------------------------------------------------


def client_address(request: HttpRequest) -> str:
    """The address of the client, for the sign-in lockout, the API throttles and the /metrics
    network check — one rule for all of them.

    With ``TRUSTED_PROXIES`` = 0 (gunicorn faces the clients) it is ``REMOTE_ADDR``, and
    X-Forwarded-For is ignored: anyone can send one. Behind n proxies that each append the
    address they saw, the n-th entry from the right was written by our first proxy; everything
    left of it is the client's own claim. This is DRF's ``NUM_PROXIES`` rule, which the settings
    set to the same number, so DRF's throttles agree. An entry that is not an IP address (only
    a client that bypassed the proxies can send one) counts as the connection's own address.
    """
    remote = request.META.get("REMOTE_ADDR", "")
    proxies = settings.TRUSTED_PROXIES
    forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
    if proxies <= 0 or not forwarded:
        return remote
    hops = forwarded.split(",")
    try:
        return str(ipaddress.ip_address(hops[-min(proxies, len(hops))].strip()))
    except ValueError:
        return remote
