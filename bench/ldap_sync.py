"""Syncing a 10,000-user, 2,000-group LDAP directory (DESIGN §12) from a real slapd into a scratch
database (bench/scratchdb.py); target ≤ 30 s, and a resync of the unchanged directory writes nothing
(issue 32 item 23; it was ≤ 60 s in issue 21).

The directory is generated as LDIF and loaded with slapadd before slapd starts
(deploy/ldap/start.sh RUN_DIR EXTRA.ldif): 10,000 inetOrgPerson users (uid, cn, mail), 1 % of them
locked (``pwdAccountLockedTime``), and 2,000 groupOfNames, each user in 3 of them. 200 of the groups
map to roles by rules (member of one of 20 projects, or department admin of one of 4 departments).

Timed, each through ``portal.ldap_sync.sync_ldap`` exactly as the beat task runs it (service bind,
StartTLS, paged searches of 500, then ``sync_directory("ldap", …, complete=True)``):
``sync_seconds`` the first sync (creates every user and their roles) and ``resync_seconds`` a
second one (nothing changed: every user is read and compared again), with the SQL statements each
ran (``*_statements``; ``resync_writes``: its INSERT, UPDATE and DELETE statements, 0 when nothing
changed). Prints one JSON object.

    python bench/ldap_sync.py [--users 10000] [--groups 2000]

Needs DATABASE_URL and REDIS_URL, and slapd (deploy/ldap/install.sh).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from scratchdb import scratch_django  # noqa: E402

SUFFIX = "dc=centre,dc=example"
GROUPS_PER_USER = 3
RULES = 200


def directory_ldif(users: int, groups: int, seed: int = 21) -> str:
    rng = random.Random(seed)
    members: list[list[str]] = [[] for _ in range(groups)]
    lines = []
    for n in range(users):
        uid = f"user{n:05d}"
        dn = f"uid={uid},ou=people,{SUFFIX}"
        lines.append(f"dn: {dn}\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: User {n}\nsn: {n}\n"
                     f"mail: {uid}@centre.example\n")
        if n % 100 == 99:
            lines.append("pwdAccountLockedTime: 000001010000Z\n")
        lines.append("\n")
        for g in rng.sample(range(groups), GROUPS_PER_USER):
            members[g].append(dn)
    for g, names in enumerate(members):
        lines.append(f"dn: cn=group{g:04d},ou=groups,{SUFFIX}\nobjectClass: groupOfNames\ncn: group{g:04d}\n")
        lines.extend(f"member: {dn}\n" for dn in names or [f"cn=admin,{SUFFIX}"])
        lines.append("\n")
    return "".join(lines)


def _start(run_dir: Path, ldif: Path) -> dict[str, str]:
    out = subprocess.run(["bash", str(ROOT / "deploy/ldap/start.sh"), str(run_dir), str(ldif)],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _point_at(env: dict[str, str]) -> None:
    import ldap
    from django.conf import settings

    settings.AUTH_LDAP_SERVER_URI = env["LDAP_URI"]
    settings.AUTH_LDAP_BIND_DN = env["LDAP_BIND_DN"]
    settings.AUTH_LDAP_BIND_PASSWORD = env["LDAP_BIND_PASSWORD"]
    settings.AUTH_LDAP_START_TLS = True
    settings.AUTH_LDAP_CONNECTION_OPTIONS = {
        ldap.OPT_REFERRALS: 0, ldap.OPT_X_TLS_CACERTFILE: env["LDAP_CA_FILE"],
        ldap.OPT_X_TLS_REQUIRE_CERT: ldap.OPT_X_TLS_DEMAND, ldap.OPT_X_TLS_NEWCTX: 0,
    }
    settings.LDAP_SYNC = {**settings.LDAP_SYNC, "DISABLED_FILTER": "(pwdAccountLockedTime=*)"}


def _rules() -> None:
    from portal.models import Department, DirectoryRule, Project, Role

    depts = [Department.objects.create(code=f"d{i}", name=f"d{i}") for i in range(4)]
    projects = [Project.objects.create(code=f"p{i}", name=f"p{i}", department=depts[i % 4])
                for i in range(20)]
    for r in range(RULES):
        group = f"cn=group{r * 10:04d},ou=groups,{SUFFIX}"
        if r % 10 == 0:
            scope = {"role": Role.DEPARTMENT_ADMIN, "department": depts[r % 4]}
        else:
            scope = {"role": Role.MEMBER, "project": projects[r % 20]}
        DirectoryRule.objects.create(directory="ldap", group=group, **scope)


@contextmanager
def _counting(counts: Counter):
    """Count the statements run inside, by their first word (SELECT, INSERT, UPDATE, …)."""
    from django.db import connection

    def count(execute, sql, params, many, context):
        counts[sql.split(None, 1)[0].upper()] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        yield


def _timed_sync(counts: Counter):
    from portal.ldap_sync import sync_ldap

    started = time.perf_counter()
    with _counting(counts):
        report, listing = sync_ldap()
    return report, listing, time.perf_counter() - started


def run(users: int, groups: int) -> dict:
    run_dir = Path(tempfile.mkdtemp(prefix="gpupool-bench-slapd-"))
    try:
        ldif = run_dir / "directory.ldif"
        ldif.write_text(directory_ldif(users, groups))
        started = time.perf_counter()
        env = _start(run_dir / "slapd", ldif)
        load_seconds = time.perf_counter() - started
        with scratch_django():
            _point_at(env)
            _rules()
            from portal.models import Membership, User

            first_counts, second_counts = Counter(), Counter()
            first, listing, sync_seconds = _timed_sync(first_counts)
            second, _, resync_seconds = _timed_sync(second_counts)
            return {
                "users": len(listing.identities), "groups": listing.groups,
                "sync_seconds": round(sync_seconds, 2), "resync_seconds": round(resync_seconds, 2),
                "sync_statements": sum(first_counts.values()),
                "resync_statements": sum(second_counts.values()),
                "resync_writes": sum(second_counts[k] for k in ("INSERT", "UPDATE", "DELETE")),
                "slapadd_and_start_seconds": round(load_seconds, 2),
                "portal_users": User.objects.filter(directory="ldap", is_active=True).count(),
                "roles_from_rules": Membership.objects.filter(rule__isnull=False).count(),
                "first": first.as_dict(), "second": second.as_dict(),
            }
    finally:
        subprocess.run(["bash", str(ROOT / "deploy/ldap/stop.sh"), str(run_dir / "slapd")], check=False)
        shutil.rmtree(run_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--groups", type=int, default=2_000)
    args = parser.parse_args()
    print(json.dumps(run(args.users, args.groups)))


if __name__ == "__main__":
    main()
