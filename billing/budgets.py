"""Monthly card-hour budgets (DESIGN §3.9): usage this month, the 80 % / 100 % alerts, and the
check that holds new submissions for approval once a budget is spent.

**Usage this month** is the ledger (everything metered below the meter's cursor) plus the
unmetered tail — the allocation of jobs after the cursor, up to now, cut by the meter's own
rules (``meter.unmetered_tail``). A department budget covers its whole subtree; a project
budget its project. Ledger rows count for the department they were metered in, the tail for
the project's department now (the two differ only for a project moved this very hour).

The metered part changes only when the meter writes, so it is cached under a key that names
the database, the month, the cursor and the highest ledger id: the ledger is append-only, so
that key can never describe two different sums. The tail is computed on every call (it only
reads the jobs that held GPUs since the cursor), for the projects the budgets asked about cover.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal, InvalidOperation

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.urls import reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import permissions as perm
from portal.models import Department, Membership, Project, Role, User
from portal.notifications import notify
from portal.selectors import (
    Scope,
    department_ancestors,
    department_children_map,
    scope_for,
    subtree_ids,
    visible_departments,
    visible_projects,
)
from portal.texts import Message, message
from quotas.selectors import site_zone

from .meter import tail_bound, unmetered_tail
from .models import BUDGET_HOURS, Budget, BudgetAlert
from .periods import month_bounds, month_label, month_of

THRESHOLDS = (80, 100)  # percent of the budget at which its owners are told
SECONDS_PER_HOUR = Decimal(3600)
MAX_BUDGET = Decimal(10) ** (BUDGET_HOURS["max_digits"] - BUDGET_HOURS["decimal_places"]) - Decimal("0.01")
CENT = Decimal("0.01")
MILLI = Decimal(1000)
MICRO = Decimal(1_000_000)
CACHE_SECONDS = 24 * 3600

Key = tuple[str, int]  # ("department", id) or ("project", id)


# --- usage this month -------------------------------------------------------------------------


_METERED = """
SELECT u.department_id, u.project_id, sum(u.card_seconds)
FROM billing_usagerecord u
WHERE u.month = %(month)s AND u.hour_start < %(cursor)s
GROUP BY u.department_id, u.project_id
"""
_LEDGER_MARK = (
    "SELECT (SELECT oid FROM pg_database WHERE datname = current_database()),"
    " (SELECT max(id) FROM billing_usagerecord)"
)


def _metered(month: date, cursor: datetime | None) -> list[tuple[int, int, Decimal]]:
    """(department, project, card-seconds) of the month's ledger rows below ``cursor`` — rows a
    run still in progress wrote beyond it are left to the tail, so nothing counts twice."""
    if cursor is None:
        return []
    with connection.cursor() as db:
        db.execute(_LEDGER_MARK)
        database, last = db.fetchone()
        if last is None:
            return []
        key = f"billing:budget-metered:{database}:{month.isoformat()}:{cursor.timestamp()}:{last}"
        found = cache.get(key)
        if found is None:
            db.execute(_METERED, {"month": month, "cursor": cursor})
            found = [(dept, project, str(seconds)) for dept, project, seconds in db.fetchall()]
            cache.set(key, found, CACHE_SECONDS)
    return [(dept, project, Decimal(seconds)) for dept, project, seconds in found]


def _tail(
    month: date, now: datetime, projects: Collection[int] | None = None, *, upper: bool = False,
    since: datetime | None = None,
) -> tuple[datetime | None, list[tuple[int, int, Decimal]]]:
    start, end = month_bounds(month, site_zone())
    start = start if since is None else max(start, since)
    if upper:
        bound = tail_bound(until=min(now, end), not_before=start, projects=projects)
        return bound.cursor, [(dept, project, cards * bound.seconds) for dept, project, cards in bound.cards]
    tail = unmetered_tail(until=min(now, end), not_before=start, projects=projects)
    if not tail.segments:
        return tail.cursor, []
    jobs = {pk: rest for pk, *rest in _job_shapes({s[0] for s in tail.segments})}
    rows = []
    for job_id, start_us, end_us, _on_loan, workers in tail.segments:
        project, dept, per_worker, milli, numerator, denominator = jobs[job_id]
        # Exact: integers and the numerator first, the denominator and the units divided last.
        top = Decimal(workers * per_worker * numerator * (milli or 1000)) * Decimal(end_us - start_us)
        rows.append((dept, project, top / (denominator * MILLI * MICRO)))
    return tail.cursor, rows


def _job_shapes(job_ids: set[int]) -> list[tuple]:
    with connection.cursor() as db:
        db.execute(
            "SELECT j.id, j.project_id, p.department_id, j.gpus_per_worker, j.gpu_milli,"
            " f.fraction_numerator, f.fraction_denominator"
            " FROM jobs_job j JOIN portal_project p ON p.id = j.project_id"
            " JOIN quotas_flavor f ON f.id = j.flavor_id WHERE j.id = ANY(%s)",
            [sorted(job_ids)],
        )
        return db.fetchall()


def month_usage(
    month: date, now: datetime | None = None, *, keys: Collection[Key] | None = None, upper: bool = False
) -> dict[Key, Decimal]:
    """Card-hours of ``month`` up to ``now`` per project and per department (its whole subtree).
    With ``keys``, the figures of those keys only, and only the tail of the projects they cover
    is computed: a submission checks two or three budgets, and the whole tail reads the events
    of every running job (~0.2 s per check at 10,000 running, twice per held submission).
    ``upper``: an upper bound instead, from ``meter.tail_bound`` (no events read)."""
    now = now or timezone.now()
    cursor, tail = _tail(month, now, None if keys is None else _covered_projects(keys), upper=upper)
    return _by_key(_metered(month, cursor) + tail, keys)


def _growth_bound(month: date, since: datetime, now: datetime, keys: Collection[Key]) -> dict[Key, Decimal]:
    """At most how many card-hours ``keys`` can have gained in [since, now)."""
    return _by_key(_tail(month, now, _covered_projects(keys), upper=True, since=since)[1], keys)


def _by_key(rows: list[tuple[int, int, Decimal]], keys: Collection[Key] | None) -> dict[Key, Decimal]:
    """(department, project, card-seconds) rows summed per project and per department up the tree."""
    seconds: dict[Key, Decimal] = defaultdict(Decimal)
    parents = dict(Department.objects.values_list("id", "parent_id"))
    for dept, project, amount in rows:
        seconds[("project", project)] += amount
        node, seen = dept, set()
        while node is not None and node not in seen:
            seen.add(node)
            seconds[("department", node)] += amount
            node = parents.get(node)
    wanted = None if keys is None else set(keys)
    return {
        key: value / SECONDS_PER_HOUR for key, value in seconds.items() if wanted is None or key in wanted
    }


def _covered_projects(keys: Collection[Key]) -> set[int]:
    """The projects whose usage adds up to ``keys``' figures: a project's own, and every project
    in a department's subtree."""
    roots = [pk for kind, pk in keys if kind == "department"]
    projects = {pk for kind, pk in keys if kind == "project"}
    if roots:
        departments = subtree_ids(roots, department_children_map())
        projects |= set(Project.objects.filter(department_id__in=departments).values_list("id", flat=True))
    return projects


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    month: date
    used: Decimal  # card-hours

    @property
    def percent(self) -> int:
        """Whole percent, rounded down: "100 %" means the budget is really spent."""
        return int(self.used * 100 / self.budget.card_hours)

    @property
    def over(self) -> bool:
        return self.used >= self.budget.card_hours

    @property
    def remaining(self) -> Decimal:
        return max(self.budget.card_hours - self.used, Decimal(0))


