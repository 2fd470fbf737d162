"""Reading LDAP entries (pure: no Django, no LDAP connection): the filter that lists every user,
attribute values, and who is in which group. Used by the sign-in backend (``portal.ldap_auth``)
and the sync (``portal.ldap_sync``), so both describe a user the same way."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

Attrs = Mapping[str, list[bytes] | list[str]]


@dataclass(frozen=True)
class AttrNames:
    username: str = "uid"
    unix_name: str = "uid"
    display_name: str = "cn"
    mail: str = "mail"

    def wanted(self) -> list[str]:
        return sorted({self.username, self.unix_name, self.display_name, self.mail})


@dataclass(frozen=True)
class UserRecord:
    dn: str
    username: str
    unix_name: str
    email: str
    display_name: str


def listing_filter(user_filter: str) -> str:
    """The sign-in filter with the typed name as ``*``: every user it could ever find."""
    if "%(user)s" not in user_filter:
        raise ValueError(f"the user filter {user_filter!r} has no %(user)s")
    return user_filter.replace("%(user)s", "*")


def norm_dn(dn: str) -> str:
    """DNs compare case-insensitively and without spaces around the separators (simple DNs: no
    escaped commas, which directories' user and group names do not use)."""
    return ",".join(part.strip() for part in dn.split(",")).lower()


def first(attrs: Attrs, name: str) -> str:
    # LDAP attribute names are case-insensitive; values come as bytes from python-ldap.
    for key, values in attrs.items():
        if key.lower() == name.lower() and values:
            value = values[0]
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return ""


def user_record(dn: str, attrs: Attrs, names: AttrNames) -> UserRecord | None:
    """None when the entry has no user name (it cannot be a portal user)."""
    username = first(attrs, names.username).strip()
    if not username:
        return None
    return UserRecord(
        dn=dn, username=username[:150], unix_name=first(attrs, names.unix_name).strip(),
        email=first(attrs, names.mail).strip(), display_name=first(attrs, names.display_name).strip(),
    )


def group_index(groups: Iterable[tuple[str, Attrs]], member_attr: str) -> dict[str, set[str]]:
    """Normalised member DN → the DNs of the groups naming it."""
    index: dict[str, set[str]] = {}
    for group_dn, attrs in groups:
        for key, values in attrs.items():
            if key.lower() != member_attr.lower():
                continue
            for value in values:
                member = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
                index.setdefault(norm_dn(member), set()).add(group_dn)
    return index
