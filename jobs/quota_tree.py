"""Reads of the quota tree page (issue 24 item 6): every visible quota node of one or all flavors
with its usage split into in-quota, on-loan and lent (``quotas.lending``), and, for one node, the
projects that use its idle quota and their on-loan jobs.

Everything is computed from the usage aggregate the scheduler's snapshot counts (jobs holding
GPUs, summed in SQL per flavor, project and on-loan flag) and the whole department tree, so the
number of queries does not depend on the number of jobs. Attribution needs the whole tree, not
only the rows the viewer sees; what is shown is then cut to the viewer's scope (one selector).

Each row also shows the node's fair share (DESIGN §16): its shares (an admin's weight or its quota
in normalised cards), its decayed usage (the scheduling cycle's provider) and its factor
(``jobs.scheduler.fairshare``, the engine's own Fair Tree, so the page ranks as the engine serves;
a department shows its level fair share instead)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from jobs.models import Job
from jobs.scheduler.fairshare import Fair, fair_figures
from jobs.scheduling.config import fair_usage
from jobs.scheduling.settings import fair_share_settings
from jobs.selectors import (
    _external_by_node,
    _holding_usage,
    _usage_by_node,
    external_usage,
    quota_usage,
    visible_jobs,
)
from jobs.states import HOLDING
from portal.models import Department, Project, User
from portal.selectors import visible_projects
from quotas.admission import TreeNode
from quotas.fair_weights import all_shares
from quotas.lending import Lending, Level, attribute
from quotas.models import Flavor, QuotaNode
from quotas.selectors import capacity_by_flavor, effective_limits_map, visible_quota_nodes

ZERO = Decimal(0)
BORROWER_JOBS_SHOWN = 50

Key = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Cell:
    """One node in one flavor, now. ``on_loan`` is the on-loan usage inside the subtree;
    ``borrowed`` the part of it covered from outside the subtree; ``lent`` the node's idle quota
    used by borrowers outside it."""

    node: QuotaNode
    quota: Decimal
    in_quota: Decimal
    on_loan: Decimal
    borrowed: Decimal
    lent: Decimal
    external: Decimal
    lends_to: int  # borrowing projects that use its idle quota

    @property
    def used(self) -> Decimal:
        return self.in_quota + self.on_loan

    @property
    def over(self) -> bool:
        return self.used > self.quota

    @property
    def free(self) -> Decimal:
        return max(self.quota - self.used - self.lent, ZERO)

    def bar(self) -> dict:
        """Segment widths in percent of the larger of quota and what is drawn (SVG units)."""
        scale = max(self.quota, self.used + self.lent)
        if scale <= 0:
            return {"in_quota": 0, "on_loan": 0, "lent": 0, "quota_at": 100}

        def pct(value: Decimal) -> float:
            return round(float(value * 100 / scale), 2)

        in_quota, on_loan = pct(self.in_quota), pct(self.on_loan)
        return {"in_quota": in_quota, "on_loan": on_loan, "on_loan_x": round(in_quota + on_loan, 2),
                "lent": pct(self.lent), "lent_x": round(in_quota + on_loan, 2), "quota_at": pct(self.quota)}


@dataclass(frozen=True, slots=True)
class GridRow:
    key: Key
    parent_key: Key | None
    depth: int
    owner: object  # Department or Project
    cells: list  # Cell | None per flavor, in the order asked
    has_children: bool = False
    fair: FairCell | None = None

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def dom_id(self) -> str:
        return f"{self.key[0]}-{self.key[1]}"

    @property
    def parent_dom_id(self) -> str:
        return f"{self.parent_key[0]}-{self.parent_key[1]}" if self.parent_key else ""

    @property
    def over(self) -> bool:
        return any(c is not None and c.over for c in self.cells)


class _World:
    """The whole tree and the usage aggregate, read once per request (a fixed number of queries)."""

    def __init__(self, flavor_ids: list[int], at: datetime):
        self.parent_of = dict(Department.objects.values_list("id", "parent_id"))
        self.department_of = dict(Project.objects.values_list("id", "department_id"))
        self.nodes = list(QuotaNode.objects.filter(flavor_id__in=flavor_ids))
        self.limits = effective_limits_map(self.nodes, at)
        usage = _holding_usage() if len(flavor_ids) > 1 else _holding_usage(flavor_ids[0])
        self.by_project = {f: usage.get(f, {}) for f in flavor_ids}
        ext = external_usage() if len(flavor_ids) > 1 else external_usage(flavor_ids[0])
        self.external = {
            f: _external_by_node(ext.get(f, {}), self.parent_of, self.department_of) for f in flavor_ids
        }
        self._lending: dict[int, tuple[dict, Lending]] = {}

    def lending(self, flavor_id: int) -> tuple[dict[Key, list[Decimal]], Lending]:
        if flavor_id not in self._lending:
            by_project = self.by_project[flavor_id]
            usage = _usage_by_node(by_project, self.parent_of, self.department_of)
            limits = {_key(n): self.limits[n.pk] for n in self.nodes if n.flavor_id == flavor_id}
            levels = [
                _level(("department", d), ("department", p) if p else None, limits)
                for d, p in sorted(self.parent_of.items())
            ] + [
                _level(("project", p), ("department", d), limits)
                for p, d in sorted(self.department_of.items())
            ]
            on_loan = {("project", p): v[1] for p, v in sorted(by_project.items())}
            used = {key: v[0] + v[1] for key, v in usage.items()}
            self._lending[flavor_id] = (usage, attribute(levels, on_loan, used))
        return self._lending[flavor_id]

    def cell(self, node: QuotaNode) -> Cell:
        usage, lending = self.lending(node.flavor_id)
        key = _key(node)
        in_quota, on_loan = usage.get(key, (ZERO, ZERO))
        return Cell(
            node=node,
            quota=self.limits[node.pk].quota,
            in_quota=in_quota,
            on_loan=on_loan,
            borrowed=lending.borrowed.get(key, ZERO),
            lent=lending.lent.get(key, ZERO),
            external=self.external[node.flavor_id].get(key, ZERO),
            lends_to=sum(1 for v in lending.to.get(key, {}).values() if v > 0),
        )


@dataclass(frozen=True, slots=True)
class FairCell:
    figures: Fair
    weighted: bool  # the shares are an admin's weight (else the default)

    @property
    def level_fs_text(self) -> str:
        return "∞" if self.figures.level_fs == float("inf") else f"{self.figures.level_fs:.3f}"


def fair_cells(at: datetime) -> dict[Key, FairCell]:
    """Every node's fair-share figures (the whole tree: ranks are everyone's)."""
    half_life, _entry = fair_share_settings()
    shares, weights = all_shares()
    fair = fair_figures(tenant_tree(), fair_usage(at, half_life), shares)
    return {("project" if node[0] == "p" else "department", int(node[1:])): FairCell(f, node in weights)
            for node, f in fair.items()}


def tenant_tree() -> list[TreeNode]:
    """Every department and project as the engine's tree names them (``d<id>``, ``p<id>``)."""
    departments = Department.objects.values_list("pk", "parent_id")
    projects = Project.objects.values_list("pk", "department_id")
    return [TreeNode(f"d{pk}", f"d{up}" if up else None, "department") for pk, up in departments] + [
        TreeNode(f"p{pk}", f"d{dept}", "project") for pk, dept in projects]