def budget_statuses(budgets, *, now: datetime | None = None, upper: bool = False) -> dict[int, BudgetStatus]:
    """This month's usage of each budget, with one usage computation for all of them (with
    ``upper``, a bound of it: see ``month_usage``)."""
    budgets = list(budgets)
    if not budgets:
        return {}
    now = now or timezone.now()
    month = month_of(now, site_zone())
    usage = month_usage(month, now, keys=[b.key for b in budgets], upper=upper)
    return {b.pk: BudgetStatus(b, month, usage.get(b.key, Decimal(0))) for b in budgets}


# --- reads and permissions ----------------------------------------------------------------------


def visible_budgets(user: User) -> QuerySet[Budget]:
    """Budgets of the departments and projects the user sees (the one visibility selector)."""
    qs = Budget.objects.select_related("department", "project__department", "updated_by")
    if scope_for(user).sees_everything:
        return qs
    return qs.filter(
        Q(department_id__in=visible_departments(user).values("id"))
        | Q(project_id__in=visible_projects(user).values("id"))
    )


def can_set_budget(
    scope: Scope, *, department: Department | None = None, project: Project | None = None
) -> bool:
    """Department admins and finance of the department (or of one above it), platform admins.
    A project's budget belongs to its department's admins and finance."""
    target = department.pk if department is not None else project.department_id if project else None
    return scope.platform_admin or (target is not None and target in scope.department_ids)


