"""Monthly budgets in card-hours and/or money (DESIGN §3.9): usage this month, the burn-down
forecast, the 80 % / 100 % alerts (and the forecast alert), and the check that holds new
submissions for approval once a budget is spent.

**Usage this month** is the ledger (everything metered below the meter's cursor) plus the
unmetered tail — the allocation of jobs after the cursor, up to now, cut by the meter's own
rules (``meter.unmetered_tail``). A department budget covers its whole subtree; a project
budget its project. Ledger rows count for the department they were metered in, the tail for
the project's department now (the two differ only for a project moved this very hour).

The metered part changes only when the meter writes, so it is cached under a key that names
the database, the month, the cursor and the highest ledger id: the ledger is append-only, so
that key can never describe two different sums. The tail is computed on every call (it only
reads the jobs that held GPUs since the cursor), for the projects the budgets asked about cover.

**Money used this month** is the same ledger priced exactly as the month's statement prices it
(``billing.lines`` / ``billing.pricing``: the rates in force, per tier, per normalised card-hour
where the centre says so, each statement line rounded once, lines summed) plus the unmetered
tail priced at the *standard* rate of its flavor in force now (on-loan or not: the tail is an
estimate until the meter splits it), summed exactly and rounded once per budget. Only usage
lines count — reserved-quota fees, lender credits, corrections of closed months and manual
adjustments are not consumption of this month. The priced ledger is kept per (department,
project, day) — each line's amount as it grew day by day, so the days add up to the statement's
lines — and cached like the card-hours, under a key that also names the rates (never edited,
only added) and the normalised-pricing setting. The days feed the burn-down chart and the
forecast (``billing.forecast``).
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
from quotas.models import Flavor
from quotas.selectors import site_zone

from . import forecast as burn
from . import lines, pricing
from .meter import tail_bound, unmetered_tail
from .models import BUDGET_AMOUNT_MAX, BUDGET_HOURS, AlertUnit, Budget, BudgetAlert, default_currency
from .periods import HOUR, month_bounds, month_label, month_of

THRESHOLDS = (80, 100)  # percent of the budget at which its owners are told
FORECAST_MIN_WINDOW = timedelta(days=1)  # the forecast alert needs a rate from at least this long
SECONDS_PER_HOUR = Decimal(3600)
MAX_BUDGET = Decimal(10) ** (BUDGET_HOURS["max_digits"] - BUDGET_HOURS["decimal_places"]) - Decimal("0.01")
CENT = Decimal("0.01")
MILLI = Decimal(1000)
MICRO = Decimal(1_000_000)
CACHE_SECONDS = 24 * 3600

Key = tuple[str, int]  # ("department", id) or ("project", id)
ZERO_MONEY = Decimal("0.00")


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
) -> tuple[datetime | None, list[tuple[int, int, Decimal]]]:
    cursor, rows = _tail_rows(month, now, projects, upper=upper)
    return cursor, [(dept, project, seconds) for dept, project, _f, seconds, _t in rows]


def _tail_rows(
    month: date, now: datetime, projects: Collection[int] | None = None, *, upper: bool = False,
    since: datetime | None = None,
) -> tuple[datetime | None, list[tuple]]:
    """(department, project, flavor, card-seconds, relative throughput) of the unmetered tail;
    with ``upper``, a bound of it per (department, project), flavor and throughput None."""
    start, end = month_bounds(month, site_zone())
    start = start if since is None else max(start, since)
    if upper:
        bound = tail_bound(until=min(now, end), not_before=start, projects=projects)
        return bound.cursor, [
            (dept, project, None, cards * bound.seconds, None) for dept, project, cards in bound.cards
        ]
    tail = unmetered_tail(until=min(now, end), not_before=start, projects=projects)
    if not tail.segments:
        return tail.cursor, []
    jobs = {pk: rest for pk, *rest in _job_shapes({s[0] for s in tail.segments})}
    rows = []
    for job_id, start_us, end_us, _on_loan, workers in tail.segments:
        project, dept, per_worker, milli, numerator, denominator, flavor, throughput = jobs[job_id]
        # Exact: integers and the numerator first, the denominator and the units divided last.
        top = Decimal(workers * per_worker * numerator * (milli or 1000)) * Decimal(end_us - start_us)
        rows.append((dept, project, flavor, top / (denominator * MILLI * MICRO), throughput))
    return tail.cursor, rows


def _job_shapes(job_ids: set[int]) -> list[tuple]:
    with connection.cursor() as db:
        db.execute(
            "SELECT j.id, j.project_id, p.department_id, j.gpus_per_worker, j.gpu_milli,"
            " f.fraction_numerator, f.fraction_denominator, j.flavor_id, f.relative_throughput"
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
    parents = _parents()  # one read of the tree for the whole computation
    cursor, tail = _tail(month, now, None if keys is None else _covered_projects(keys, parents), upper=upper)
    return _by_key(_metered(month, cursor) + tail, keys, parents)


def _by_key(
    rows: list[tuple[int, int, Decimal]], keys: Collection[Key] | None, parents: dict[int, int | None]
) -> dict[Key, Decimal]:
    """(department, project, card-seconds) rows summed per project and per department up the tree."""
    return {key: value / SECONDS_PER_HOUR for key, value in _summed(rows, keys, parents).items()}


def _summed(
    rows: list[tuple[int, int, Decimal]], keys: Collection[Key] | None, parents: dict[int, int | None]
) -> dict[Key, Decimal]:
    """(department, project, value) rows summed per project and per department up the tree."""
    found: dict[Key, Decimal] = defaultdict(Decimal)
    owners = _owners(parents)
    wanted = None if keys is None else set(keys)
    for dept, project, amount in rows:
        for key in owners(dept, project):
            if wanted is None or key in wanted:
                found[key] += amount
    return dict(found)


def _parents() -> dict[int, int | None]:
    """Each department's parent (read once per computation and passed on: ``parents`` below)."""
    return dict(Department.objects.values_list("id", "parent_id"))


