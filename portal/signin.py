"""The one lockout of password sign-ins: the sign-in form, the API token endpoint and the admin
(which sends people to the form) count and refuse with the same counters.

Two counters, both in the cache (Redis), both for ``LOGIN_LOCKOUT_SECONDS`` from the first
failure that started them:

- per account and client address: after ``LOGIN_FAILURE_LIMIT`` wrong passwords for one account
  from one address, that address may not sign in to that account. The account's owner, at
  another address, still can: a guesser cannot lock a victim out by failing on purpose;
- per client address, across accounts: after ``LOGIN_ADDRESS_FAILURE_LIMIT`` wrong passwords from
  one address, whatever the accounts, that address may not sign in at all (password spraying:
  a few guesses at each of many accounts stays under the first limit).

The address is ``portal.security.client_address``: behind the ingress the real client's, never a
value the client can choose, so rotating X-Forwarded-For gains nothing, and the ingress's own
address never stands for everyone behind it. While locked, the password is not even checked.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from .security import client_address

_PLAIN_NAME = re.compile(r"[a-z0-9_.@+-]{0,150}")


def _key_part(username: str) -> str:
    # Readable for the names people have (an operator can find and delete a count); anything else
    # (spaces, control characters, other scripts: whatever a guesser sends) as a fixed-size hash.
    if _PLAIN_NAME.fullmatch(username):
        return username
    return "sha256-" + hashlib.sha256(username.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True)
class Attempt:
    address: str
    username: str  # stripped, lower-cased: "Alice " and "alice" share a counter

    @classmethod
    def of(cls, request: HttpRequest, username) -> Attempt:
        name = username.strip().lower()[:150] if isinstance(username, str) else ""
        return cls(client_address(request), name)

    @property
    def account_key(self) -> str:
        return f"login-failures:{self.address}:{_key_part(self.username)}"

    @property
    def address_key(self) -> str:
        return f"login-failures-address:{self.address}"


def locked(attempt: Attempt) -> bool:
    counts = cache.get_many([attempt.account_key, attempt.address_key])
    return (
        counts.get(attempt.account_key, 0) >= settings.LOGIN_FAILURE_LIMIT
        or counts.get(attempt.address_key, 0) >= settings.LOGIN_ADDRESS_FAILURE_LIMIT
    )


def _count(key: str) -> None:
    # add + incr are atomic in Redis: parallel guesses are all counted. The window starts at the
    # first failure (incr keeps the expiry add set).
    if not cache.add(key, 1, settings.LOGIN_LOCKOUT_SECONDS):
        try:
            cache.incr(key)
        except ValueError:  # expired between the two calls: a new window
            cache.set(key, 1, settings.LOGIN_LOCKOUT_SECONDS)


def failed(attempt: Attempt) -> None:
    _count(attempt.account_key)
    _count(attempt.address_key)


def succeeded(attempt: Attempt) -> None:
    """The account's count starts again; the address's does not, or a sprayer holding one valid
    account could reset it between rounds."""
    cache.delete(attempt.account_key)


def lockout_minutes() -> int:
    return max(1, settings.LOGIN_LOCKOUT_SECONDS // 60)
