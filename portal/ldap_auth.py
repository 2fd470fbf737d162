"""Sign-in through the LDAP directory (DESIGN §12): django-auth-ldap binds as the service account,
finds the user, binds as them with the password typed and finds their groups; the user is then
written by :func:`portal.directory.apply_identity` (the one place that creates directory users and
applies the group rules), so a user lands with the roles their groups map to.

Refused, and nothing created: a wrong password, a user the directory disabled (slapd's ppolicy
lock or GPUPOOL_LDAP_DISABLED_FILTER: the portal user is deactivated), a name that is another
account's. A directory that cannot be reached refuses directory users and marks the request
(``request.directory_unreachable``) so the sign-in page says so; local accounts are checked by
Django's ModelBackend before this backend and keep working.
"""

from __future__ import annotations

import logging

import ldap
from django.conf import settings
from django.db import IntegrityError
from django.dispatch import receiver
from django_auth_ldap.backend import LDAPBackend, ldap_error

from .directory import DirectoryConflict, apply_identity
from .ldap_entries import user_record
from .ldap_sync import attr_names, identity_of

log = logging.getLogger(__name__)

_UNREACHABLE = (ldap.SERVER_DOWN, ldap.TIMEOUT, ldap.CONNECT_ERROR)


class DirectoryLDAPBackend(LDAPBackend):
    def get_or_build_user(self, username, ldap_user):
        """Called once the password is proven: the directory's view of the user, applied."""
        record = user_record(ldap_user.dn, ldap_user.attrs or {}, attr_names())
        if record is None:
            raise ldap_user.AuthenticationFailed(f"{ldap_user.dn} has no {attr_names().username}")
        identity = identity_of(record, set(ldap_user.group_dns), active=not _disabled(ldap_user))
        try:
            try:
                user = apply_identity(identity)
            except IntegrityError:
                # A second sign-in (or the sync) created the same new user a moment earlier: found now.
                user = apply_identity(identity)
        except DirectoryConflict:
            user = None  # the name is a local admin's or another directory's user: refused
        if user is None or not user.is_active:
            raise ldap_user.AuthenticationFailed(f"{ldap_user.dn} is disabled or its name is taken")
        return user, False

    def get_user(self, user_id):
        # As Django's ModelBackend: a deactivated user's session loads no user.
        user = super().get_user(user_id)
        return user if user is not None and user.is_active else None


def _disabled(ldap_user) -> bool:
    """The centre's disabled marker, for directories that still let a disabled user bind."""
    disabled_filter = settings.LDAP_SYNC["DISABLED_FILTER"]
    if not disabled_filter:
        return False
    found = ldap_user.connection.search_s(ldap_user.dn, ldap.SCOPE_BASE, disabled_filter, ["1.1"])
    return bool(found)


@receiver(ldap_error)
def _note_unreachable(sender, context, user, request=None, exception=None, **kwargs):
    # django-auth-ldap turns every LDAP error into "no such user"; the sign-in page tells a down
    # directory apart from a wrong password.
    log.warning("LDAP %s failed: %r", context, exception)
    if request is not None and isinstance(exception, _UNREACHABLE):
        request.directory_unreachable = True
