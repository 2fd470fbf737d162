"""Native Slurm users (DESIGN §11): the quota tree, memberships and priority classes as Slurm
accounts, user associations and QOS; the difference between that and what Slurm holds as ordered
``sacctmgr`` commands; the same state as a ``sacctmgr load`` flat file. Pure: fed plain values
(limits already *effective* at the sync's instant), no Django, no subprocess.

The sharing policy (issue 34 item 4, DESIGN §16) is part of the same state: owners' accounts hold
the quota; borrowing beyond it runs in a mirror tree of borrow accounts (the borrow room) whose
jobs run in one preemptible QOS that every class QOS may preempt; Fairshare from the tree's
shares; GrpSubmitJobs=0 on a tenant whose budget is spent; per-user MaxJobs and GrpTRES on the
members' associations; the dev class's MaxWall; PreemptExemptTime from the classes' minimum
runtime.

Ownership: the sync owns exactly the accounts and QOS whose name starts with the prefix, and the
user associations on those accounts. Everything else in Slurm is neither changed nor reported.
The rules and the names are documented in docs/backends.md, "Native Slurm users: accounts and
limits".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_FLOOR, Decimal

# Slurm QOS priority is unsigned; a class value is at least −1000 (PriorityClass.value's validator).
PRIORITY_OFFSET = 1000
DEFAULT_CLASS = "training"  # the submit form's default class (jobs.forms) is also the default QOS
# Account and QOS names: Slurm lowercases them; the portal's codes are [A-Za-z0-9_.-].
NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,63}$")
PREFIX_RE = re.compile(r"^[a-z][a-z0-9_]{0,19}$")
# POSIX portable user names (useradd's default rule): what a Unix user on a login node can be.
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
NO_LIMIT = None
BATCH = 200  # commands per sacctmgr process (stdin)
BUDGET_SPENT = "budget spent (no new jobs until a top-up)"
HOLD_MARK = "gpupool: the budget"  # starts the AdminComment of a job the sync held for a spent budget
BORROW = "borrow"  # the borrow QOS and the root of the borrow accounts: <prefix>borrow
GPU_TRES = "gres/gpu"  # every GPU whatever its type: what a per-user GPU cap limits


# ---- inputs -------------------------------------------------------------------------------------


# The machine TRES (DESIGN §15): cores and memory (MiB), written where the flavors have figures.
CPU_TRES, MEM_TRES = "cpu", "mem"


@dataclass(frozen=True, slots=True)
class QuotaLimit:
    """The effective quota of one department or project for one flavor, as a Slurm TRES, and
    what one unit of the flavor comes with (its share; None: the flavor has no such figure)."""

    kind: str  # "department" | "project"
    code: str
    tres: str  # e.g. "gres/gpu:a100"; "cpu" for a cpu flavor (its units are cores)
    quota: Decimal
    borrow_limit: Decimal | None  # None: no cap
    cpu_millicores_per_unit: int | None = None
    memory_mib_per_unit: int | None = None


@dataclass(frozen=True, slots=True)
class Member:
    project: str  # project code
    user: str  # Slurm (Unix) user name
    rank: int  # the role's rank in the project (member 0, project admin 1)


@dataclass(frozen=True, slots=True)
class ClassRef:
    name: str
    value: int
    preemptible: bool
    min_rank: int = 0  # the least role rank that may use the class without approval
    max_wall_minutes: int | None = None  # the longest a job of the class may run (the dev class)
    min_runtime_seconds: int = 0  # run at least this long before preemption (PreemptExemptTime)


@dataclass(frozen=True)
class PortalState:
    departments: tuple[tuple[str, str | None], ...]  # (code, parent code)
    projects: tuple[tuple[str, str], ...]  # (code, department code), active projects only
    limits: tuple[QuotaLimit, ...]
    members: tuple[Member, ...]
    classes: tuple[ClassRef, ...]
    tres: frozenset[str]  # every TRES the portal's flavors name on this cluster
    notes: tuple[str, ...] = ()  # what the caller already skipped (flavors without GRES, users)
    # (kind, code) → Slurm Fairshare: the node's shares of the tree (absent: 1, Slurm's default).
    shares: tuple[tuple[str, str, int], ...] = ()
    # (kind, code) of the departments and projects whose budget is spent: no new native jobs.
    blocked: frozenset[tuple[str, str]] = frozenset()
    # project code → (GPUs per user, running jobs per user); None: no cap.
    user_caps: tuple[tuple[str, int | None, int | None], ...] = ()
    # A borrowing job (the borrow QOS) runs at least this long before it may be preempted (Slurm
    # PreemptExemptTime): the caller gives the default class's minimum, the class a native job
    # lands in unless it asks for another.
    preempt_exempt_seconds: int = 0


@dataclass(frozen=True, slots=True)
class Naming:
    prefix: str = "gp_"
    parent: str = "root"  # the account top-level departments hang under (not owned)

    def __post_init__(self):
        if not PREFIX_RE.match(self.prefix):
            raise ValueError(f"Slurm account prefix {self.prefix!r}: 1–20 of a-z, 0-9, '_', a letter first")

    def account(self, code: str) -> str:
        return f"{self.prefix}{code.lower()}"

    def qos(self, class_name: str) -> str:
        return f"{self.prefix}{class_name.lower()}"

    def owns(self, name: str) -> bool:
        return name.startswith(self.prefix) and name != self.parent

    # Borrowing (docs/backends.md "Borrowing"): a mirror of the tree whose jobs run in one
    # preemptible QOS; its accounts' usage is apart from the owners', so it never blocks them.
    def borrow_qos(self) -> str:
        return f"{self.prefix}{BORROW}"

    def borrow_root(self) -> str:
        return f"{self.prefix}{BORROW}"

    def borrow_account(self, code: str) -> str:
        return f"{self.prefix}{BORROW}.{code.lower()}"


# ---- the state, desired or current --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    parent: str
    limits: tuple[tuple[str, int | None], ...] = ()  # (tres, whole GPUs or None), sorted
    description: str = ""
    fairshare: int = 1  # Slurm's default share
    grp_submit_jobs: int | None = None  # 0: the budget is spent, no new job; None: no limit

    def limit_map(self) -> dict[str, int | None]:
        return dict(self.limits)


@dataclass(frozen=True, slots=True)
class Association:
    account: str
    user: str
    qos: frozenset[str] | None = None  # None: not managed (no priority classes)
    default_qos: str | None = None
    max_jobs: int | None = None  # the project's running jobs per user
    limits: tuple[tuple[str, int | None], ...] = ()  # GrpTRES (gres/gpu: the GPUs per user), sorted


@dataclass(frozen=True, slots=True)
class Qos:
    name: str
    priority: int
    preempt: frozenset[str] = frozenset()
    preempt_mode: str = "cluster"  # Slurm shows OFF as "cluster"; "requeue" for preemptible classes
    max_wall_minutes: int | None = None
    preempt_exempt_seconds: int | None = None  # None: Slurm's default (the slurm.conf value)


@dataclass
class SlurmState:
    accounts: dict[str, Account] = field(default_factory=dict)
    associations: dict[tuple[str, str], Association] = field(default_factory=dict)
    qos: dict[str, Qos] = field(default_factory=dict)
    default_accounts: dict[str, str] = field(default_factory=dict)  # user → default account
    notes: list[str] = field(default_factory=list)
    tres: frozenset[str] = frozenset()  # the TRES whose limits the sync manages
    borrowing: bool = False  # the borrow tree and QOS are desired (their names are free)


# ---- desired ------------------------------------------------------------------------------------


def desired_state(state: PortalState, naming: Naming, tracked: frozenset[str] | None = None) -> SlurmState:
    """What Slurm should hold. ``tracked``: the TRES the cluster accounts (``sacctmgr show tres``);
    a limit on any other TRES would be refused by Slurm, so it is left out with a note."""
    out = SlurmState(notes=list(state.notes))
    managed = state.tres if tracked is None else state.tres & tracked
    for tres in sorted(state.tres - managed):
        out.notes.append(f"{tres} is not in the cluster's AccountingStorageTRES: not limited in Slurm")
    out.tres = frozenset(managed)
    quotas = _limits(state.limits, managed, out.notes, lambda row: row.quota)
    borrow = _limits(state.limits, managed, out.notes, _borrow_room)
    _accounts(state, naming, quotas, borrow, out)
    classes = _qos(state, naming, out)
    _associations(state, naming, classes, tracked, out)
    return out


def _borrow_room(row: QuotaLimit) -> Decimal | None:
    """What a node may hold beyond its quota, in borrowing jobs: a project its borrow limit; a
    department its quota and borrow limit (its projects borrow its idle quota too — Slurm counts
    the borrow tree apart, so this bounds the department's borrowing, not its total). None: no cap."""
    if row.borrow_limit is None:
        return None
    if row.kind == "project":
        return max(Decimal(0), row.borrow_limit)
    return max(Decimal(0), row.quota + row.borrow_limit)


def _limits(rows: Iterable[QuotaLimit], managed: frozenset[str], notes: list[str], cap_of) -> dict:
    """(kind, code) → {tres: whole units or None}, ``cap_of(row)`` each flavor's part. Flavors
    sharing a TRES add up; any of them without a cap leaves the TRES uncapped. A fractional cap is
    rounded down, with a note: Slurm counts whole GRES, and rounding up would let Slurm give more
    than the portal allows. Where ``cpu`` and ``mem`` are managed, each flavor's cap brings its
    units' share of them (a flavor without the figure leaves them uncapped)."""
    sums: dict[tuple[str, str], dict[str, Decimal | None]] = defaultdict(dict)
    for row in rows:
        if row.tres not in managed:
            continue
        cap = cap_of(row)
        per = sums[(row.kind, row.code)]
        for tres, value in _contributions(row, cap, managed):
            if tres not in per:
                per[tres] = value
            elif per[tres] is not None and value is not None:
                per[tres] += value
            else:
                per[tres] = None
    out: dict[tuple[str, str], dict[str, int | None]] = {}
    for key, per in sums.items():
        out[key] = {}
        for tres, cap in per.items():
            whole = None if cap is None else int(cap.to_integral_value(ROUND_FLOOR))
            if cap is not None and whole != cap:
                unit = {CPU_TRES: "cores", MEM_TRES: "MiB"}.get(tres, "GRES")
                note = f"{key[0]} {key[1]}: {tres} cap {cap} rounded down to {whole} (whole {unit})"
                if note not in notes:
                    notes.append(note)
            out[key][tres] = whole
    return out


def _contributions(row: QuotaLimit, cap: Decimal | None, managed: frozenset[str]):
    """What one flavor's cap adds to each TRES: its own units, and where cpu and mem are managed
    its units' share of them — cores (a cpu flavor's units are cores already) and MiB."""
    yield row.tres, cap
    if CPU_TRES in managed and row.tres != CPU_TRES:
        per = row.cpu_millicores_per_unit
        yield CPU_TRES, None if cap is None or per is None else cap * per / 1000
    if MEM_TRES in managed:
        per = row.memory_mib_per_unit
        yield MEM_TRES, None if cap is None or per is None else cap * per


def _accounts(state: PortalState, naming: Naming, quotas: dict, borrow: dict, out: SlurmState) -> None:
    """The owners' tree (``GrpTRES`` = quota, ``Fairshare`` = shares) and its borrow mirror
    (``GrpTRES`` = the borrow room) under ``<prefix>borrow``; a spent budget blocks both."""
    owners: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for code, _parent in state.departments:
        owners[naming.account(code)].append(("department", code))
    for code, _dept in state.projects:
        owners[naming.account(code)].append(("project", code))
    clashing = {name for name, who in owners.items() if len(who) > 1 or not NAME_RE.match(name)}
    for name in sorted(clashing):
        who = ", ".join(f"{k} {c}" for k, c in owners[name])
        out.notes.append(f"account {name} ({who}): name clashes or is not a valid Slurm name; skipped")
    children: dict[str | None, list[str]] = defaultdict(list)
    for code, parent in state.departments:
        children[parent].append(code)
    projects: dict[str, list[str]] = defaultdict(list)
    for code, dept in state.projects:
        projects[dept].append(code)
    shares = {(kind, code): n for kind, code, n in state.shares}
    lending = _borrow_usable(naming, owners, out)

    def add(kind: str, code: str, parent: str, borrow_parent: str | None) -> bool:
        name = naming.account(code)
        if name in clashing:
            return False
        blocked = 0 if (kind, code) in state.blocked else None
        lim = quotas.get((kind, code), {})
        values = tuple(sorted((t, lim.get(t, NO_LIMIT)) for t in out.tres))
        out.accounts[name] = Account(
            name, parent, values, describe(f"gpupool {kind} {code}", blocked),
            max(1, shares.get((kind, code), 1)), blocked,
        )
        mirror = naming.borrow_account(code)
        if borrow_parent is not None and NAME_RE.match(mirror) and mirror not in owners:
            room = borrow.get((kind, code), {})
            values = tuple(sorted((t, room.get(t, NO_LIMIT)) for t in out.tres))
            about = describe(f"gpupool borrowing {kind} {code}", blocked)
            out.accounts[mirror] = Account(mirror, borrow_parent, values, about, 1, blocked)
        return True

    def walk(dept: str | None, parent_account: str, borrow_parent: str | None) -> None:
        for code in sorted(children[dept]):
            if not add("department", code, parent_account, borrow_parent):
                out.notes.append(f"department {code}'s sub-departments and projects are skipped with it")
                continue
            account = naming.account(code)
            mirror = naming.borrow_account(code)
            below = mirror if mirror in out.accounts else None
            for project in sorted(projects[code]):
                add("project", project, account, below)
            walk(code, account, below)

    out.borrowing = lending
    if lending:
        root = naming.borrow_root()
        out.accounts[root] = Account(root, naming.parent, tuple((t, NO_LIMIT) for t in sorted(out.tres)),
                                     "gpupool borrowing", 1)
    walk(None, naming.parent, naming.borrow_root() if lending else None)


def describe(base: str, blocked: int | None) -> str:
    """An account's description. Slurm refuses a blocked account's ``sbatch`` with its generic "job
    submit limit" and no way (short of a job_submit plugin on the controller) to say why, so the
    reason is where a user can read it: ``sacctmgr show account <name> format=account,descr``."""
    return base if blocked is None else f"{base} - {BUDGET_SPENT}"  # no ":", the flat file's separator


def blocked_accounts(desired: SlurmState) -> dict[str, str]:
    """Accounts whose new jobs Slurm refuses for a spent budget — those with ``GrpSubmitJobs=0``
    and every account below one (Slurm counts a parent's limit over its subtree) — each with the
    nearest such account at or above it (whose budget is spent)."""
    out = {}
    for name in desired.accounts:
        at: str | None = name
        while at in desired.accounts:
            if desired.accounts[at].grp_submit_jobs == 0:
                out[name] = at
                break
            at = desired.accounts[at].parent
    return out


@dataclass(frozen=True, slots=True)
class PendingJob:
    """A pending job of an owned account (squeue), with its AdminComment where it is held."""

    job_id: str
    account: str
    held: bool  # Slurm's reason is JobHeldAdmin
    admin_comment: str = ""


def budget_holds(blocked: Mapping[str, str], pending: list[PendingJob]) -> tuple[list[str], list[str]]:
    """(jobs to hold, jobs to release). A spent budget also stops what its accounts had queued: the
    sync holds each of their pending jobs and says why in its AdminComment (users read it with
    ``scontrol show job``); when the budget allows again it releases the jobs it held — only those
    its comment marks, never a hold an operator placed."""
    hold = [j.job_id for j in pending if j.account in blocked and not j.held]
    release = [j.job_id for j in pending
               if j.account not in blocked and j.held and j.admin_comment.startswith(HOLD_MARK)]
    return hold, release


def hold_comment(account: str) -> str:
    return f"{HOLD_MARK} of account {account} is spent: held until a top-up"


def _borrow_usable(naming: Naming, owners: dict, out: SlurmState) -> bool:
    """The borrow tree needs its root's name free (a department coded "borrow" would take it)."""
    if naming.borrow_root() in owners:
        taken = naming.borrow_root()
        out.notes.append(f"account {taken} is a department's or project's: no borrowing in Slurm")
        return False
    return True


def _qos(state: PortalState, naming: Naming, out: SlurmState) -> dict[str, ClassRef]:
    """QOS name → class, for the classes that become QOS; and the borrow QOS, which every class
    QOS may preempt (requeue), after the minimum runtime."""
    by_name: dict[str, list[ClassRef]] = defaultdict(list)
    for c in state.classes:
        by_name[naming.qos(c.name)].append(c)
    usable: dict[str, ClassRef] = {}
    for name, found in sorted(by_name.items()):
        if len(found) > 1 or not NAME_RE.match(name) or name == naming.borrow_qos():
            out.notes.append(f"QOS {name}: priority classes clash or the name is not valid in Slurm; skipped")
            continue
        usable[name] = found[0]
    lending = out.borrowing
    for name, c in usable.items():
        lower = frozenset(n for n, o in usable.items() if o.value < c.value and o.preemptible)
        out.qos[name] = Qos(
            name,
            max(0, c.value + PRIORITY_OFFSET),
            lower | ({naming.borrow_qos()} if lending else frozenset()),
            "requeue" if c.preemptible else "cluster",
            c.max_wall_minutes,
            (c.min_runtime_seconds or None) if c.preemptible else None,
        )
    if lending:
        exempt = state.preempt_exempt_seconds or None
        out.qos[naming.borrow_qos()] = Qos(naming.borrow_qos(), 0, frozenset(), "requeue", None, exempt)
    return usable


def _associations(
    state: PortalState, naming: Naming, classes: dict[str, ClassRef], tracked: frozenset[str] | None,
    out: SlurmState,
) -> None:
    ranks: dict[tuple[str, str], int] = {}
    projects = {naming.account(code): code for code, _dept in state.projects}
    for m in state.members:
        account = naming.account(m.project)
        if account not in projects or account not in out.accounts:
            continue  # an inactive project, or one skipped (its name clashes)
        if not USER_RE.match(m.user):
            out.notes.append(f"user {m.user!r} is not a valid Unix user name: no association")
            continue
        key = (account, m.user)
        ranks[key] = max(ranks.get(key, m.rank), m.rank)
    caps = _user_caps(state, tracked, out.notes)
    for (account, user), rank in sorted(ranks.items()):
        allowed = None
        default = None
        if classes:
            mine = {n: c for n, c in classes.items() if c.min_rank <= rank}
            if not mine:
                out.notes.append(f"user {user} may use no priority class in {account}: no association")
                continue
            allowed = frozenset(mine)
            default = naming.qos(DEFAULT_CLASS)
            if default not in mine:
                default = min(mine, key=lambda n: (mine[n].value, n))
        max_jobs, limits = caps.get(projects[account], (None, ()))
        out.associations[(account, user)] = Association(account, user, allowed, default, max_jobs, limits)
        out.default_accounts.setdefault(user, account)  # sorted: the first project account by name
        mirror = naming.borrow_account(projects[account])
        if mirror in out.accounts:
            borrow = frozenset({naming.borrow_qos()})
            out.associations[(mirror, user)] = Association(mirror, user, borrow, naming.borrow_qos(),
                                                           max_jobs, limits)


def _user_caps(state: PortalState, tracked: frozenset[str] | None, notes: list[str]) -> dict:
    """project code → (MaxJobs, GrpTRES) of each member's association. A GPU cap counts every
    GPU (``gres/gpu``), so it needs that TRES in the cluster's accounting."""
    gpu_tracked = tracked is None or GPU_TRES in tracked
    out = {}
    for code, gpus, jobs in state.user_caps:
        limits: tuple[tuple[str, int | None], ...] = ()
        if gpus is not None and gpu_tracked:
            limits = ((GPU_TRES, gpus),)
        elif gpus is not None:
            notes.append(f"project {code}: {GPU_TRES} is not in AccountingStorageTRES: its GPUs per user "
                         "are not limited in Slurm")
        out[code] = (jobs, limits)
    return out


# ---- parsing sacctmgr -P -n output ---------------------------------------------------------------

ASSOC_FORMAT = "account,user,parentname,grptres,qos,defaultqos,fairshare,grpsubmitjobs,maxjobs"
QOS_FORMAT = "name,priority,preempt,preemptmode,maxwall,preemptexempttime"
USER_FORMAT = "user,defaultaccount,account"


# sacctmgr shows memory with a unit (mem=992G); the sync counts MiB.
MIB_PER = {"": 1, "K": Decimal(1) / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def parse_tres(text: str) -> dict[str, int]:
    """``cpu=10,mem=992G,gres/gpu:a100=2`` → {"cpu": 10, "mem": 1015808, "gres/gpu:a100": 2}
    (memory in MiB, whatever unit sacctmgr printed it in)."""
    out = {}
    for part in filter(None, text.split(",")):
        name, _, value = part.rpartition("=")
        unit = value[-1:].upper() if value[-1:].isalpha() else ""
        number = value[: len(value) - len(unit)] if unit else value
        out[name] = int(Decimal(number) * MIB_PER[unit]) if name == MEM_TRES else int(number)
    return out


def _names(text: str) -> frozenset[str]:
    return frozenset(n for n in text.split(",") if n)


def _int(text: str) -> int | None:
    return int(text) if text.strip().lstrip("-").isdigit() and int(text) >= 0 else None


def parse_duration(text: str) -> int | None:
    """sacctmgr's ``[days-]hours:minutes:seconds`` (or ``minutes:seconds``) → seconds; empty → None."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0)
    hours, minutes, seconds = parts[-3:]
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def _fields(line: str, count: int) -> list[str]:
    """A ``-P`` line padded to ``count`` fields (an older format without the newer columns)."""
    parts = line.split("|")
    return (parts + [""] * count)[:count]


def parse_current(
    assoc_text: str, qos_text: str, user_text: str, naming: Naming, tres: frozenset[str]
) -> SlurmState:
    """The owned part of what Slurm holds, in the shape of :func:`desired_state`'s result."""
    out = SlurmState(tres=tres)
    for line in assoc_text.splitlines():
        if not line.strip():
            continue
        account, user, parent, grptres, qos, default_qos, share, submit, max_jobs = _fields(line, 9)
        if not naming.owns(account):
            continue
        given = parse_tres(grptres)
        if user:
            gpus = ((GPU_TRES, given[GPU_TRES]),) if GPU_TRES in given else ()
            out.associations[(account, user)] = Association(
                account, user, _names(qos), default_qos or None, _int(max_jobs), gpus
            )
        else:
            values = tuple(sorted((t, given.get(t)) for t in tres))
            out.accounts[account] = Account(account, parent, values, "", _int(share) or 1, _int(submit))
    for line in qos_text.splitlines():
        if not line.strip():
            continue
        name, priority, preempt, mode, wall, exempt = _fields(line, 6)
        if naming.owns(name):
            seconds = parse_duration(wall)
            out.qos[name] = Qos(
                name, int(priority or 0), _names(preempt), mode.lower() or "cluster",
                None if seconds is None else seconds // 60, parse_duration(exempt),
            )
    for line in user_text.splitlines():
        if line.strip():
            user, default, _account = line.split("|")[:3]
            out.default_accounts[user] = default
    return out


def parse_tracked(tres_text: str) -> frozenset[str]:
    """``sacctmgr -P -n show tres format=type,name`` → {"cpu", "gres/gpu:a100", …}."""
    out = set()
    for line in tres_text.splitlines():
        if line.strip():
            kind, name = line.split("|")[:2]
            out.add(f"{kind}/{name}" if name else kind)
    return frozenset(out)


# ---- the difference -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """One difference between Slurm and the portal: what, and its value before and after."""

    kind: str  # "qos" | "account" | "association" | "default_account"
    name: str  # QOS or account name, "account/user", or the user
    action: str  # "add" | "modify" | "delete"
    before: dict | None
    after: dict | None

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "action": self.action, "before": self.before,
                "after": self.after}


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)  # sacctmgr commands, in order, without "-i"

    def __bool__(self) -> bool:
        return bool(self.commands)


