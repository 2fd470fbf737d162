"""Keep Slurm's accounts, user associations and QOS in step with the portal (DESIGN §11, docs/backends.md
"Native Slurm users: accounts and limits"). The decisions are in :mod:`quotas.slurm_accounts`
(pure); this module reads the database, runs ``sacctmgr`` through :mod:`jobs.native.backends.sacctmgr`
and records each run as a :class:`quotas.models.SlurmSyncRun`.

Which clusters: every active Slurm cluster that is not simulated, unless its config says
``"accounts_sync": false``. When: after every committed write of a quota node, loan, quota window,
membership, priority class, department or project (model signals, so the admin, the approvals
and the services alike trigger it, once per transaction), and from beat every
``SLURM_ACCOUNTS_INTERVAL_SECONDS``, because windows open and loans end on the clock.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs.clusters.backends.base import BackendError
from jobs.clusters.backends.registry import is_simulated
from jobs.models import USAGE_ROLE_RANK, PriorityClass
from jobs.native.backends.sacctmgr import Sacctmgr
from jobs.requests import flavor_share
from jobs.scheduling.config import over_budget_providers
from portal.enqueue import send
from portal.models import PROJECT_ROLES, Department, Membership, Project, User
from quotas.models import (
    Cluster,
    ClusterKind,
    FairShareWeight,
    Flavor,
    FlavorKind,
    Loan,
    QuotaNode,
    QuotaWindow,
    SlurmSyncRun,
)
from quotas.queues import share_weight
from quotas.selectors import effective_limits_map
from quotas.slurm_accounts import (
    CPU_TRES,
    DEFAULT_CLASS,
    MEM_TRES,
    ClassRef,
    Member,
    Naming,
    PortalState,
    QuotaLimit,
    SlurmState,
    blocked_accounts,
    budget_holds,
    desired_state,
    flat_file,
    hold_comment,
    parse_current,
    parse_tracked,
    plan,
)

log = logging.getLogger(__name__)
CONFIG_KEY = "accounts_sync"
TASK = "jobs.sync_slurm_accounts"
LOCK_KEY = 0x5AC7  # advisory lock namespace: one sync per cluster at a time
KEEP_QUIET_RUNS = timedelta(days=7)  # runs that found nothing to do are pruned after this


def naming() -> Naming:
    return Naming(settings.GPUPOOL["SLURM_ACCOUNT_PREFIX"], settings.GPUPOOL["SLURM_PARENT_ACCOUNT"])


def slurm_user_name(user: User) -> str:
    """The Slurm (Unix) user name of a portal user (DESIGN §12): the directory's Unix name (LDAP
    uid, an OIDC claim) when it gave one, else the username."""
    return user.unix_name


def accounts_clusters() -> list[Cluster]:
    candidates = Cluster.objects.filter(active=True, kind=ClusterKind.SLURM).order_by("name")
    return [
        c for c in candidates
        if not is_simulated(c.kind, c.config or {}) and (c.config or {}).get(CONFIG_KEY, True) is not False
    ]


def client_for(cluster: Cluster) -> Sacctmgr:
    return Sacctmgr((cluster.config or {}).get("slurm_conf") or os.environ["SLURM_CONF"])


# -- the portal's side


def tres_of(flavor: Flavor, gres_map: dict) -> str | None:
    """``gres/<type>`` that Slurm accounts the flavor's GPUs as on this cluster: the cluster's
    ``gres_map`` (by the flavor's GRES or its name), else the flavor's own GRES; ``cpu`` for a cpu
    flavor (its units are cores)."""
    if flavor.kind == FlavorKind.CPU:
        return CPU_TRES
    gres = gres_map.get(flavor.slurm_gres) or gres_map.get(flavor.name) or flavor.slurm_gres
    return f"gres/{gres}" if gres else None


def portal_state(cluster: Cluster, now: datetime) -> PortalState:
    gres_map = (cluster.config or {}).get("gres_map") or {}
    flavors = {f.pk: f for f in Flavor.objects.filter(active=True)}
    tres = {pk: tres_of(f, gres_map) for pk, f in flavors.items()}
    nodes = list(
        QuotaNode.objects.filter(flavor_id__in=flavors)
        .filter(Q(project__isnull=True) | Q(project__active=True))
        .select_related("department", "project")
    )
    notes = [
        f"flavor {flavors[pk].name} has no Slurm GRES: its quota is not limited in Slurm"
        for pk in sorted({n.flavor_id for n in nodes}, key=lambda pk: flavors[pk].name)
        if tres[pk] is None
    ]
    effective = effective_limits_map([n for n in nodes if tres[n.flavor_id]], now)
    shares = {pk: flavor_share(f) for pk, f in flavors.items() if tres[pk]}
    limits = tuple(
        QuotaLimit(
            "project" if n.project_id else "department",
            n.project.code if n.project_id else n.department.code,
            tres[n.flavor_id],
            effective[n.pk].quota,
            effective[n.pk].borrow_limit,
            shares[n.flavor_id].cpu_millicores,
            shares[n.flavor_id].memory_mib,
        )
        for n in nodes
        if tres[n.flavor_id]
    )
    projects = list(Project.objects.filter(active=True).select_related("department"))
    classes = list(PriorityClass.objects.all())
    return PortalState(
        departments=tuple(Department.objects.values_list("code", "parent__code")),
        projects=tuple((p.code, p.department.code) for p in projects),
        limits=limits,
        members=_members(),
        classes=tuple(
            ClassRef(
                c.name, c.value, c.preemptible, USAGE_ROLE_RANK.get(c.min_role, 0), max_wall_minutes(c),
                c.min_runtime_seconds,
            )
            for c in classes
        ),
        tres=frozenset(t for t in tres.values() if t) | machine_tres(shares.values()),
        notes=tuple(notes),
        shares=fair_shares(nodes, flavors, effective_limits_map(nodes, now)),
        blocked=over_budget(now),
        user_caps=tuple(
            (p.code, p.user_gpu_cap, p.user_running_jobs_cap)
            for p in projects
            if p.user_gpu_cap is not None or p.user_running_jobs_cap is not None
        ),
        preempt_exempt_seconds=borrow_min_runtime(classes),
    )


def fair_shares(nodes: list[QuotaNode], flavors: dict, effective: dict) -> tuple[tuple[str, str, int], ...]:
    """Each department's and project's Slurm ``Fairshare``: its effective quota in whole normalised
    cards (quota × card fraction × relative throughput), summed over its GPU flavors; at least 1
    (``quotas.queues.share_weight``, as the Kueue / Volcano / YuniKorn renderings).
    An admin's weight (``quotas.FairShareWeight``, DESIGN §16) replaces it where set, in whole
    shares too (Slurm's ``Fairshare`` is an integer)."""
    cards: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for n in nodes:
        flavor = flavors[n.flavor_id]
        if flavor.kind == FlavorKind.CPU:
            continue
        key = ("project", n.project.code) if n.project_id else ("department", n.department.code)
        per_unit = flavor.relative_throughput * flavor.fraction_numerator / flavor.fraction_denominator
        cards[key] += effective[n.pk].quota * per_unit
    for w in FairShareWeight.objects.select_related("department", "project"):
        key = ("project", w.project.code) if w.project_id else ("department", w.department.code)
        cards[key] = w.weight
    return tuple((kind, code, share_weight(total)) for (kind, code), total in sorted(cards.items()))


def borrow_min_runtime(classes: list[PriorityClass]) -> int:
    """The borrow QOS's minimum runtime before preemption: a borrowing native job runs in that one
    QOS whatever its class, so it gets the default class's (``training``, each association's
    DefaultQOS and the submit form's default) — 0 without such a class."""
    return next((c.min_runtime_seconds for c in classes if c.name == DEFAULT_CLASS), 0)


def max_wall_minutes(priority_class: PriorityClass) -> int | None:
    """The dev class — the one only dev jobs may use (``allowed_kinds`` = dev), or named ``dev``
    — gets the centre's longest dev runtime (``MAX_RUNTIME_HOURS["dev"]``; 0: none) as ``MaxWall``."""
    kinds = set(priority_class.allowed_kinds or ())
    if not (kinds == {"dev"} or (priority_class.name == "dev" and not kinds)):
        return None
    hours = settings.GPUPOOL["MAX_RUNTIME_HOURS"].get("dev") or 0
    return hours * 60 or None


def over_budget(now: datetime) -> frozenset[tuple[str, str]]:
    """(kind, code) of the departments and projects whose budget is spent (the scheduler's own
    providers, ``jobs.scheduling.config.over_budget_providers``: billing registers one)."""
    ids = {t for provider in over_budget_providers for t in provider(now)}
    if not ids:
        return frozenset()
    dept_ids = [int(t[1:]) for t in ids if t.startswith("d")]
    project_ids = [int(t[1:]) for t in ids if t.startswith("p")]
    return frozenset(
        [("department", c) for c in Department.objects.filter(pk__in=dept_ids).values_list("code", flat=True)]
        + [("project", c) for c in Project.objects.filter(pk__in=project_ids).values_list("code", flat=True)]
    )


def machine_tres(shares) -> frozenset[str]:
    """``cpu`` and ``mem`` are the sync's to limit once a flavor it limits has that figure (its
    per-unit share: the profile's, else its smallest node's); until then they stay the site's."""
    shares = list(shares)
    out = set()
    if any(s.cpu_millicores is not None for s in shares):
        out.add(CPU_TRES)
    if any(s.memory_mib is not None for s in shares):
        out.add(MEM_TRES)
    return frozenset(out)


def _members() -> tuple[Member, ...]:
    rows = Membership.objects.filter(
        role__in=PROJECT_ROLES, project__active=True, user__is_active=True
    ).select_related("user", "project")
    return tuple(
        Member(m.project.code, slurm_user_name(m.user), USAGE_ROLE_RANK.get(m.role, 0)) for m in rows
    )


# -- syncing


def _read(cluster: Cluster, client: Sacctmgr, now: datetime) -> tuple[str, SlurmState, SlurmState]:
    """The cluster's name in Slurm, the desired state, and the owned part of Slurm's current one."""
    name = client.cluster_name()
    snap = client.snapshot(name)
    desired = desired_state(portal_state(cluster, now), naming(), parse_tracked(snap.tres))
    return name, desired, parse_current(snap.associations, snap.qos, snap.users, naming(), desired.tres)


def sync_cluster_accounts(
    cluster: Cluster, *, now: datetime | None = None, dry_run: bool = False
) -> SlurmSyncRun:
    """One sync of one cluster, recorded. ``dry_run``: compute the commands, run none of them."""
    now = now or timezone.now()
    run = SlurmSyncRun(cluster=cluster, started_at=timezone.now(), dry_run=dry_run)
    try:
        with _cluster_lock(cluster, skip=dry_run):
            _sync(cluster, run, now)
    except BackendError as exc:
        log.warning("Slurm accounts of %s not synced: %s", cluster.name, exc)
        run.error = str(exc)
    run.finished_at = timezone.now()
    run.save()
    _prune(cluster)
    return run


def _sync(cluster: Cluster, run: SlurmSyncRun, now: datetime) -> None:
    client = client_for(cluster)
    name, desired, current = _read(cluster, client, now)
    run.notes = desired.notes
    todo = plan(desired, current, name, naming())
    run.commands = todo.commands
    run.drift = [c.to_json() for c in todo.changes]
    if run.dry_run:
        return
    if todo:
        _apply(cluster, client, run, name, desired, todo, now)
    # Every run, not only when the block changes: a preempted borrowing job comes back pending.
    _hold_spent(client, run, desired)


def _hold_spent(client: Sacctmgr, run: SlurmSyncRun, desired: SlurmState) -> None:
    """Hold what a spent budget's accounts had queued, release what the sync held once the budget
    allows (``quotas.slurm_accounts.budget_holds``); recorded among the run's commands. A job that
    started or ended between the listing and the command is noted, not an error of the run."""
    blocked = blocked_accounts(desired)
    # Only a held job of an account that is not blocked may be the sync's to release.
    pending = client.pending_jobs(naming().owns, lambda account: account not in blocked)
    hold, release = budget_holds(blocked, pending)
    spent = {j.job_id: blocked.get(j.account, j.account) for j in pending}  # whose budget holds it
    done = []
    for verb, job_id in [*(("hold", j) for j in hold), *(("release", j) for j in release)]:
        try:
            if verb == "hold":
                client.hold(job_id, hold_comment(spent[job_id]))
            else:
                client.release(job_id)
            done.append(f"scontrol {verb} {job_id}")
        except BackendError as exc:
            run.notes = [*run.notes, f"job {job_id}: {verb} failed: {exc}"]
    run.commands = [*run.commands, *done]


def _apply(cluster: Cluster, client: Sacctmgr, run: SlurmSyncRun, name: str, desired: SlurmState, todo,
           now: datetime) -> None:
    results = client.apply(todo.commands)
    # What sacctmgr printed says little per command: the state read back says what took.
    _name, _desired, after = _read(cluster, client, now)
    left = plan(desired, after, name, naming())
    if left:
        failed = [r.output for r in results if r.returncode != 0]
        run.error = (
            f"{len(left.commands)} change(s) did not take: {'; '.join(left.commands[:20])}\n"
            + "\n".join(failed)[-8000:]
        )


class _cluster_lock:
    """A session advisory lock per cluster: the beat run and a triggered run never interleave
    their commands (a dry run needs none)."""

    def __init__(self, cluster: Cluster, *, skip: bool):
        self.args = None if skip else [LOCK_KEY, cluster.pk]

    def __enter__(self):
        if self.args:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_lock(%s, %s)", self.args)

    def __exit__(self, *exc):
        if self.args:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s, %s)", self.args)


def _prune(cluster: Cluster) -> None:
    SlurmSyncRun.objects.filter(
        cluster=cluster, started_at__lt=timezone.now() - KEEP_QUIET_RUNS, drift=[], error=""
    ).delete()


def sync_all(*, now: datetime | None = None, dry_run: bool = False, names: list[str] | None = None):
    clusters = accounts_clusters()
    if names is not None:
        clusters = [c for c in clusters if c.name in names]
    return [sync_cluster_accounts(c, now=now, dry_run=dry_run) for c in clusters]


def dump(cluster: Cluster, *, now: datetime | None = None) -> str:
    """The desired state of one cluster as a ``sacctmgr load`` flat file."""
    name, desired, _current = _read(cluster, client_for(cluster), now or timezone.now())
    return flat_file(desired, name, naming())


# -- triggers


def _enqueue_slurm_accounts() -> None:
    send(TASK, expires=settings.GPUPOOL["SLURM_ACCOUNTS_INTERVAL_SECONDS"])


def request_sync(**_signal_kwargs) -> None:
    """After the current transaction commits, once however many rows it wrote — and only where
    a synced Slurm cluster exists (asked here, not at commit: a portal without one registers
    nothing on its commits)."""
    if any(entry[1] is _enqueue_slurm_accounts for entry in connection.run_on_commit):
        return
    if not accounts_clusters():
        return
    transaction.on_commit(_enqueue_slurm_accounts, robust=True)


def connect_signals() -> None:
    from django.apps import apps
    from django.db.models.signals import post_delete, post_save

    # billing sits above jobs: its model by name, not by import.
    budget = [apps.get_model("billing", "Budget")] if apps.is_installed("billing") else []
    # A budget topped up (or lowered) unblocks (or blocks) native submissions at once; usage that
    # spends a budget is seen by the beat run.
    models = (QuotaNode, Loan, QuotaWindow, Membership, PriorityClass, Department, Project, Flavor, *budget)
    for model in models:
        uid = f"slurm-accounts-{model.__name__}"
        post_save.connect(request_sync, sender=model, dispatch_uid=f"{uid}-save")
        post_delete.connect(request_sync, sender=model, dispatch_uid=f"{uid}-delete")