def _owners(parents: dict[int, int | None]):
    """(department, project) → the keys its usage counts for: the project and every department
    from the given one up to the root."""

    def owners(dept: int, project: int) -> list[Key]:
        found, node, seen = [("project", project)], dept, set()
        while node is not None and node not in seen:
            seen.add(node)
            found.append(("department", node))
            node = parents.get(node)
        return found

    return owners


def _covered_projects(keys: Collection[Key], parents: dict[int, int | None]) -> set[int]:
    """The projects whose usage adds up to ``keys``' figures: a project's own, and every project
    in a department's subtree."""
    roots = [pk for kind, pk in keys if kind == "department"]
    projects = {pk for kind, pk in keys if kind == "project"}
    if roots:
        departments = subtree_ids(roots, department_children_map(parents.items()))
        projects |= set(Project.objects.filter(department_id__in=departments).values_list("id", flat=True))
    return projects


# --- money this month ---------------------------------------------------------------------------

_LEDGER_DAYS = """
SELECT u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier,
       (u.hour_start AT TIME ZONE %(zone)s)::date AS day,
       min(u.hour_start), max(u.hour_start), sum(u.card_seconds), sum(u.card_seconds * u.relative_throughput),
       sum(u.extra_core_seconds), sum(u.extra_mib_seconds)
FROM billing_usagerecord u
WHERE u.month = %(month)s AND u.hour_start < %(cursor)s
GROUP BY u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, day,
         width_bucket(u.hour_start, %(thresholds)s::timestamptz[])
"""
_RATES_MARK = "SELECT count(*), max(id) FROM billing_rate"

DayRow = tuple[int, int, date, Decimal, Decimal]  # department, project, day, card-seconds, money


def _ledger_days(month: date, cursor: datetime | None) -> list[DayRow]:
    """The month's ledger below ``cursor`` per (department, project, local day): card-seconds and
    money. The money of a day is what it added to the statement lines' rounded amounts: each
    line (the statement's key and rate period) is priced on its card-seconds up to the end of
    each day, rounded by the one rule, and the day gets the difference — so the days of a line add
    up to the statement's amount for it, and a figure up to any day is that day's statement."""
    if cursor is None:
        return []
    normalised = lines.prices_normalised()
    with connection.cursor() as db:
        db.execute(_LEDGER_MARK)
        database, last = db.fetchone()
        if last is None:
            return []
        db.execute(_RATES_MARK)
        rates = db.fetchone()
        key = (
            f"billing:budget-money:{database}:{month.isoformat()}:{cursor.timestamp()}:{last}"
            f":{rates[0]}-{rates[1]}:{int(normalised)}"
        )
        found = cache.get(key)
        if found is None:
            found = _price_days(month, cursor, normalised)
            cache.set(key, found, CACHE_SECONDS)
    return [(d, p, date.fromisoformat(day), Decimal(s), Decimal(m)) for d, p, day, s, m in found]


