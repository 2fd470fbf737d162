"""Slurm accounts diff benchmark (issue 20, item 1): the pure core of the accounts sync
(quotas.slurm_accounts) for ``accounts`` Slurm accounts × ``flavors`` GPU types. Prints ONE JSON
object: {"diff_accounts": N, "diff_seconds": t, ...}.

    python bench/native_accounts.py [--accounts 1000] [--flavors 5]

A realistic portal: departments of 19 projects each (1 in 20 accounts a department), 5 members
per project, 5 priority classes, a quota node per owner and flavor. Slurm's side is what a sync
would have left, then drifted: every 10th account's GrpTRES edited by hand, every 25th project with
an extra user and one member's association gone, one QOS's priority changed — written as the
``sacctmgr -P -n`` text the sync reads. Timed: computing the desired state, parsing that text, and
the diff (the ordered commands), i.e. everything a sync does between its reads and its writes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from quotas.slurm_accounts import (
    ClassRef,
    Member,
    Naming,
    PortalState,
    QuotaLimit,
    SlurmState,
    desired_state,
    parse_current,
    plan,
)

NAMING = Naming("gp_", "root")
PROJECTS_PER_DEPARTMENT = 19
MEMBERS_PER_PROJECT = 5


def portal(accounts: int, flavors: int) -> PortalState:
    tres = [f"gres/gpu:type{i}" for i in range(flavors)]
    departments, projects = [], []
    while len(departments) + len(projects) < accounts:
        dept = f"dept{len(departments):04d}"
        departments.append((dept, None))
        for _ in range(min(PROJECTS_PER_DEPARTMENT, accounts - len(departments) - len(projects))):
            projects.append((f"proj{len(projects):05d}", dept))
    limits = [
        QuotaLimit("department", code, t, Decimal(64), Decimal(16) if i % 2 else None)
        for code, _p in departments
        for i, t in enumerate(tres)
    ] + [
        QuotaLimit("project", code, t, Decimal(8), Decimal(4) if (n + i) % 3 else None)
        for n, (code, _d) in enumerate(projects)
        for i, t in enumerate(tres)
    ]
    members = [
        Member(code, f"user{(n * MEMBERS_PER_PROJECT + k) % (len(projects) * 3 + 1):05d}", int(k == 0))
        for n, (code, _d) in enumerate(projects)
        for k in range(MEMBERS_PER_PROJECT)
    ]
    classes = (
        ClassRef("inference-online", 1000, False, 1),
        ClassRef("training-high", 500, True),
        ClassRef("training", 100, True),
        ClassRef("dev", 50, True),
        ClassRef("best-effort", 0, True),
    )
    return PortalState(
        departments=tuple(departments),
        projects=tuple(projects),
        limits=tuple(limits),
        members=tuple(members),
        classes=classes,
        tres=frozenset(tres),
    )


def slurm_text(desired: SlurmState) -> tuple[str, str, str]:
    """What ``sacctmgr -P -n show assoc / qos / user withassoc`` would print, drifted."""
    assoc, users = ["root||||normal|", "root|root|||normal|"], []
    for n, account in enumerate(sorted(desired.accounts.values(), key=lambda a: a.name)):
        limits = {t: v for t, v in account.limits if v is not None}
        if n % 10 == 0:
            limits = {t: 999 for t in limits} | {"cpu": 128}  # edited by hand; cpu is the site's
        grptres = ",".join(f"{t}={v}" for t, v in sorted(limits.items()))
        assoc.append(f"{account.name}||{account.parent}|{grptres}|normal|")
    for n, ((account, user), a) in enumerate(sorted(desired.associations.items())):
        if n % 125 == 1:
            continue  # removed by hand
        assoc.append(f"{account}|{user}|||{','.join(sorted(a.qos or ()))}|{a.default_qos or ''}")
        users.append(f"{user}|{desired.default_accounts.get(user, '')}|{account}")
        if n % 125 == 0:
            assoc.append(f"{account}|intruder{n}|||normal|")  # added by hand
    qos = ["normal|0||cluster"]
    for name, q in sorted(desired.qos.items()):
        priority = q.priority + (7 if name.endswith("_dev") else 0)
        qos.append(f"{name}|{priority}|{','.join(sorted(q.preempt))}|{q.preempt_mode}")
    return "\n".join(assoc), "\n".join(qos), "\n".join(users)


def run(accounts: int = 1000, flavors: int = 5) -> dict:
    state = portal(accounts, flavors)
    texts = slurm_text(desired_state(state, NAMING))
    started = time.perf_counter()
    desired = desired_state(state, NAMING)
    current = parse_current(*texts, NAMING, desired.tres)
    todo = plan(desired, current, "bench", NAMING)
    seconds = time.perf_counter() - started
    return {
        "diff_accounts": len(desired.accounts),
        "diff_seconds": round(seconds, 3),
        "diff_flavors": flavors,
        "diff_associations": len(desired.associations),
        "diff_changes": len(todo.changes),
        "diff_commands": len(todo.commands),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accounts", type=int, default=1000)
    ap.add_argument("--flavors", type=int, default=5)
    args = ap.parse_args()
    print(json.dumps(run(args.accounts, args.flavors)))


if __name__ == "__main__":
    main()