def _level(key: Key, parent: Key | None, limits: dict) -> Level:
    found = limits.get(key)
    return Level(key, parent, found.quota, found.lend_limit) if found else Level(key, parent)


def _key(node: QuotaNode) -> Key:
    return ("project", node.project_id) if node.project_id else ("department", node.department_id)


def quota_grid(user: User, flavors: list[Flavor], at: datetime | None = None) -> dict:
    """Rows (visible tree nodes, parents first) × columns (``flavors``): a Cell where the node holds
    quota in the flavor, else None. Also the healthy capacity per flavor."""
    if not flavors:
        return {"rows": [], "capacity": {}}
    at = at or timezone.now()
    ids = [f.pk for f in flavors]
    visible = list(visible_quota_nodes(user).filter(flavor_id__in=ids))
    world = _World(ids, at)
    by_owner: dict[Key, dict[int, QuotaNode]] = {}
    owners: dict[Key, object] = {}
    for node in visible:
        by_owner.setdefault(_key(node), {})[node.flavor_id] = node
        owners[_key(node)] = node.owner
    parents = {key: _visible_parent(key, by_owner, world) for key in by_owner}
    fair = fair_cells(at)
    children: dict[Key | None, list[Key]] = {}
    for key, parent in parents.items():
        children.setdefault(parent, []).append(key)
    rows: list[GridRow] = []

    def walk(parent: Key | None, depth: int) -> None:
        for key in sorted(children.get(parent, []), key=lambda k: (k[0] == "project", str(owners[k]))):
            cells = [world.cell(by_owner[key][f]) if f in by_owner[key] else None for f in ids]
            rows.append(GridRow(key, parent, depth, owners[key], cells, bool(children.get(key)),
                                fair.get(key)))
            walk(key, depth + 1)

    walk(None, 0)
    capacity = capacity_by_flavor()
    return {"rows": rows, "capacity": {f.pk: capacity.get(f.pk, ZERO) for f in flavors}}