def _price_days(month: date, cursor: datetime, normalised: bool) -> list[tuple]:
    schedules = lines.rate_schedules()
    zone = site_zone()
    with connection.cursor() as db:
        db.execute(
            _LEDGER_DAYS,
            {"zone": zone.key, "month": month, "cursor": cursor, "thresholds": lines._thresholds(schedules)},
        )
        rows = db.fetchall()
    usages = []
    for dept, project, user, flavor, tier, day, first, last, seconds, normal, cores, mib in rows:
        usages.append(pricing.Usage(((dept, project, user, flavor, tier), day), (flavor, tier), first,
                                    last + HOUR, seconds, normal))
        # CPU / memory beyond the share, where a rate of theirs exists: the statement's lines.
        for resource, extra in ((pricing.CORE, cores), (pricing.GIB, mib)):
            schedule = lines.schedule_of(flavor, tier, resource)
            if extra and schedule in schedules:
                usages.append(pricing.Usage(((dept, project, user, flavor, tier, resource), day), schedule,
                                            first, last + HOUR, Decimal(0), None, resource, extra))
    by_line: dict[tuple, list[tuple[date, Decimal, Decimal]]] = defaultdict(list)
    for line in pricing.price(usages, schedules, normalised=normalised):
        line_key, day = line.key
        by_line[(line_key, line.period, line.resource)].append((day, line.priced_seconds, line.card_seconds))
    days: dict[tuple[int, int, date], list[Decimal]] = defaultdict(lambda: [Decimal(0), ZERO_MONEY])
    for (line_key, period, resource), found in by_line.items():
        priced, before = Decimal(0), ZERO_MONEY
        for day, priced_seconds, card_seconds in sorted(found, key=lambda f: f[0]):
            priced += priced_seconds
            amount = ZERO_MONEY if period is None else pricing.priced(priced, period.price, resource)
            entry = days[(line_key[0], line_key[1], day)]
            entry[0] += card_seconds
            entry[1] += amount - before
            before = amount
    return [(d, p, day.isoformat(), str(s), str(m)) for (d, p, day), (s, m) in days.items()]


def _tail_prices(now: datetime) -> tuple[dict[int, Decimal], Decimal]:
    """Per flavor, what a card-second of the tail costs — the standard rate in force ``now`` per
    hour, × the flavor's relative throughput where the centre prices normalised card-hours —
    and the highest of them (the bound's price). A flavor without a standard rate is unpriced,
    as on the statement."""
    normalised = lines.prices_normalised()
    throughput = dict(Flavor.objects.values_list("id", "relative_throughput"))
    prices = {}
    for key, periods in lines.rate_schedules().items():
        flavor = key[0]  # card-hour schedules only: the tail is priced on cards alone
        period = pricing.period_at(periods, now) if key[1:] == ("standard",) else None
        if period is not None:
            factor = throughput.get(flavor, Decimal(1)) if normalised else Decimal(1)
            prices[flavor] = period.price * factor / SECONDS_PER_HOUR
    return prices, max(prices.values(), default=Decimal(0))


def _tail_money(
    rows: list[tuple], now: datetime, keys: Collection[Key], parents: dict[int, int | None]
) -> dict[Key, Decimal]:
    """The tail's money per key, exact (unrounded): each row at its flavor's price per second, a
    bound's row (no flavor) at the highest."""
    if not rows:
        return {}
    prices, highest = _tail_prices(now)
    priced = [
        (dept, project, seconds * (highest if flavor is None else prices.get(flavor, Decimal(0))))
        for dept, project, flavor, seconds, _t in rows
    ]
    return _summed(priced, keys, parents)


# --- status of a budget --------------------------------------------------------------------------