def plan(desired: SlurmState, current: SlurmState, cluster: str, naming: Naming) -> Plan:
    """Ordered so each command finds what it needs: QOS (then their preempt lists), accounts top
    down, associations, default accounts; then deletions — associations, accounts bottom up, QOS."""
    p = Plan()
    _plan_qos(desired, current, p)
    _plan_accounts(desired, current, cluster, p)
    _plan_associations(desired, current, cluster, p)
    _plan_defaults(desired, current, cluster, naming, p)
    _plan_deletions(desired, current, cluster, p)
    return p


def _q(value: str) -> str:
    """Names are checked against NAME_RE / USER_RE; descriptions are ours: quoting is for spaces."""
    return f"'{value}'" if " " in value else value


def _qos_view(q: Qos) -> dict:
    return {"priority": q.priority, "preempt": sorted(q.preempt), "preempt_mode": q.preempt_mode,
            "max_wall_minutes": q.max_wall_minutes, "preempt_exempt_seconds": q.preempt_exempt_seconds}


def _limit(value: int | None) -> str:
    return "-1" if value is None else str(value)


def _plan_qos(desired: SlurmState, current: SlurmState, p: Plan) -> None:
    preempts = []
    for name, want in sorted(desired.qos.items()):
        have = current.qos.get(name)
        if have == want:
            continue
        p.changes.append(Change("qos", name, "modify" if have else "add",
                                _qos_view(have) if have else None, _qos_view(want)))
        sets = []
        if have is None or have.priority != want.priority:
            sets.append(f"priority={want.priority}")
        if have is None or have.preempt_mode != want.preempt_mode:
            sets.append(f"preemptmode={want.preempt_mode}")
        if (have.max_wall_minutes if have else None) != want.max_wall_minutes:
            sets.append(f"maxwall={_limit(want.max_wall_minutes)}")
        if (have.preempt_exempt_seconds if have else None) != want.preempt_exempt_seconds:
            # Slurm reads a bare number as minutes: seconds are written as a clock.
            exempt = want.preempt_exempt_seconds
            sets.append(f"preemptexempttime={-1 if exempt is None else _clock(exempt)}")
        if have is None:
            p.commands.append(f"add qos {name} " + " ".join(sets))
        elif sets:
            p.commands.append(f"modify qos where name={name} set " + " ".join(sets))
        if (have.preempt if have else frozenset()) != want.preempt:
            # After every QOS exists: a preempt list names other QOS.
            preempts.append(f"modify qos where name={name} set preempt={','.join(sorted(want.preempt))}")
    p.commands.extend(preempts)