def budget_departments(user: User) -> QuerySet[Department]:
    scope = scope_for(user)
    qs = Department.objects.order_by("code")
    return qs if scope.platform_admin else qs.filter(pk__in=scope.department_ids)


def budget_projects(user: User) -> QuerySet[Project]:
    scope = scope_for(user)
    qs = Project.objects.select_related("department").order_by("code")
    return qs if scope.platform_admin else qs.filter(department_id__in=scope.department_ids)


# --- writes -----------------------------------------------------------------------------------


def _card_hours(value) -> Decimal:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        raise ValidationError({"card_hours": [_("Give the budget in card-hours, e.g. 2000.")]}) from None
    if not amount.is_finite() or amount <= 0:
        raise ValidationError({"card_hours": [_("A budget is more than zero card-hours.")]})
    if amount > MAX_BUDGET:
        raise ValidationError(
            {"card_hours": [_("A budget is at most %(max)s card-hours.") % {"max": MAX_BUDGET}]}
        )
    if amount != amount.quantize(CENT):
        raise ValidationError({"card_hours": [_("Use at most two decimals.")]})
    return amount.quantize(CENT)


def budget_set(
    *, actor: User | None, card_hours, department: Department | None = None, project: Project | None = None
) -> Budget:
    """Create or change the monthly budget of a department or a project (one each). ``actor``
    None is the system (demo seeding)."""
    if (department is None) == (project is None):
        raise ValidationError({"department": [_("Give either a department or a project.")]})
    if actor is not None:
        perm.require(can_set_budget(scope_for(actor), department=department, project=project))
    amount = _card_hours(card_hours)
    owner = {"department": department} if department is not None else {"project": project}
    budget, _created = Budget.objects.update_or_create(
        **owner, defaults={"card_hours": amount, "updated_by": actor}
    )
    return budget


def budget_delete(*, actor: User, budget: Budget) -> None:
    perm.require(can_set_budget(scope_for(actor), department=budget.department, project=budget.project))
    budget.delete()


# --- the approval check (jobs.approvals.budget_checks) -----------------------------------------


def _number(value: Decimal) -> str:
    return f"{value.quantize(CENT).normalize():,f}"


def over_budget_reason(status: BudgetStatus) -> Message:
    """Stored with the held job's approval request: a message, rendered for each reader."""
    return message(
        gettext_noop("over budget: %(pct)s %% of %(limit)s card-hours in %(month)s (%(owner)s)"),
        pct=status.percent,
        limit=_number(status.budget.card_hours),
        month=month_label(status.month),
        owner=status.budget.owner.name,
    )


def budget_reason(project: Project, cards: Decimal) -> Message | None:
    """Registered in ``jobs.approvals.budget_checks``: the reason a new job of ``project`` needs
    approval when the project's budget or one of its departments' budgets (nearest first) is
    spent this month; None when none is. ``cards`` does not matter: at 100 % every new job asks."""
    if project is None or project.pk is None:
        return None
    path = department_ancestors(project.department_id)
    budgets = list(
        Budget.objects.filter(Q(project_id=project.pk) | Q(department_id__in=path)).select_related(
            "department", "project"
        )
    )
    if not budgets:
        return None
    rank = {("project", project.pk): -1, **{("department", d): i for i, d in enumerate(path)}}
    statuses = _decisive_statuses(budgets, timezone.now())
    for budget in sorted(budgets, key=lambda b: rank.get(b.key, len(path))):
        if statuses[budget.pk].over:
            return over_budget_reason(statuses[budget.pk])
    return None


