"""Reads of resources and the quota tree, always through the tenancy scope."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Q, QuerySet, Sum

from portal.models import Project, User
from portal.selectors import department_ancestors, scope_for, visible_departments, visible_projects

from .effective import Limits, LoanSpan, Window, effective_limits
from .models import Loan, LoanState, Node, NodeState, QuotaNode, QuotaWindow

# DESIGN §14: a flavor's relative throughput measured from job history. Jobs live above quotas
# (portal ← quotas ← jobs), so ``jobs`` registers the function here in its ``ready()``; each takes
# flavor ids and returns {id: object with ratio, templates, runs}.
measured_throughput_providers: list = []


def measured_throughput(flavor_ids) -> dict:
    found: dict = {}
    for provider in measured_throughput_providers:
        found.update(provider(flavor_ids))
    return found


def healthy_capacity(flavor_id: int) -> Decimal:
    """GPUs of the flavor on ready nodes of active clusters: the pool root's capacity."""
    total = Node.objects.filter(flavor_id=flavor_id, state=NodeState.READY, cluster__active=True).aggregate(
        total=Sum("gpu_count")
    )["total"]
    return Decimal(total or 0)


def capacity_by_flavor() -> dict[int, Decimal]:
    rows = (
        Node.objects.filter(state=NodeState.READY, cluster__active=True)
        .values("flavor_id")
        .annotate(total=Sum("gpu_count"))
    )
    return {row["flavor_id"]: Decimal(row["total"]) for row in rows}


def node_sizes_by_cluster(flavor_id: int) -> dict[int, list[int]]:
    """GPU counts of the flavor's nodes per active cluster, whatever their state: a cordoned or
    down node comes back, so it bounds what a job could ever get (a node the backend no longer
    lists is marked down, not deleted; retiring hardware for good means deleting its node or
    deactivating its cluster)."""
    sizes: dict[int, list[int]] = defaultdict(list)
    rows = Node.objects.filter(flavor_id=flavor_id, cluster__active=True)
    for cluster_id, gpus in rows.values_list("cluster_id", "gpu_count"):
        sizes[cluster_id].append(gpus)
    return dict(sizes)


@dataclass(frozen=True, slots=True)
class Ceiling:
    """The most one quota node on a project's path lets its subtree hold at once, ever, as
    configured now: ``quota + borrow_limit + loans`` (DESIGN §3 rule 2's cap), where ``quota``
    is the nominal value (windows only lower it, loans out end) and ``loans`` the most that
    approved loans into the node add at any one instant from now on."""

    node: QuotaNode
    quota: Decimal
    borrow_limit: Decimal
    loans: Decimal

    @property
    def limit(self) -> Decimal:
        return self.quota + self.borrow_limit + self.loans


def path_quota_nodes(project: Project, flavor_id: int) -> list[QuotaNode]:
    """The flavor's quota nodes on the project's path, the project's first, then up the tree."""
    path = department_ancestors(project.department_id)
    nodes = QuotaNode.objects.filter(flavor_id=flavor_id).filter(
        Q(project_id=project.pk) | Q(department_id__in=path)
    ).select_related("department", "project")
    order = {("project", project.pk): -1} | {("department", d): i for i, d in enumerate(path)}
    return sorted(nodes, key=lambda n: order[_key(n)])


def path_ceilings(project: Project, flavor_id: int, at: datetime) -> list[Ceiling]:
    """The capped nodes (a borrow limit set) on the project's path, project first: a node
    without a borrow limit caps nothing below the pool's capacity."""
    capped = [n for n in path_quota_nodes(project, flavor_id) if n.borrow_limit is not None]
    loans = _peak_loans_in([n.pk for n in capped], at)
    return [Ceiling(n, n.quota, n.borrow_limit, loans.get(n.pk, Decimal(0))) for n in capped]


def _peak_loans_in(node_ids: list[int], at: datetime) -> dict[int, Decimal]:
    """Per borrower, the largest sum of approved loans in force at one instant at or after ``at``
    (loans are half-open: one ending when another starts never overlap)."""
    spans: dict[int, list[tuple[datetime, datetime, Decimal]]] = defaultdict(list)
    for loan in Loan.objects.filter(borrower_id__in=node_ids, state=LoanState.ACTIVE, ends_at__gt=at):
        spans[loan.borrower_id].append((max(loan.starts_at, at), loan.ends_at, loan.amount))
    peaks = {}
    for node_id, node_spans in spans.items():
        # The sum is largest at some loan's start: check each start.
        peaks[node_id] = max(
            sum((amount for start, end, amount in node_spans if start <= t < end), Decimal(0))
            for t, _end, _amount in node_spans
        )
    return peaks


def visible_quota_nodes(user: User) -> QuerySet[QuotaNode]:
    if scope_for(user).sees_everything:
        qs = QuotaNode.objects.all()
    else:
        qs = QuotaNode.objects.filter(
            Q(department_id__in=visible_departments(user).values("id"))
            | Q(project_id__in=visible_projects(user).values("id"))
        )
    return qs.select_related("flavor", "department", "project")


def default_flavor_id(user: User) -> int | None:
    """The flavor a page about quotas opens on when none is chosen (the quota tree, the reports'
    quota chart): the first active flavor, by name, in which the user's own projects or
    departments hold quota; else one in which a node the user sees holds quota; else None. A
    member of a project that holds only A100 quota is not shown an empty tree of MIG slices."""
    scope = scope_for(user)
    held = visible_quota_nodes(user).filter(flavor__active=True, quota__gt=0)
    own = held.filter(
        Q(project_id__in=scope.member_projects)
        | Q(department_id__in=scope.admin_departments | scope.finance_departments)
    )
    for nodes in (own, held):
        found = nodes.order_by("flavor__name").values_list("flavor_id", flat=True).first()
        if found is not None:
            return found
    return None


