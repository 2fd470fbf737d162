"""An OpenID Connect user's claims → the fields of a directory identity (DESIGN §12). Plain Python:
the claim names are the centre's settings, the values are whatever the provider sent, so every
value is checked here before it reaches the database or Slurm."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Django's username characters; the Unix name as useradd and Slurm take it.
_USERNAME = re.compile(r"[\w.@+-]{1,150}")
_UNIX_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}")
MAX_GROUP_LENGTH = 500  # DirectoryRule.group
MAX_GROUPS = 2000


class ClaimError(ValueError):
    """The provider's claims cannot describe a portal user (the message says which claim)."""


@dataclass(frozen=True)
class ClaimMap:
    username: str = "preferred_username"
    email: str = "email"
    name: str = "name"
    unix_name: str = ""  # empty: the provider sends none; the portal username is the Unix name
    groups: str = "groups"


def _text(claims: dict, name: str) -> str:
    value = claims.get(name, "") if name else ""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ClaimError(f"claim {name!r} is not a string")
    if "\x00" in value:
        raise ClaimError(f"claim {name!r} holds a NUL character")
    return value.strip()


def _groups(claims: dict, name: str) -> frozenset[str]:
    value = claims.get(name) if name else None
    if value is None:
        return frozenset()
    if isinstance(value, str):
        value = [value]  # some providers send a single group as a string
    if not isinstance(value, list):
        raise ClaimError(f"claim {name!r} is not a list of groups")
    # Only names a rule can hold are kept: a longer one can never match a rule anyway.
    groups = {g for g in value if isinstance(g, str) and 0 < len(g) <= MAX_GROUP_LENGTH and "\x00" not in g}
    if len(groups) > MAX_GROUPS:
        raise ClaimError(f"claim {name!r} lists more than {MAX_GROUPS} groups")
    return frozenset(groups)


def identity_fields(claims: dict, claim_map: ClaimMap) -> dict:
    """The keyword arguments of ``DirectoryIdentity`` (without ``directory``) for these claims."""
    subject = _text(claims, "sub")
    if not subject or len(subject) > 255:
        raise ClaimError("claim 'sub' is missing or longer than 255 characters")
    username = _text(claims, claim_map.username)
    if not _USERNAME.fullmatch(username):
        raise ClaimError(f"claim {claim_map.username!r} is missing or not a valid user name")
    unix_name = _text(claims, claim_map.unix_name)
    if unix_name and not _UNIX_NAME.fullmatch(unix_name):
        raise ClaimError(f"claim {claim_map.unix_name!r} is not a valid Unix user name")
    email = _text(claims, claim_map.email)
    if len(email) > 254 or (email and "@" not in email):
        email = ""  # not an address: the user keeps the one they have
    return {
        "subject": subject,
        "username": username,
        "unix_name": unix_name,
        "email": email,
        "display_name": _text(claims, claim_map.name)[:120],
        "groups": _groups(claims, claim_map.groups),
    }