def over_budget_tenants(now: datetime) -> list[str]:
    """Registered in ``jobs.snapshot.over_budget_providers``: the tree ids (``d<id>``, ``p<id>``)
    of the departments and projects whose budget is spent this month. The scheduler holds their
    queued jobs that nobody approved and sends them to approval (DESIGN §3.9).

    Read every scheduling cycle, so it must be cheap: no budget is one query; otherwise the
    bounds of ``_decisive_statuses`` decide most cycles without reading events."""
    budgets = list(Budget.objects.select_related("department", "project"))
    if not budgets:
        return []
    statuses = _decisive_statuses(budgets, now)
    return sorted(
        f"d{b.department_id}" if b.department_id else f"p{b.project_id}"
        for b in budgets
        if statuses[b.pk].over
    )


RECENT_SECONDS = 60  # an exact usage this young still decides a submission, with a bound


def _decisive_statuses(budgets: list[Budget], now: datetime) -> dict[int, BudgetStatus]:
    """Statuses whose ``over`` is exact, computed cheaply where possible (the exact tail was
    ~115–200 ms of a submission with 100,000 jobs in the database):

    1. usage only grows, so an exact figure computed in the last ``RECENT_SECONDS`` is a lower
       bound now, and that figure plus the bound of what the jobs can have added since is an
       upper one: a budget already spent then, or still short of its limit by more than that,
       is decided — its figure (in the reason a held job shows) is the one at most a minute old;
    2. without such a figure, an upper bound that reads no events (``meter.tail_bound``): far
       from every limit, done;
    3. otherwise the exact usage, remembered for the next submissions.

    Each way reads one bound at most: the recent figure's bound spans seconds, so it decides
    where the bound since the meter's cursor (up to an hour) would too, and more often.
    """
    month = month_of(now, site_zone())
    keys = sorted({b.key for b in budgets})
    cache_key = _recent_key(month, keys)
    recent = cache.get(cache_key)
    if recent is not None and now - datetime.fromisoformat(recent["at"]) < timedelta(seconds=RECENT_SECONDS):
        then = {tuple(key): Decimal(value) for key, value in recent["usage"]}
        grown = _growth_bound(month, datetime.fromisoformat(recent["at"]), now, keys)
        if all(then.get(b.key, 0) >= b.card_hours or then.get(b.key, 0) + grown.get(b.key, 0) < b.card_hours
               for b in budgets):
            return {b.pk: BudgetStatus(b, month, then.get(b.key, Decimal(0))) for b in budgets}
    else:
        upper = budget_statuses(budgets, now=now, upper=True)
        if not any(s.over for s in upper.values()):
            return upper
    usage = month_usage(month, now, keys=keys)
    cache.set(cache_key, {"at": now.isoformat(), "usage": [[list(k), str(v)] for k, v in usage.items()]},
              RECENT_SECONDS)
    return {b.pk: BudgetStatus(b, month, usage.get(b.key, Decimal(0))) for b in budgets}


def _recent_key(month: date, keys: list[Key]) -> str:
    """Names the database and the meter's cursor too: a meter run (or another database behind the
    same cache) never reuses a figure."""
    with connection.cursor() as db:
        db.execute("SELECT (SELECT oid FROM pg_database WHERE datname = current_database()),"
                   " (SELECT metered_through FROM billing_meterstate WHERE id = 1)")
        database, cursor = db.fetchone()
    names = ",".join(f"{kind[0]}{pk}" for kind, pk in keys)
    # The scheduler's hold asks for every budget at once: a digest keeps the key short.
    names = hashlib.sha256(names.encode()).hexdigest()[:32] if len(names) > 64 else names
    return f"billing:budget-recent:{database}:{month.isoformat()}:{cursor and cursor.timestamp()}:{names}"


# --- alerts -------------------------------------------------------------------------------------