@dataclass(frozen=True)
class BudgetStatus:
    budget: Budget
    month: date
    used: Decimal  # card-hours
    used_money: Decimal = ZERO_MONEY  # in the budget's currency (computed where a budget has an amount)
    # With ``series``: the cumulative use at the end of each day of the month so far (today: now),
    # in the budget's chart unit (money if it has an amount, else card-hours), and the forecast.
    days: tuple[tuple[date, Decimal], ...] = ()
    forecast: burn.Forecast | None = None

    @property
    def hours_percent(self) -> int | None:
        """Whole percent, rounded down: "100 %" means the budget is really spent."""
        if self.budget.card_hours is None:
            return None
        return int(self.used * 100 / self.budget.card_hours)

    @property
    def money_percent(self) -> int | None:
        if self.budget.amount is None:
            return None
        return int(self.used_money * 100 / self.budget.amount)

    @property
    def percent(self) -> int:
        """The higher share of the budget's limits."""
        return max(p for p in (self.hours_percent, self.money_percent) if p is not None)

    @property
    def hours_over(self) -> bool:
        return self.budget.card_hours is not None and self.used >= self.budget.card_hours

    @property
    def money_over(self) -> bool:
        return self.budget.amount is not None and self.used_money >= self.budget.amount

    @property
    def over(self) -> bool:
        return self.hours_over or self.money_over

    @property
    def remaining(self) -> Decimal | None:
        if self.budget.card_hours is None:
            return None
        return max(self.budget.card_hours - self.used, Decimal(0))

    @property
    def in_money(self) -> bool:
        """The chart and the forecast speak money (the budget has an amount)."""
        return self.budget.amount is not None

    @property
    def limit(self) -> Decimal:
        """The limit in the chart unit."""
        return self.budget.amount if self.in_money else self.budget.card_hours

    @property
    def projected(self) -> Decimal | None:
        """The forecast at month end, rounded for its unit (money: the one rule)."""
        if self.forecast is None:
            return None
        if self.in_money:
            return pricing.money(self.forecast.projected)
        return self.forecast.projected.quantize(CENT)

    @property
    def runs_out_on(self) -> date | None:
        if self.forecast is None or self.forecast.runs_out_at is None:
            return None
        return self.forecast.runs_out_at.astimezone(site_zone()).date()


def budget_statuses(
    budgets,
    *,
    now: datetime | None = None,
    upper: bool = False,
    series: bool = False,
    parents: dict[int, int | None] | None = None,
) -> dict[int, BudgetStatus]:
    """This month's usage of each budget, with one usage computation for all of them (with
    ``upper``, a bound of it: see ``month_usage``). Money is computed when a budget has an
    amount; with ``series``, the days of the burn-down and the forecast too. ``parents``: the
    tree, when the caller has read it (``_parents``)."""
    budgets = list(budgets)
    if not budgets:
        return {}
    now = now or timezone.now()
    zone = site_zone()
    month = month_of(now, zone)
    keys = [b.key for b in budgets]
    parents = parents if parents is not None else _parents()  # one read of the tree for it all
    cursor, tail = _tail_rows(month, now, _covered_projects(keys, parents), upper=upper)
    hours = _by_key(_metered(month, cursor) + [(d, p, s) for d, p, _f, s, _t in tail], keys, parents)
    if not series and all(b.amount is None for b in budgets):
        return {b.pk: BudgetStatus(b, month, hours.get(b.key, Decimal(0))) for b in budgets}
    ledger = _ledger_days(month, cursor)
    tail_money = _tail_money(tail, now, keys, parents)
    owners, wanted = _owners(parents), set(keys)
    per_day: dict[Key, dict[date, list[Decimal]]] = defaultdict(lambda: defaultdict(lambda: [Decimal(0)] * 2))
    for dept, project, day, seconds, amount in ledger:
        for key in owners(dept, project):
            if key in wanted:
                entry = per_day[key][day]
                entry[0] += seconds
                entry[1] += amount
    statuses = {}
    for b in budgets:
        days = per_day.get(b.key, {})
        ledger_money = sum((m for _s, m in days.values()), ZERO_MONEY)
        used_money = ledger_money + pricing.money(tail_money.get(b.key, Decimal(0)))
        status = BudgetStatus(b, month, hours.get(b.key, Decimal(0)), used_money)
        if series:
            status = _with_series(status, days, now)
        statuses[b.pk] = status
    return statuses


