"""Billing reads, always starting from the tenancy scope (DESIGN §1).

Statements are seen by the finance and department admins of the department's subtree, by
platform admins and auditors; project members and admins see none (404)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal

from django.db import connection
from django.db.models import QuerySet

from portal.models import Department, User
from portal.selectors import scope_for
from quotas.models import Flavor
from quotas.selectors import site_zone

from . import pricing
from .lines import by_department, prices_normalised, rate_schedules, usage_lines
from .manual import manual_lines
from .meter import meter_state
from .models import MonthClose, Rate, Resource, Statement, StatementLine, Tier, UsageRecord
from .periods import month_bounds
from .settlement import settlement_usages


def statement_departments(user: User) -> frozenset[int] | None:
    """Department ids whose statements ``user`` sees; None = all of them."""
    scope = scope_for(user)
    if scope.sees_everything:
        return None
    return scope.department_ids


def sees_statements(user: User) -> bool:
    departments = statement_departments(user)
    return departments is None or bool(departments)


def visible_statements(user: User) -> QuerySet[Statement]:
    departments = statement_departments(user)
    qs = Statement.objects.select_related("department")
    return qs if departments is None else qs.filter(department_id__in=departments)


def statement_lines(statement: Statement) -> QuerySet[StatementLine]:
    return statement.lines.select_related("project", "user", "flavor", "manual").order_by("id")


def can_close_months(user: User) -> bool:
    """Who may close a month (issue 32 item 9): platform admins, and finance whose statements
    cover the whole centre. A close builds and closes every department's statement of the month
    at once, so finance of one department (or subtree) may not: its decision would close the
    others' months too. DESIGN §7: "finance decides when"; DESIGN §1: finance reads the
    statements of its subtree — a subtree that is the whole centre is the finance office."""
    scope = scope_for(user)
    if scope.platform_admin:
        return True
    if not scope.finance_departments:
        return False
    return set(Department.objects.values_list("id", flat=True)) <= scope.finance_departments


def is_closed(month: date) -> bool:
    return MonthClose.objects.filter(month=month).exists()


def month_lines(
    month: date, *, through: int | None, adjustments_after: int | None, until: datetime, departments=None
) -> dict[int, list[pricing.Line]]:
    """Every priced line of ``month`` by department: usage, adjustments, reserved fees, credits,
    and the approved manual adjustments not yet billed (``billing.manual``)."""
    schedules = rate_schedules()
    found = usage_lines(
        month, schedules, through=through, adjustments_after=adjustments_after, department_ids=departments
    )
    extra = settlement_usages(month, schedules, until=until, through=through)
    if departments is not None:
        extra = [u for u in extra if u.key.department_id in departments]
    return by_department(found + pricing.price(extra, schedules) + manual_lines(month, departments))


@dataclass
class Estimate:
    """A department's statement for an open month, computed now and stored nowhere."""

    department: Department
    month: date
    metered_through: datetime | None
    lines: list[pricing.Line] = field(default_factory=list)

    @property
    def total(self) -> Decimal:
        return pricing.total(self.lines)

    @property
    def unpriced(self) -> bool:
        return any(line.amount is None for line in self.lines)


def statement_estimate(user: User, month: date) -> list[Estimate]:
    """Current-month (or any open month's) statements as they stand, for the visible departments.
    Adjustments of closed months are included when this is the month they will be billed in."""
    departments = statement_departments(user)
    metered = meter_state().metered_through
    start, end = month_bounds(month, site_zone())
    previous = MonthClose.objects.filter(month__lt=month).order_by("-month").first()
    adjust = (
        previous is not None
        and not UsageRecord.objects.filter(month__gt=previous.month, month__lt=month).exists()
    )
    until = min(end, metered) if metered else start
    found = month_lines(
        month,
        through=None,
        adjustments_after=previous.through_record if adjust else None,
        until=until,
        departments=departments,
    )
    names = Department.objects.in_bulk(list(found))
    return [
        Estimate(names[dept], month, metered, dept_lines)
        for dept, dept_lines in sorted(found.items(), key=lambda kv: names[kv[0]].code)
    ]