def _visible_parent(key: Key, shown: dict, world: _World) -> Key | None:
    """The nearest ancestor that is a row too (a member sees their path, not every level)."""
    department = world.department_of.get(key[1]) if key[0] == "project" else world.parent_of.get(key[1])
    seen = set()
    while department is not None and department not in seen:
        if ("department", department) in shown:
            return ("department", department)
        seen.add(department)
        department = world.parent_of.get(department)
    return None


def quota_borrowers(user: User, node_id: int) -> dict | None:
    """Who uses the idle quota of one visible quota node now: per borrowing project the amount and
    its on-loan jobs of the flavor. Projects the viewer may not see are counted, not named, and
    their jobs are not listed. None when the viewer does not see the node (the page answers 404)."""
    node = visible_quota_nodes(user).filter(pk=node_id).first()
    if node is None:
        return None
    flavor, key = node.flavor, _key(node)
    world = _World([flavor.pk], timezone.now())
    _usage, lending = world.lending(flavor.pk)
    shares = {p: v for p, v in lending.to.get(key, {}).items() if v > 0}
    project_ids = [p for _kind, p in shares]
    names = {p.pk: p for p in visible_projects(user).filter(pk__in=project_ids)}
    shown = [pk for pk in project_ids if pk in names]
    hidden = [pk for pk in project_ids if pk not in names]
    on_loan = Q(flavor=flavor, on_loan=True, state__in=list(HOLDING))
    jobs = list(
        visible_jobs(user).filter(on_loan, project_id__in=shown).order_by("project_id", "-started_at", "-id")[
            :BORROWER_JOBS_SHOWN
        ]
    )
    by_project: dict[int, list[Job]] = {}
    for job in jobs:
        by_project.setdefault(job.project_id, []).append(job)
    rows = sorted(
        (
            {"project": names[pk], "amount": shares[("project", pk)], "jobs": by_project.get(pk, [])}
            for pk in shown
        ),
        key=lambda r: (-r["amount"], r["project"].name),
    )
    hidden_jobs = Job.objects.filter(on_loan, project_id__in=hidden).count() if hidden else 0
    return {
        "node": node,
        "cell": world.cell(node),
        "rows": rows,
        "jobs_listed": len(jobs),
        "jobs_total": Job.objects.filter(on_loan, project_id__in=shown).count() if shown else 0,
        "hidden_projects": len(hidden),
        "hidden_amount": sum((shares[("project", pk)] for pk in hidden), ZERO),
        "hidden_jobs": hidden_jobs,
    }


def quota_usage_with_lending(user: User, flavor_id: int) -> list[dict]:
    """``selectors.quota_usage`` rows with this module's figures added (the quota-usage API):
    ``on_loan``, ``borrowed_from_outside``, ``lent_to_outside``, ``over_quota``, ``borrowers``."""
    rows = quota_usage(user, flavor_id)
    world = _World([flavor_id], timezone.now())
    for row in rows:
        cell = world.cell(row["row"].node)
        row.update(
            on_loan=cell.on_loan,
            borrowed_from_outside=cell.borrowed,
            lent_to_outside=cell.lent,
            over_quota=cell.over,
            borrowers=cell.lends_to,
        )
    return rows