def _with_series(status: BudgetStatus, days: dict[date, list[Decimal]], now: datetime) -> BudgetStatus:
    """The burn-down days and the forecast, in the budget's chart unit."""
    zone = site_zone()
    start, end = month_bounds(status.month, zone)
    today = min(now, end - timedelta(microseconds=1)).astimezone(zone).date()
    money = status.in_money
    used = status.used_money if money else status.used
    first = start.astimezone(zone).date()
    window = burn.window_start(min(now, end), start, zone)
    window_day = window.astimezone(zone).date()
    cumulative, before_window, out = Decimal(0), Decimal(0), []
    for offset in range((today - first).days + 1):
        day = first + timedelta(days=offset)
        seconds, amount = days.get(day, (Decimal(0), ZERO_MONEY))
        if day < window_day:
            before_window += amount if money else seconds / SECONDS_PER_HOUR
        cumulative += amount if money else seconds / SECONDS_PER_HOUR
        out.append((day, used if day == today else cumulative))
    found = burn.forecast(
        used=used, used_before_window=before_window, start=window, now=min(now, end), month_end=end,
        limit=status.limit,
    )
    return BudgetStatus(status.budget, status.month, status.used, status.used_money, tuple(out), found)


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


def _amount(value) -> Decimal:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, ValueError, TypeError):
        raise ValidationError({"amount": [_("Give the budget as an amount of money, e.g. 50000.")]}) from None
    if not amount.is_finite() or amount <= 0:
        raise ValidationError({"amount": [_("A budget is more than zero.")]})
    if amount > BUDGET_AMOUNT_MAX:
        raise ValidationError(
            {"amount": [_("A budget is at most %(max)s a month.") % {"max": f"{BUDGET_AMOUNT_MAX:,f}"}]}
        )
    if amount != amount.quantize(CENT):
        raise ValidationError({"amount": [_("Use at most two decimals.")]})
    return amount.quantize(CENT)


UNCHANGED = object()  # budget_set: leave this limit as it is


def budget_set(
    *,
    actor: User | None,
    card_hours=UNCHANGED,
    amount=UNCHANGED,
    department: Department | None = None,
    project: Project | None = None,
) -> Budget:
    """Create or change the monthly budget of a department or a project (one each): in card-hours,
    in money (``amount``, the site currency), or both. A limit not given stays as it is; None
    (or "") removes it; a budget keeps at least one. ``actor`` None is the system (demo seeding)."""
    if (department is None) == (project is None):
        raise ValidationError({"department": [_("Give either a department or a project.")]})
    if actor is not None:
        perm.require(can_set_budget(scope_for(actor), department=department, project=project))
    owner = {"department": department} if department is not None else {"project": project}
    with transaction.atomic():
        return _budget_write(actor, owner, card_hours, amount)


def _budget_write(actor: User | None, owner: dict, card_hours, amount) -> Budget:
    current = Budget.objects.select_for_update().filter(**owner).first()
    limits = {
        "card_hours": current.card_hours if current else None,
        "amount": current.amount if current else None,
    }
    errors: dict[str, list] = {}
    for field, value, parse in (("card_hours", card_hours, _card_hours), ("amount", amount, _amount)):
        if value is UNCHANGED:
            continue
        try:
            limits[field] = None if value is None or value == "" else parse(value)
        except ValidationError as exc:
            errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    if limits["card_hours"] is None and limits["amount"] is None:
        raise ValidationError({"card_hours": [_("Give the budget in card-hours, in money, or both.")]})
    budget, _created = Budget.objects.update_or_create(
        **owner, defaults={**limits, "currency": default_currency(), "updated_by": actor}
    )
    return budget


def budget_delete(*, actor: User, budget: Budget) -> None:
    perm.require(can_set_budget(scope_for(actor), department=budget.department, project=budget.project))
    budget.delete()


# --- the approval check (jobs.approvals.budget_checks) -----------------------------------------


def _number(value: Decimal) -> str:
    return f"{value.quantize(CENT).normalize():,f}"


def _money_text(value: Decimal) -> str:
    return f"{value.quantize(CENT):,f}"