def estimate_usernames(estimates: list[Estimate]) -> dict[int, str]:
    """Usernames of the users the estimate's lines are charged to (one query)."""
    ids = {line.key.user_id for e in estimates for line in e.lines if line.key.user_id}
    return dict(User.objects.filter(pk__in=ids).values_list("pk", "username"))


def standard_cost(flavor: Flavor, card_hours: Decimal, at: datetime) -> tuple[Decimal, str] | None:
    """Registered in ``jobs.estimates.cost_estimators``: ``card_hours`` whole-card hours of
    ``flavor`` at the standard (in-quota) rate in force at ``at``, rounded by the one rule;
    None when no standard rate covers ``at``."""
    price = standard_pricers([flavor], at).get(flavor.pk)
    return price(card_hours) if price is not None else None


def standard_pricers(flavors: Collection[Flavor], at: datetime) -> dict[int, Callable]:
    """Registered in ``jobs.estimates.price_lists``: per flavor, the standard (in-quota) rate in
    force at ``at`` as ``price(card_hours) -> (amount, currency)``, rounded by the one rule; a
    flavor no standard rate covers at ``at`` is left out. One query for all the flavors. Rates
    start on hours and are consecutive, so the one in force is the latest that started. A centre
    pricing normalised card-hours prices the estimate on them too, at the flavor's relative
    throughput now (DESIGN §14)."""
    by_pk = {f.pk: f for f in flavors}
    if not by_pk:
        return {}
    rates = (
        Rate.objects.filter(flavor_id__in=list(by_pk), tier=Tier.STANDARD, resource=Resource.CARD,
                            valid_from__lte=at)
        .order_by("flavor_id", "-valid_from")
        .distinct("flavor_id")
        .only("flavor_id", "price", "currency")
    )
    normalised = prices_normalised()
    return {
        rate.flavor_id: _pricer(rate, by_pk[rate.flavor_id].relative_throughput if normalised else Decimal(1))
        for rate in rates
    }


def _pricer(rate: Rate, factor: Decimal) -> Callable:
    def price(card_hours: Decimal) -> tuple[Decimal, str]:
        return pricing.cost(card_hours * factor, rate.price), rate.currency

    return price


# Card-hours per project on a statement's usage lines, all jobs and external jobs (DESIGN §11:
# submitted to a cluster directly, metered like any job). The same ledger rows as the usage
# lines (``billing.lines.usage_lines``): the month's rows of the department up to the close.
_EXTERNAL_SPLIT = """
SELECT u.project_id, sum(u.card_seconds) / 3600,
       COALESCE(sum(u.card_seconds) FILTER (WHERE j.kind = 'external'), 0) / 3600
FROM billing_usagerecord u
JOIN jobs_job j ON j.id = u.job_id
WHERE u.month = %(month)s AND u.department_id = %(department)s
  AND (%(through)s::bigint IS NULL OR u.id <= %(through)s)
GROUP BY u.project_id
HAVING sum(u.card_seconds) FILTER (WHERE j.kind = 'external') <> 0
"""


@dataclass(frozen=True)
class ExternalShare:
    project_id: int
    card_hours: Decimal  # all usage of the project on the statement
    external_card_hours: Decimal  # of which external jobs'


def statement_external_shares(statement: Statement) -> list[ExternalShare]:
    """The projects of a statement that had external jobs, with their card-hours (usage lines
    only: adjustment lines of earlier months are not split)."""
    close = MonthClose.objects.filter(month=statement.month).first()
    params = {"month": statement.month, "department": statement.department_id,
              "through": close.through_record if close else None}
    with connection.cursor() as cursor:
        cursor.execute(_EXTERNAL_SPLIT, params)
        rows = cursor.fetchall()
    return [ExternalShare(p, Decimal(t).quantize(Decimal("0.01")), Decimal(e).quantize(Decimal("0.01")))
            for p, t, e in rows]
