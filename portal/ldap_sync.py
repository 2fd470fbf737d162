"""The periodic LDAP sync (DESIGN §12): every user and group of the directory, read with paged
searches as the service account, becomes a :class:`~portal.directory.DirectoryIdentity` (disabled
users ``active=False``) and the whole listing goes to ``sync_directory(..., complete=True)``:
roles follow the groups, users gone from the directory or disabled there are deactivated.

The listing is read completely before anything is written: a server that cannot be reached, a
search that fails half-way or an empty user listing raise :class:`LdapSyncError` and change
nothing — an outage must never look like "everyone left".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import ldap
from django.conf import settings
from ldap.controls import SimplePagedResultsControl

from .directory import DirectoryIdentity, SyncReport, sync_directory
from .ldap_entries import AttrNames, group_index, listing_filter, norm_dn, user_record
from .models import Directory, User

log = logging.getLogger(__name__)


class LdapSyncError(Exception):
    """The directory could not be read completely; nothing was changed."""


@dataclass
class Listing:
    identities: list[DirectoryIdentity]
    groups: int


def attr_names() -> AttrNames:
    conf = settings.LDAP_SYNC
    return AttrNames(username=conf["ATTR_USERNAME"], unix_name=conf["ATTR_UNIX_NAME"],
                     display_name=conf["ATTR_DISPLAY_NAME"], mail=conf["ATTR_MAIL"])


def connect() -> ldap.ldapobject.LDAPObject:
    """A connection bound as the service account, with the sign-in's options (StartTLS, CA file,
    time-outs)."""
    conn = ldap.initialize(settings.AUTH_LDAP_SERVER_URI, bytes_mode=False)
    for option, value in settings.AUTH_LDAP_CONNECTION_OPTIONS.items():
        conn.set_option(option, value)
    if settings.AUTH_LDAP_START_TLS:
        conn.start_tls_s()
    conn.simple_bind_s(settings.AUTH_LDAP_BIND_DN, settings.AUTH_LDAP_BIND_PASSWORD)
    return conn


def paged_search(conn, base: str, filterstr: str, attrs: list[str]) -> Iterator[tuple[str, dict]]:
    """Every entry, a page at a time (directories cap one search at a few hundred entries)."""
    page = SimplePagedResultsControl(True, size=settings.LDAP_SYNC["PAGE_SIZE"], cookie="")
    while True:
        msgid = conn.search_ext(base, ldap.SCOPE_SUBTREE, filterstr, attrs, serverctrls=[page])
        _type, entries, _msgid, controls = conn.result3(msgid)
        for dn, entry_attrs in entries:
            if dn is not None:  # search references (referrals) carry no DN
                yield dn, entry_attrs
        cookie = next((c.cookie for c in controls if c.controlType == SimplePagedResultsControl.controlType),
                      None)
        if cookie is None:
            raise LdapSyncError("the directory ignored the paged-results control")
        if not cookie:
            return
        page.cookie = cookie


def read_directory(conn) -> Listing:
    conf = settings.LDAP_SYNC
    names = attr_names()
    groups = list(paged_search(conn, conf["GROUP_BASE"], conf["GROUP_FILTER"], [conf["MEMBER_ATTR"]]))
    member_of = group_index(groups, conf["MEMBER_ATTR"])
    everyone = listing_filter(conf["USER_FILTER"])
    disabled: set[str] = set()
    if conf["DISABLED_FILTER"]:
        disabled_filter = f"(&{everyone}{conf['DISABLED_FILTER']})"
        disabled = {norm_dn(dn) for dn, _ in paged_search(conn, conf["USER_BASE"], disabled_filter, ["1.1"])}
    identities = []
    for dn, attrs in paged_search(conn, conf["USER_BASE"], everyone, names.wanted()):
        record = user_record(dn, attrs, names)
        if record is None:
            log.warning("LDAP entry %s has no %s: skipped", dn, names.username)
            continue
        identities.append(identity_of(record, member_of.get(norm_dn(dn), set()),
                                      active=norm_dn(dn) not in disabled))
    return Listing(identities, len(groups))


def identity_of(record, groups: set[str], *, active: bool) -> DirectoryIdentity:
    return DirectoryIdentity(
        directory=Directory.LDAP, subject=record.dn, username=record.username, unix_name=record.unix_name,
        email=record.email, display_name=record.display_name, groups=frozenset(groups), active=active,
    )


def sync_ldap() -> tuple[SyncReport, Listing]:
    """Read the whole directory, then apply it. Raises :class:`LdapSyncError` (nothing changed)
    when the directory cannot be read or lists no users while the portal has active LDAP users."""
    try:
        conn = connect()
        try:
            listing = read_directory(conn)
        finally:
            conn.unbind_s()
    except ldap.LDAPError as exc:
        raise LdapSyncError(f"the LDAP directory {settings.AUTH_LDAP_SERVER_URI} could not be read: "
                            f"{_describe(exc)}") from exc
    if not listing.identities and User.objects.filter(directory=Directory.LDAP, is_active=True).exists():
        raise LdapSyncError("the LDAP directory listed no users; refusing to deactivate every LDAP user "
                            "(check GPUPOOL_LDAP_USER_BASE and GPUPOOL_LDAP_USER_FILTER)")
    report = sync_directory(Directory.LDAP, listing.identities, complete=True)
    log.info("LDAP sync: %d users, %d groups: %s", len(listing.identities), listing.groups, report.as_dict())
    return report, listing


def _describe(exc: ldap.LDAPError) -> str:
    info = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    return " ".join(str(info.get(k, "")) for k in ("desc", "info") if info.get(k)) or repr(exc)