def _clock(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    text = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    return f"{days}-{text}" if days else text


def _tres_text(values: Iterable[tuple[str, int | None]]) -> str:
    """GrpTRES as sacctmgr takes it: memory with its unit (``mem=<MiB>M``), -1 to clear a limit."""
    return ",".join(
        f"{t}={-1 if v is None else v}{'M' if t == MEM_TRES and v is not None else ''}" for t, v in values
    )


def _top_down(accounts: dict[str, Account]) -> list[Account]:
    """Parents before children (an account's parent outside the dict counts as placed)."""
    placed: list[Account] = []
    done: set[str] = set()
    pending = sorted(accounts.values(), key=lambda a: a.name)
    while pending:
        ready = [a for a in pending if a.parent not in accounts or a.parent in done]
        if not ready:  # a cycle cannot come from a tree; place the rest as they are
            ready = pending
        placed.extend(ready)
        done.update(a.name for a in ready)
        pending = [a for a in pending if a.name not in done]
    return placed


def _account_view(a: Account) -> dict:
    return {"parent": a.parent, "grptres": {t: v for t, v in a.limits}, "fairshare": a.fairshare,
            "grp_submit_jobs": a.grp_submit_jobs}


def _account_sets(want: Account, have: Account | None) -> list[str]:
    """Fairshare and GrpSubmitJobs where they differ (a new account: where not Slurm's default)."""
    sets = []
    if (have.fairshare if have else 1) != want.fairshare:
        sets.append(f"fairshare={want.fairshare}")
    if (have.grp_submit_jobs if have else None) != want.grp_submit_jobs:
        sets.append(f"grpsubmitjobs={_limit(want.grp_submit_jobs)}")
        if have is not None:  # the description says why, in step with the block (``describe``)
            sets.append(f"description={_q(want.description)}")
    return sets


def _plan_accounts(desired: SlurmState, current: SlurmState, cluster: str, p: Plan) -> None:
    for want in _top_down(desired.accounts):
        have = current.accounts.get(want.name)
        if have is None:
            p.changes.append(Change("account", want.name, "add", None, _account_view(want)))
            capped = [(t, v) for t, v in want.limits if v is not None]
            cmd = f"add account {want.name} cluster={cluster} parent={want.parent}"
            cmd += f" description={_q(want.description)}"
            cmd += f" grptres={_tres_text(capped)}" if capped else ""
            p.commands.append(" ".join([cmd, *_account_sets(want, None)]))
            continue
        moved = have.parent != want.parent
        differing = [(t, v) for t, v in want.limits if have.limit_map().get(t) != v]
        others = _account_sets(want, have)
        if not moved and not differing and not others:
            continue
        p.changes.append(Change("account", want.name, "modify", _account_view(have), _account_view(want)))
        where = f"modify account where name={want.name} cluster={cluster} set"
        if moved:
            p.commands.append(f"{where} parent={want.parent}")
        if differing:
            others.insert(0, f"grptres={_tres_text(differing)}")
        if others:
            p.commands.append(f"{where} {' '.join(others)}")


def _assoc_view(a: Association) -> dict:
    return {"qos": None if a.qos is None else sorted(a.qos), "default_qos": a.default_qos,
            "max_jobs": a.max_jobs, "grptres": {t: v for t, v in a.limits}}


def _qos_sets(want: Association, have: Association | None) -> str:
    parts = []
    if want.qos is not None and (have is None or have.qos != want.qos):
        parts.append(f"qos={','.join(sorted(want.qos))}")
    if want.qos is not None and (have is None or have.default_qos != want.default_qos):
        parts.append(f"defaultqos={want.default_qos}")
    if (have.max_jobs if have else None) != want.max_jobs:
        parts.append(f"maxjobs={_limit(want.max_jobs)}")
    wanted, held = dict(want.limits), dict(have.limits) if have else {}
    changed = sorted((t, wanted.get(t)) for t in set(wanted) | set(held) if wanted.get(t) != held.get(t))
    if changed:
        parts.append(f"grptres={_tres_text(changed)}")
    return " ".join(parts)


def _plan_associations(desired: SlurmState, current: SlurmState, cluster: str, p: Plan) -> None:
    for key, want in sorted(desired.associations.items()):
        have = current.associations.get(key)
        where = f"account={want.account} cluster={cluster}"
        label = f"{want.account}/{want.user}"
        if have is None:
            p.changes.append(Change("association", label, "add", None, _assoc_view(want)))
            p.commands.append(f"add user {want.user} {where} {_qos_sets(want, None)}".rstrip())
            continue
        sets = _qos_sets(want, have)
        if sets:
            p.changes.append(Change("association", label, "modify", _assoc_view(have), _assoc_view(want)))
            p.commands.append(f"modify user where name={want.user} {where} set {sets}")


def _plan_defaults(desired: SlurmState, current: SlurmState, cluster: str, naming: Naming, p: Plan) -> None:
    """A user's default account is set when it is missing or one of ours that is not the wanted
    one; a default the site gave (an account we do not own) stays."""
    for user, want in sorted(desired.default_accounts.items()):
        have = current.default_accounts.get(user) or ""
        if have == want or (have and not naming.owns(have)):
            continue
        before, after = {"account": have or None}, {"account": want}
        p.changes.append(Change("default_account", user, "modify", before, after))
        p.commands.append(f"modify user where name={user} cluster={cluster} set defaultaccount={want}")


def _plan_deletions(desired: SlurmState, current: SlurmState, cluster: str, p: Plan) -> None:
    for key, have in sorted(current.associations.items()):
        if key not in desired.associations:
            label = f"{have.account}/{have.user}"
            p.changes.append(Change("association", label, "delete", _assoc_view(have), None))
            p.commands.append(f"delete user where name={have.user} account={have.account} cluster={cluster}")
    for have in reversed(_top_down(current.accounts)):
        if have.name not in desired.accounts:
            p.changes.append(Change("account", have.name, "delete", _account_view(have), None))
            p.commands.append(f"delete account where name={have.name} cluster={cluster}")
    for name, have in sorted(current.qos.items()):
        if name not in desired.qos:
            p.changes.append(Change("qos", name, "delete", _qos_view(have), None))
            p.commands.append(f"delete qos where name={name}")


def batches(commands: list[str], size: int = BATCH) -> list[list[str]]:
    return [commands[i : i + size] for i in range(0, len(commands), size)]


# ---- the flat file ---------------------------------------------------------------------------------


def flat_file(desired: SlurmState, cluster: str, naming: Naming) -> str:
    """``sacctmgr load`` input: the cluster, then each parent's accounts, then each project
    account's users. Values with ':' or ',' are quoted — the file splits fields on ':' (Slurm
    22.05's own dump writes GrpTRES bare, which its load cannot read back for typed GRES). QOS
    are not part of the format: they must exist first (the sync creates them)."""
    lines = [f"Cluster - '{cluster}'"]
    kids: dict[str, list[Account]] = defaultdict(list)
    for account in _top_down(desired.accounts):
        kids[account.parent].append(account)
    users: dict[str, list[Association]] = defaultdict(list)
    for (account, _user), assoc in sorted(desired.associations.items()):
        users[account].append(assoc)
    for parent in [naming.parent, *(a.name for a in _top_down(desired.accounts))]:
        if kids.get(parent):
            lines.append(f"Parent - '{parent}'")
            for account in kids[parent]:
                fields = [f"Account - '{account.name}'", f"Description='{account.description}'"]
                capped = [(t, v) for t, v in account.limits if v is not None]
                if capped:
                    fields.append(f"GrpTRES='{_tres_text(capped)}'")
                if account.fairshare != 1:
                    fields.append(f"Fairshare={account.fairshare}")
                if account.grp_submit_jobs is not None:
                    fields.append(f"GrpSubmitJobs={account.grp_submit_jobs}")
                lines.append(":".join(fields))
        if users.get(parent):
            lines.append(f"Parent - '{parent}'")
            for assoc in users[parent]:
                fields = [f"User - '{assoc.user}'"]
                default = desired.default_accounts.get(assoc.user)
                if default:
                    fields.append(f"DefaultAccount='{default}'")
                if assoc.qos is not None:
                    fields += [f"DefaultQOS='{assoc.default_qos}'", f"QOS='{','.join(sorted(assoc.qos))}'"]
                if assoc.max_jobs is not None:
                    fields.append(f"MaxJobs={assoc.max_jobs}")
                if assoc.limits:
                    fields.append(f"GrpTRES='{_tres_text(assoc.limits)}'")
                lines.append(":".join(fields))
    return "\n".join(lines) + "\n"


def parse_flat_file(text: str) -> tuple[str, dict[str, tuple[str, dict]], dict[tuple[str, str], dict]]:
    """A reader of the flat file (the subset :func:`flat_file` writes): cluster, {account: (parent,
    fields)}, {(account, user): fields}. Fields split on ':' outside quotes, as sacctmgr does."""
    cluster = ""
    parent = ""
    accounts: dict[str, tuple[str, dict]] = {}
    users: dict[tuple[str, str], dict] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        head, *rest = _split_fields(line)
        kind, _, name = head.partition(" - ")
        name = name.strip("'")
        fields = {k: v.strip("'") for k, _, v in (f.partition("=") for f in rest)}
        if kind == "Cluster":
            cluster = name
        elif kind == "Parent":
            parent = name
        elif kind == "Account":
            accounts[name] = (parent, fields)
        elif kind == "User":
            users[(parent, name)] = fields
        else:
            raise ValueError(f"unknown flat-file line: {raw!r}")
    return cluster, accounts, users


def _split_fields(line: str) -> list[str]:
    parts, buf, quoted = [], [], False
    for ch in line:
        if ch == "'":
            quoted = not quoted
        if ch == ":" and not quoted:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    if quoted:
        raise ValueError(f"unbalanced quote in {line!r}")
    parts.append("".join(buf))
    return parts
