"""A real OpenLDAP server for the tests (deploy/ldap/start.sh: Debian's slapd, private, on a free
port, StartTLS with a self-signed certificate), its tree loaded and changed with ldapadd and
ldapmodify as the admin DN. Where slapd is not installed or cannot start the tests skip, except
under CI (``CI`` set), where they fail.

The tree (docs/identity.md): people under ou=people (inetOrgPerson: uid, cn, mail, userPassword),
groups under ou=groups (groupOfNames: member), a disabled user carries ``pwdAccountLockedTime``
(slapd's ppolicy refuses their bind; the portal's GPUPOOL_LDAP_DISABLED_FILTER finds them).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = "dc=centre,dc=example"
PEOPLE = f"ou=people,{SUFFIX}"
GROUPS = f"ou=groups,{SUFFIX}"
NOBODY = f"cn=nobody,{SUFFIX}"  # groupOfNames needs a member: an empty group names this one
_names = itertools.count(1)


def group_dn(name: str) -> str:
    return f"cn={name},{GROUPS}"


def person_dn(uid: str) -> str:
    return f"uid={uid},{PEOPLE}"


@dataclass
class Slapd:
    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return self.env["LDAP_URI"]

    def _admin(self, tool: str, ldif: str, *extra: str) -> None:
        result = subprocess.run(
            [tool, "-x", "-H", self.uri, "-D", self.env["LDAP_ADMIN_DN"],
             "-w", self.env["LDAP_ADMIN_PASSWORD"], *extra],
            input=ldif, capture_output=True, text=True, timeout=120,
        )
        assert result.returncode == 0, f"{tool}: {result.stderr}"

    def add(self, ldif: str) -> None:
        self._admin("ldapadd", ldif)

    def modify(self, ldif: str) -> None:
        self._admin("ldapmodify", ldif)

    def delete(self, *dns: str) -> None:
        self._admin("ldapdelete", "\n".join(dns) + "\n", "-c")

    def add_group(self, name: str) -> str:
        self.add(f"dn: {group_dn(name)}\nobjectClass: groupOfNames\ncn: {name}\nmember: {NOBODY}\n")
        return group_dn(name)

    def add_person(self, uid: str, password: str, *, groups=(), mail: str | None = None) -> str:
        dn = person_dn(uid)
        self.add(
            f"dn: {dn}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid.title()} Example\nsn: Example\n"
            f"mail: {mail or uid + '@centre.example'}\nuserPassword: {password}\n"
        )
        for group in groups:
            self.join(uid, group)
        return dn

    def join(self, uid: str, group: str) -> None:
        self.modify(f"dn: {group_dn(group)}\nchangetype: modify\nadd: member\nmember: {person_dn(uid)}\n")

    def leave(self, uid: str, group: str) -> None:
        self.modify(f"dn: {group_dn(group)}\nchangetype: modify\ndelete: member\nmember: {person_dn(uid)}\n")

    def disable(self, uid: str) -> None:
        # ppolicy's permanent lock: slapd refuses the bind from now on.
        self.modify(f"dn: {person_dn(uid)}\nchangetype: modify\nadd: pwdAccountLockedTime\n"
                    "pwdAccountLockedTime: 000001010000Z\n")

    def stop(self) -> None:
        stop = ROOT / "deploy/ldap/stop.sh"
        subprocess.run(["bash", str(stop), str(self.run_dir)], check=False, timeout=60)


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def start_slapd(run_dir: Path, extra_ldif: Path | None = None) -> Slapd:
    if not (shutil.which("slapd") or Path("/usr/sbin/slapd").exists()) or not shutil.which("ldapadd"):
        _unavailable("slapd / ldap-utils are not installed (deploy/ldap/install.sh)")
    start = ROOT / "deploy/ldap/start.sh"
    args = ["bash", str(start), str(run_dir), *([str(extra_ldif)] if extra_ldif else [])]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        _unavailable(f"slapd did not start: {result.stderr[-2000:]}")
    env = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    server = Slapd(run_dir, env)
    server.add(f"dn: {NOBODY}\nobjectClass: organizationalRole\ncn: nobody\n")
    return server


@pytest.fixture(scope="module")
def slapd() -> Iterator[Slapd]:
    run_dir = Path(tempfile.mkdtemp(prefix="gpupool-slapd-"))
    server = start_slapd(run_dir)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def unique(prefix: str) -> str:
    """Names no other test of the module uses (the server is shared, the tests run in any order)."""
    return f"{prefix}{os.getpid()}x{next(_names)}"


def point_portal_at(settings, server: Slapd, *, start_tls: bool = True) -> None:
    """The portal's settings (pytest-django's ``settings``) for ``server``, LDAP after local."""
    import ldap

    settings.AUTHENTICATION_BACKENDS = [
        "django.contrib.auth.backends.ModelBackend", "portal.ldap_auth.DirectoryLDAPBackend",
    ]
    settings.AUTH_LDAP_SERVER_URI = server.uri
    settings.AUTH_LDAP_BIND_DN = server.env["LDAP_BIND_DN"]
    settings.AUTH_LDAP_BIND_PASSWORD = server.env["LDAP_BIND_PASSWORD"]
    settings.AUTH_LDAP_START_TLS = start_tls
    settings.AUTH_LDAP_CONNECTION_OPTIONS = {
        ldap.OPT_REFERRALS: 0, ldap.OPT_NETWORK_TIMEOUT: 10, ldap.OPT_TIMEOUT: 10,
        ldap.OPT_X_TLS_CACERTFILE: server.env["LDAP_CA_FILE"],
        ldap.OPT_X_TLS_REQUIRE_CERT: ldap.OPT_X_TLS_DEMAND, ldap.OPT_X_TLS_NEWCTX: 0,
    }
    settings.LDAP_SYNC = {**settings.LDAP_SYNC, "DISABLED_FILTER": "(pwdAccountLockedTime=*)"}