def over_budget_reason(status: BudgetStatus) -> Message:
    """Stored with the held job's approval request: a message, rendered for each reader."""
    if status.money_over and not status.hours_over:
        return message(
            gettext_noop("over budget: %(pct)s %% of %(limit)s %(currency)s in %(month)s (%(owner)s)"),
            pct=status.money_percent,
            limit=_money_text(status.budget.amount),
            currency=status.budget.currency,
            month=month_label(status.month),
            owner=status.budget.owner.name,
        )
    return message(
        gettext_noop("over budget: %(pct)s %% of %(limit)s card-hours in %(month)s (%(owner)s)"),
        pct=status.hours_percent,
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
    parents = _parents()  # one read of the tree for the path and the usage
    path = department_ancestors(project.department_id, parents)
    budgets = list(
        Budget.objects.filter(Q(project_id=project.pk) | Q(department_id__in=path)).select_related(
            "department", "project"
        )
    )
    if not budgets:
        return None
    rank = {("project", project.pk): -1, **{("department", d): i for i, d in enumerate(path)}}
    statuses = _decisive_statuses(budgets, timezone.now(), parents)
    for budget in sorted(budgets, key=lambda b: rank.get(b.key, len(path))):
        if statuses[budget.pk].over:
            return over_budget_reason(statuses[budget.pk])
    return None


def over_budget_tenants(now: datetime) -> list[str]:
    """Registered in ``jobs.scheduling.config.over_budget_providers``: the tree ids (``d<id>``, ``p<id>``)
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


def _decisive_statuses(
    budgets: list[Budget], now: datetime, parents: dict[int, int | None] | None = None
) -> dict[int, BudgetStatus]:
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
    Money limits are decided the same way: the bound's card-seconds at the highest standard
    price in force (``_tail_money``), plus a cent for the tail's rounding.
    """
    month = month_of(now, site_zone())
    parents = parents if parents is not None else _parents()  # every way below reads the tree once
    keys = sorted({b.key for b in budgets})
    money = any(b.amount is not None for b in budgets)
    cache_key = _recent_key(month, keys) + (":money" if money else "")
    recent = cache.get(cache_key)
    if recent is not None and now - datetime.fromisoformat(recent["at"]) < timedelta(seconds=RECENT_SECONDS):
        at = datetime.fromisoformat(recent["at"])
        hours = {tuple(key): Decimal(value) for key, value in recent["usage"]}
        spent = {tuple(key): Decimal(value) for key, value in recent.get("money", [])}
        _cursor, rows = _tail_rows(month, now, _covered_projects(keys, parents), upper=True, since=at)
        grown = _by_key([(d, p, s) for d, p, _f, s, _t in rows], keys, parents)
        grown_money = _tail_money(rows, now, keys, parents) if money else {}
        if all(_decided(b, hours, spent, grown, grown_money) for b in budgets):
            return {
                b.pk: BudgetStatus(b, month, hours.get(b.key, Decimal(0)), spent.get(b.key, ZERO_MONEY))
                for b in budgets
            }
    else:
        upper = budget_statuses(budgets, now=now, upper=True, parents=parents)
        if not any(s.over for s in upper.values()):
            return upper
    exact = budget_statuses(budgets, now=now, parents=parents)
    usage = {s.budget.key: s.used for s in exact.values()}
    spent = {s.budget.key: s.used_money for s in exact.values()}
    cache.set(
        cache_key,
        {
            "at": now.isoformat(),
            "usage": [[list(k), str(v)] for k, v in usage.items()],
            "money": [[list(k), str(v)] for k, v in spent.items()],
        },
        RECENT_SECONDS,
    )
    return exact


def _decided(budget: Budget, hours, spent, grown, grown_money) -> bool:
    """A figure of a moment ago decides ``budget`` now: one limit was already reached, or every
    limit is out of reach of what can have been added since."""
    key, limits = budget.key, []
    if budget.card_hours is not None:
        limits.append((hours.get(key, Decimal(0)), grown.get(key, Decimal(0)), budget.card_hours, Decimal(0)))
    if budget.amount is not None:
        limits.append((spent.get(key, ZERO_MONEY), grown_money.get(key, Decimal(0)), budget.amount, CENT))
    return any(then >= limit for then, _g, limit, _s in limits) or all(
        then + more + slack < limit for then, more, limit, slack in limits
    )


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


def _notice(status: BudgetStatus, unit: str, threshold: int) -> Message:
    budget = status.budget
    values = {"owner": budget.owner.name, "month": month_label(status.month)}
    if unit == AlertUnit.FORECAST:
        values["date"] = status.runs_out_on.isoformat()
        if status.in_money:
            return message(
                gettext_noop(
                    "Budget forecast: at the rate of the last 7 days, %(owner)s uses up its budget of "
                    "%(limit)s %(currency)s on %(date)s (%(month)s)."
                ),
                limit=_money_text(budget.amount), currency=budget.currency, **values,
            )
        return message(
            gettext_noop(
                "Budget forecast: at the rate of the last 7 days, %(owner)s uses up its budget of "
                "%(limit)s card-hours on %(date)s (%(month)s)."
            ),
            limit=_number(budget.card_hours), **values,
        )
    if unit == AlertUnit.MONEY:
        values.update(pct=status.money_percent, limit=_money_text(budget.amount), currency=budget.currency)
        if threshold >= 100:
            return message(
                gettext_noop(
                    "Budget spent: %(owner)s has used %(pct)s %% of its %(limit)s %(currency)s in %(month)s. "
                    "New jobs now need approval."
                ),
                **values,
            )
        return message(
            gettext_noop(
                "Budget warning: %(owner)s has used %(pct)s %% of its %(limit)s %(currency)s in %(month)s."
            ),
            **values,
        )
    values.update(pct=status.hours_percent, limit=_number(budget.card_hours))
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


def _alert(status: BudgetStatus, unit: str, crossed: list[int], now: datetime) -> list[BudgetAlert]:
    """Record the crossed thresholds of ``unit``; notify once, for the highest new one. The row
    and its notification (the outbox of its mail) commit together; a row that already exists — an
    earlier run, or a concurrent one that won the insert — notifies nobody."""
    budget = status.budget
    defaults = {
        "used_card_hours": status.used.quantize(CENT),
        "budget_card_hours": budget.card_hours,
        "created_at": now,
    }
    if budget.amount is not None:
        defaults.update(used_amount=status.used_money, budget_amount=budget.amount)
    if unit == AlertUnit.FORECAST:
        defaults["runs_out_on"] = status.runs_out_on
    with transaction.atomic():
        new = []
        for threshold in crossed:
            alert, made = BudgetAlert.objects.get_or_create(
                budget=budget, month=status.month, unit=unit, threshold=threshold, defaults=defaults
            )
            if made:
                new.append(alert)
        if new:
            # A message: each recipient reads it in their own language (portal/texts.py).
            text = _notice(status, unit, max(a.threshold for a in new))
            notify(
                recipients=budget_recipients(budget), text=text, link=reverse("billing-budgets"),
                topic="budget", project=budget.project,
            )
    return new


def budget_alerts_run(*, now: datetime | None = None) -> list[BudgetAlert]:
    """Check every budget against this month's usage and alert at 80 % and 100 % of each of its
    limits (card-hours, money), once per unit and threshold per month; and, once a month, warn
    early when a budget still below 80 % runs out before the month ends at the last 7 days' rate
    (measured over a day at least). Safe to run any
    number of times, also concurrently."""
    now = now or timezone.now()
    budgets = Budget.objects.select_related("department", "project__department")
    created: list[BudgetAlert] = []
    for status in budget_statuses(budgets, now=now, series=True).values():
        budget = status.budget
        if budget.card_hours is not None:
            crossed = [t for t in THRESHOLDS if status.used * 100 >= budget.card_hours * t]
            if crossed:
                created += _alert(status, AlertUnit.CARD_HOURS, crossed, now)
        if budget.amount is not None:
            crossed = [t for t in THRESHOLDS if status.used_money * 100 >= budget.amount * t]
            if crossed:
                created += _alert(status, AlertUnit.MONEY, crossed, now)
        # The early warning: once the 80 % warning is out, it would only repeat it; and a rate
        # from less than a day (the month's first hours) is too noisy to warn anybody about.
        if (
            status.runs_out_on is not None
            and status.percent < THRESHOLDS[0]
            and now - status.forecast.window_start >= FORECAST_MIN_WINDOW
        ):
            created += _alert(status, AlertUnit.FORECAST, [100], now)
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
                    "remaining": None if status.remaining is None else status.remaining.quantize(CENT),
                    # A money budget (issue 24): its amount, what is spent and what is left.
                    "amount": status.budget.amount,
                    "currency": status.budget.currency if status.budget.amount is not None else None,
                    "used_amount": status.used_money if status.budget.amount is not None else None,
                    "remaining_amount": (
                        max(status.budget.amount - status.used_money, Decimal(0))
                        if status.budget.amount is not None
                        else None
                    ),
                    "percent": status.percent,
                }
            )
        out[request.pk] = {"budgets": rows}
    return out
