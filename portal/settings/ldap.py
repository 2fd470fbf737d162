"""The LDAP directory (DESIGN §12, docs/identity.md): sign-in through django-auth-ldap (its
``AUTH_LDAP_*`` settings) and the periodic sync (``LDAP_SYNC``), both from the same variables.

Sign-in: the service account binds, searches the user under GPUPOOL_LDAP_USER_BASE with
GPUPOOL_LDAP_USER_FILTER (``%(user)s`` is the name typed), then binds as the user's DN with the
password typed. Groups are the groupOfNames (or groupOfUniqueNames) entries under
GPUPOOL_LDAP_GROUP_BASE whose member attribute names the user's DN.
"""

import ldap
from django_auth_ldap.config import LDAPSearch, MemberDNGroupType

from portal.env import env_bool, env_int, env_str

__all__ = [
    "AUTH_LDAP_ALWAYS_UPDATE_USER",
    "AUTH_LDAP_BIND_DN",
    "AUTH_LDAP_BIND_PASSWORD",
    "AUTH_LDAP_CONNECTION_OPTIONS",
    "AUTH_LDAP_GROUP_SEARCH",
    "AUTH_LDAP_GROUP_TYPE",
    "AUTH_LDAP_SERVER_URI",
    "AUTH_LDAP_START_TLS",
    "AUTH_LDAP_USER_SEARCH",
    "LDAP_SYNC",
]

AUTH_LDAP_SERVER_URI = env_str("GPUPOOL_LDAP_URI", "ldap://127.0.0.1:389/")
AUTH_LDAP_BIND_DN = env_str("GPUPOOL_LDAP_BIND_DN", "")
AUTH_LDAP_BIND_PASSWORD = env_str("GPUPOOL_LDAP_BIND_PASSWORD", "")
AUTH_LDAP_START_TLS = env_bool("GPUPOOL_LDAP_START_TLS", False)
_USER_BASE = env_str("GPUPOOL_LDAP_USER_BASE", "ou=people,dc=centre,dc=example")
_USER_FILTER = env_str("GPUPOOL_LDAP_USER_FILTER", "(&(objectClass=inetOrgPerson)(uid=%(user)s))")
_GROUP_BASE = env_str("GPUPOOL_LDAP_GROUP_BASE", "ou=groups,dc=centre,dc=example")
_GROUP_FILTER = env_str("GPUPOOL_LDAP_GROUP_FILTER", "(objectClass=groupOfNames)")
_MEMBER_ATTR = env_str("GPUPOOL_LDAP_GROUP_MEMBER_ATTR", "member")
_TIMEOUT = env_int("GPUPOOL_LDAP_TIMEOUT_SECONDS", 10, min_value=1, max_value=300)
_CA_FILE = env_str("GPUPOOL_LDAP_CA_FILE", "")

# A server that does not answer must not hold a sign-in (or a worker) for long.
AUTH_LDAP_CONNECTION_OPTIONS = {
    ldap.OPT_REFERRALS: 0,
    ldap.OPT_NETWORK_TIMEOUT: _TIMEOUT,
    ldap.OPT_TIMEOUT: _TIMEOUT,
    **({ldap.OPT_X_TLS_CACERTFILE: _CA_FILE} if _CA_FILE else {}),
    ldap.OPT_X_TLS_REQUIRE_CERT: ldap.OPT_X_TLS_DEMAND,
    ldap.OPT_X_TLS_NEWCTX: 0,  # last: applies the TLS options above to this connection
}
AUTH_LDAP_USER_SEARCH = LDAPSearch(_USER_BASE, ldap.SCOPE_SUBTREE, _USER_FILTER)
AUTH_LDAP_GROUP_SEARCH = LDAPSearch(_GROUP_BASE, ldap.SCOPE_SUBTREE, _GROUP_FILTER)
AUTH_LDAP_GROUP_TYPE = MemberDNGroupType(member_attr=_MEMBER_ATTR, name_attr="cn")
# portal.directory.apply_identity writes the user; django-auth-ldap's own copying stays off.
AUTH_LDAP_ALWAYS_UPDATE_USER = False

LDAP_SYNC = {
    "USER_BASE": _USER_BASE,
    "USER_FILTER": _USER_FILTER,
    "GROUP_BASE": _GROUP_BASE,
    "GROUP_FILTER": _GROUP_FILTER,
    "MEMBER_ATTR": _MEMBER_ATTR,
    # Users this filter matches are disabled (e.g. "(pwdAccountLockedTime=*)", or Active Directory's
    # "(userAccountControl:1.2.840.113556.1.4.803:=2)"); empty: only users gone from the directory are.
    "DISABLED_FILTER": env_str("GPUPOOL_LDAP_DISABLED_FILTER", ""),
    "ATTR_USERNAME": env_str("GPUPOOL_LDAP_ATTR_USERNAME", "uid"),
    "ATTR_UNIX_NAME": env_str("GPUPOOL_LDAP_ATTR_UNIX_NAME", "uid"),
    "ATTR_DISPLAY_NAME": env_str("GPUPOOL_LDAP_ATTR_DISPLAY_NAME", "cn"),
    "ATTR_MAIL": env_str("GPUPOOL_LDAP_ATTR_MAIL", "mail"),
    "PAGE_SIZE": env_int("GPUPOOL_LDAP_PAGE_SIZE", 500, min_value=1, max_value=10000),
}