def budget_recipients(budget: Budget) -> list[User]:
    """The department admins and the finance of the budget's department — for each role the
    nearest department up the tree that has someone in it — plus, for a project budget, the
    project's admins."""
    department_id = budget.department_id or budget.project.department_id
    path = department_ancestors(department_id)
    holders: dict[tuple[str, int], set[int]] = defaultdict(set)
    for role, dept, user in Membership.objects.filter(
        role__in=[Role.DEPARTMENT_ADMIN, Role.FINANCE], department_id__in=path, user__is_active=True
    ).values_list("role", "department_id", "user_id"):
        holders[(role, dept)].add(user)
    chosen: set[int] = set()
    for role in (Role.DEPARTMENT_ADMIN, Role.FINANCE):
        found = next((holders[(role, d)] for d in path if holders.get((role, d))), set())
        chosen |= found
    if budget.project_id:
        chosen |= set(
            Membership.objects.filter(role=Role.PROJECT_ADMIN, project_id=budget.project_id).values_list(
                "user_id", flat=True
            )
        )
    return list(User.objects.filter(pk__in=chosen, is_active=True).order_by("id"))


def _notice(status: BudgetStatus, threshold: int) -> Message:
    values = {
        "owner": status.budget.owner.name,
        "pct": status.percent,
        "limit": _number(status.budget.card_hours),
        "month": month_label(status.month),
    }
    if threshold >= 100:
        return message(
            gettext_noop(
                "Budget spent: %(owner)s has used %(pct)s %% of its %(limit)s card-hours in %(month)s. "
                "New jobs now need approval."
            ),
            **values,
        )
    return message(
        gettext_noop(
            "Budget warning: %(owner)s has used %(pct)s %% of its %(limit)s card-hours in %(month)s."
        ),
        **values,
    )


def _alert(status: BudgetStatus, crossed: list[int], now: datetime) -> list[BudgetAlert]:
    """Record the crossed thresholds; notify once, for the highest new one. The row and its
    notification (the outbox of its mail) commit together; a row that already exists — an
    earlier run, or a concurrent one that won the insert — notifies nobody."""
    with transaction.atomic():
        new = []
        for threshold in crossed:
            alert, made = BudgetAlert.objects.get_or_create(
                budget=status.budget,
                month=status.month,
                threshold=threshold,
                defaults={
                    "used_card_hours": status.used.quantize(CENT),
                    "budget_card_hours": status.budget.card_hours,
                    "created_at": now,
                },
            )
            if made:
                new.append(alert)
        if new:
            # A message: each recipient reads it in their own language (portal/texts.py).
            text = _notice(status, max(a.threshold for a in new))
            notify(
                recipients=budget_recipients(status.budget), text=text, link=reverse("billing-budgets"),
                topic="budget", project=status.budget.project,
            )
    return new


def budget_alerts_run(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Check every budget against this month's usage and alert at 80 % and 100 %, once per
    threshold per month. Safe to run any number of times, also concurrently."""
    now = now or timezone.now()
    budgets = Budget.objects.select_related("department", "project__department")
    created: list[BudgetAlert] = []
    for status in budget_statuses(budgets, now=now).values():
        crossed = [t for t in THRESHOLDS if status.used * 100 >= status.budget.card_hours * t]
        if crossed:
            created += _alert(status, crossed, now)
    return created


# --- next to an approval request (portal.approvals.context_providers) --------------------------


def budget_context(requests, now: datetime) -> dict[int, dict]:
    """Registered in ``portal.approvals.context_providers``: the budget left this month of each
    request's project and of its department (the request's own; a department's budget covers
    its subtree), each only when one is set. One budget query and one usage computation for
    the whole page of requests."""
    projects = {r.project_id for r in requests if r.project_id is not None}
    departments = {r.department_id for r in requests if r.department_id is not None}
    budgets = list(
        Budget.objects.filter(Q(project_id__in=projects) | Q(department_id__in=departments)).select_related(
            "department", "project"
        )
    )
    statuses = budget_statuses(budgets, now=now)
    by_key = {b.key: statuses[b.pk] for b in budgets}
    out = {}
    for request in requests:
        keys = [("project", request.project_id), ("department", request.department_id)]
        rows = []
        for kind, pk in keys:
            status = by_key.get((kind, pk)) if pk is not None else None
            if status is None:
                continue
            rows.append(
                {
                    "of": kind,
                    "owner": status.budget.owner.name,
                    "month": status.month.strftime("%Y-%m"),
                    "card_hours": status.budget.card_hours,
                    "used": status.used.quantize(CENT),
                    "remaining": status.remaining.quantize(CENT),
                    "percent": status.percent,
                }
            )
        out[request.pk] = {"budgets": rows}
    return out
