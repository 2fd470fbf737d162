"""Typed readers for settings that come from the environment.

Each helper either returns a value of the declared type or raises ``ImproperlyConfigured``
with the variable's name, so a mistyped deployment fails at start-up rather than at the
first request that happens to need the value.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import parse_qs, unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

_MISSING = object()
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | object = _MISSING) -> str:
    value = os.environ.get(name)
    if value is None:
        if default is _MISSING:
            raise ImproperlyConfigured(f"Set the environment variable {name}.")
        return default  # type: ignore[return-value]
    return value


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean (use 1/0, true/false).")


def env_int(name: str, default: int, *, min_value: int | None = None, max_value: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not an integer.") from None
    if (min_value is not None and value < min_value) or (max_value is not None and value > max_value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not between {min_value} and {max_value}.")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def parse_networks(name: str, values: list[str]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``["10.0.0.0/8", "127.0.0.1"]`` → networks (a bare address is a /32 or /128)."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {value!r} is not an address or network.") from None
    return tuple(networks)


def parse_database_url(url: str) -> dict:
    """Turn ``postgresql://user:pass@host:port/name?opt=…`` into a Django DATABASES entry.

    A ``host`` query parameter (how pgserver hands out its unix-socket directory) wins over
    the netloc host, as it does for libpq.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql", "postgresql+psycopg"}:
        raise ImproperlyConfigured(f"DATABASE_URL must be a postgresql:// URL, not {parts.scheme!r}.")
    options = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    host = options.pop("host", None) or parts.hostname or ""
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parts.path.lstrip("/")) or "postgres",
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


def redis_urls(url: str) -> tuple[str, str]:
    """Return (celery broker URL, redis-py URL) for one Redis address.

    redis-py spells a unix socket ``unix:///path``; kombu spells it ``redis+socket:///path``.
    Accepting either keeps REDIS_URL a single variable for both.
    """
    if url.startswith(("unix://", "redis+socket://")):
        path = url.split("://", 1)[1]
        return f"redis+socket://{path}", f"unix://{path}"
    if url.startswith(("redis://", "rediss://")):
        return url, url
    raise ImproperlyConfigured(f"REDIS_URL must be redis://, rediss:// or unix://, not {url!r}.")
