"""The fair-share report, like Slurm's ``sshare`` (DESIGN §16): per node of the tree its shares (raw
and normalised among its siblings), its usage (raw: normalised card-hours over the last half-life,
undecayed; decayed: normalised card-seconds), its level fair share, and for projects their rank and
factor (``jobs.scheduler.fairshare``: the engine's own Fair Tree, so the report ranks projects in
the order the engine serves them). The page, the API and ``manage.py sshare`` read this one selector.

Who sees it: platform admins and auditors the whole tree, department admins their subtrees (through
the one visibility selector); anyone else is refused. Ranks and factors are always computed over the
whole tree — a subtree's view shows where its projects stand among everyone's.

The chart's history is recomputed from the event log at each day's ``now`` (the same runs, read
once, summed at the 30 instants: ``billing.fairshare.decayed_series``) with today's shares: weights
and quotas are not kept by date, so a share line is today's, not the one in force that day."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied

from jobs.quota_tree import tenant_tree
from jobs.scheduler.fairshare import Fair, fair_figures
from jobs.scheduling.settings import fair_share_settings
from portal.models import Department, Project, User
from portal.selectors import scope_for, visible_departments, visible_projects
from quotas.fair_weights import all_shares

from .fairshare import decayed_series, project_usage

CHART_DAYS = 30


@dataclass(frozen=True)
class Row:
    tree_id: str
    kind: str  # "department" | "project"
    pk: int
    code: str
    name: str
    depth: int
    parent: str | None
    weighted: bool  # shares are an admin's weight (else the quota in normalised cards)
    fair: Fair
    usage_card_hours: float  # normalised, undecayed, over the last half-life (subtree)

    @property
    def level_fs_text(self) -> str:
        return "inf" if self.fair.level_fs == float("inf") else f"{self.fair.level_fs:.3f}"


@dataclass(frozen=True)
class Report:
    now: datetime
    half_life_s: int
    rows: list[Row]


def require_report(user: User) -> None:
    scope = scope_for(user)
    if not (scope.sees_everything or scope.admin_departments):
        raise PermissionDenied


def _visible_ids(user: User) -> tuple[set[int], set[int]] | None:
    """(department ids, project ids) the user's report shows, or None for all of them."""
    scope = scope_for(user)
    if scope.sees_everything:
        return None
    depts = set(visible_departments(user).filter(pk__in=scope.admin_departments).values_list("pk", flat=True))
    projects = set(visible_projects(user).filter(department_id__in=depts).values_list("pk", flat=True))
    return depts, projects


def _tree():
    departments = list(Department.objects.values_list("pk", "parent_id", "code", "name"))
    projects = list(Project.objects.values_list("pk", "department_id", "code", "name"))
    return departments, projects, tenant_tree()


def fair_share_report(user: User | None, now: datetime) -> Report:
    """``user`` None: the operator's whole tree (``manage.py sshare``)."""
    if user is not None:
        require_report(user)
    half_life, _entry = fair_share_settings()
    departments, projects, nodes = _tree()
    parents = {n.id: n.parent_id for n in nodes}
    shares, weights = all_shares()
    usage = project_usage(now, half_life)
    fair = fair_figures(nodes, {f"p{pk}": u.decayed_card_seconds for pk, u in usage.items()}, shares)
    raw = fair_figures(nodes, {f"p{pk}": u.window_card_seconds for pk, u in usage.items()}, shares)
    labels = {f"d{pk}": ("department", pk, code, name) for pk, _up, code, name in departments}
    labels.update({f"p{pk}": ("project", pk, code, name) for pk, _d, code, name in projects})
    shown = None if user is None else _visible_ids(user)
    rows: list[Row] = []

    def walk(parent: str | None, depth: int) -> None:
        kids = sorted((k for k, up in parents.items() if up == parent), key=lambda k: (k[0], labels[k][2]))
        for k in kids:
            kind, pk, code, name = labels[k]
            if shown is None or pk in (shown[0] if kind == "department" else shown[1]):
                rows.append(Row(k, kind, pk, code, name, depth, parent, k in weights, fair[k],
                                raw[k].usage / 3600))
            walk(k, depth + 1)

    walk(None, 0)
    return Report(now, half_life, rows)


def share_history(user: User, now: datetime, days: int = CHART_DAYS) -> dict[str, list]:
    """Per shown department: its daily usage share among its siblings (decayed, at each day's
    ``now``) and its share of their shares today. {"days": [iso…], "series": [(code, [usage_norm…],
    shares_norm)]}."""
    require_report(user)
    half_life, _entry = fair_share_settings()
    departments, _projects, nodes = _tree()
    shares, _weights = all_shares()
    shown = _visible_ids(user)
    wanted = [(pk, code) for pk, _up, code, _name in departments if shown is None or pk in shown[0]]
    instants = [now - timedelta(days=d) for d in range(days - 1, -1, -1)]
    points: dict[int, list[float]] = {pk: [] for pk, _code in wanted}
    today = None
    series = decayed_series(instants, half_life)  # one statement for every day
    for at in instants:
        today = fair_figures(nodes, {f"p{pk}": u for pk, u in series[at].items()}, shares)
        for pk, _code in wanted:
            points[pk].append(today[f"d{pk}"].usage_norm)
    series = [(code, points[pk], today[f"d{pk}"].shares_norm if today else 0.0) for pk, code in sorted(
        wanted, key=lambda w: w[1])]
    return {"days": [at.date().isoformat() for at in instants], "series": series}