def visible_loans(user: User) -> QuerySet[Loan]:
    nodes = visible_quota_nodes(user).values("id")
    return Loan.objects.filter(Q(lender_id__in=nodes) | Q(borrower_id__in=nodes)).select_related(
        "lender__flavor",
        "lender__department",
        "lender__project",
        "borrower__department",
        "borrower__project",
    )


LIVE_LOANS = (LoanState.PENDING, LoanState.ACTIVE)


def lent_out(node_ids, starts_at: datetime | None, ends_at: datetime | None) -> dict[int, Decimal]:
    """Per lender node, an upper bound of what it has lent at once within [starts_at, ends_at):
    the sum of its live outgoing loans overlapping the interval (the whole future when
    unbounded). One query; the rule ``loan_create`` and ``loan_request_create`` check."""
    loans = Loan.objects.filter(lender_id__in=list(node_ids), state__in=LIVE_LOANS)
    if starts_at is not None:
        loans = loans.filter(starts_at__lt=ends_at, ends_at__gt=starts_at)
    return dict(loans.values("lender_id").annotate(total=Sum("amount")).values_list("lender_id", "total"))


@dataclass(frozen=True)
class Lender:
    """A department that can be asked for a loan of a flavor, and how much it can still lend in
    a period: its quota minus what it has lent then (``lent_out``)."""

    node: QuotaNode
    lendable: Decimal

    @property
    def department(self):
        return self.node.department


def loan_lenders_lendable(
    flavor_id: int, starts_at: datetime | None, ends_at: datetime | None
) -> list[Lender]:
    """The departments holding quota of the flavor that can still lend some of it in the period
    (issue 32 item 8: the loan form offers only these, each with its amount), by code. Two
    queries. The department directory is not tenant data; the amount is what the request's
    refusal would name anyway."""
    nodes = list(
        QuotaNode.objects.filter(flavor_id=flavor_id, department__isnull=False, quota__gt=0)
        .select_related("department", "flavor")
        .order_by("department__code")
    )
    lent = lent_out([n.pk for n in nodes], starts_at, ends_at)
    found = [Lender(n, n.quota - lent.get(n.pk, Decimal(0))) for n in nodes]
    return [lender for lender in found if lender.lendable > 0]


def visible_windows(user: User) -> QuerySet[QuotaWindow]:
    return QuotaWindow.objects.filter(quota_node_id__in=visible_quota_nodes(user).values("id"))


def site_zone() -> ZoneInfo:
    return ZoneInfo(settings.TIME_ZONE)


def effective_limits_map(nodes: list[QuotaNode], at: datetime) -> dict[int, Limits]:
    """Effective limits of each node at ``at``, with two queries for all windows and loans."""
    ids = [n.pk for n in nodes]
    windows: dict[int, list[Window]] = defaultdict(list)
    for w in QuotaWindow.objects.filter(quota_node_id__in=ids, active=True).order_by("id"):
        windows[w.quota_node_id].append(
            Window(frozenset(int(d) for d in w.weekdays), w.start_time, w.end_time, w.quota, w.lend_limit)
        )
    loans_out: dict[int, list[LoanSpan]] = defaultdict(list)
    loans_in: dict[int, list[LoanSpan]] = defaultdict(list)
    for loan in Loan.objects.filter(
        Q(lender_id__in=ids) | Q(borrower_id__in=ids),
        state=LoanState.ACTIVE,
        starts_at__lte=at,
        ends_at__gt=at,
    ):
        span = LoanSpan(loan.amount, loan.starts_at, loan.ends_at)
        loans_out[loan.lender_id].append(span)
        loans_in[loan.borrower_id].append(span)
    zone = site_zone()
    return {
        n.pk: effective_limits(
            Limits(n.quota, n.borrow_limit, n.lend_limit),
            at=at,
            zone=zone,
            windows=windows[n.pk],
            loans_out=loans_out[n.pk],
            loans_in=loans_in[n.pk],
        )
        for n in nodes
    }


@dataclass(frozen=True, slots=True)
class TreeRow:
    node: QuotaNode
    parent_key: tuple[str, int] | None
    key: tuple[str, int]
    depth: int
    effective: Limits

    @property
    def kind(self) -> str:
        return self.key[0]

    @property
    def owner_id(self) -> int:
        return self.key[1]


def quota_tree(user: User, flavor_id: int, at: datetime) -> list[TreeRow]:
    """The visible quota nodes of one flavor in tree order (parents before children)."""
    nodes = list(visible_quota_nodes(user).filter(flavor_id=flavor_id))
    limits = effective_limits_map(nodes, at)
    by_key = {_key(n): n for n in nodes}
    children: dict[tuple[str, int] | None, list[QuotaNode]] = defaultdict(list)
    for n in nodes:
        parent = _parent_key(n)
        children[parent if parent in by_key else None].append(n)
    rows: list[TreeRow] = []

    def walk(parent, depth):
        for n in sorted(children[parent], key=lambda n: (n.project_id is not None, str(n.owner))):
            rows.append(TreeRow(n, parent, _key(n), depth, limits[n.pk]))
            walk(_key(n), depth + 1)

    walk(None, 0)
    return rows


def _key(node: QuotaNode) -> tuple[str, int]:
    return ("project", node.project_id) if node.project_id else ("department", node.department_id)


def _parent_key(node: QuotaNode) -> tuple[str, int] | None:
    if node.project_id:
        return ("department", node.project.department_id)
    parent_id = node.department.parent_id
    return ("department", parent_id) if parent_id else None
