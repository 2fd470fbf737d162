"""Internal settlement between top-level departments, and the optional reserved-quota fee.

Both work hour by hour on the top-level departments' quota nodes, with the effective quota
of ``quotas.effective`` (windows and active loans applied) evaluated at the start of each hour,
from the quota tree as it stands when the statement is built (quotas keep no history).

**Lender credit** (``BILLING["INTERNAL_SETTLEMENT"]``): per hour and flavor, a top-level
department T has ``idle(T) = max(0, quota(T) − in-quota usage of T's subtree)`` card-seconds.
Its own on-loan usage is first covered by its own idle quota (a department lends inside itself
freely — no credit); what remains, ``external(T)``, was borrowed from the others. What T can
lend to others is ``lendable(T) = max(0, idle(T) − on-loan(T))``, at most its lend limit. Each
borrower's external card-seconds are spread over the other departments in proportion to their
``lendable``, and no lender is credited beyond its ``lendable``; capacity nobody holds as quota
(the pool beyond Σ quotas) earns no credit. Credits are priced at the flavor's ``on_loan``
rate — what the borrower paid — and appear as negative ``lender_credit`` lines.

**Reserved fee**: when a ``reserved`` rate exists for a flavor, every top-level department pays
it per card-hour of its effective quota (what it splits among its children is its own affair).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction

from django.conf import settings
from django.db import connection

from portal.models import Department
from quotas.effective import Limits, LoanSpan, Window, effective_limits
from quotas.models import Flavor, Loan, LoanState, QuotaNode, QuotaWindow
from quotas.selectors import site_zone

from . import pricing
from .lines import LineKey, Schedules
from .models import LineKind, Tier
from .periods import HOUR, month_bounds

SECONDS = Decimal(3600)
PLACES = Decimal("0.000001")


def settlement_usages(month: date, schedules: Schedules, *, until: datetime, through: int | None) -> list:
    """Usages (for ``pricing.price``) of lender credits and reserved fees of ``month``, for the
    hours before ``until``."""
    reserved = {key[0] for key in schedules if key[1:] == (Tier.RESERVED,)}  # card schedules only
    settle = settings.BILLING["INTERNAL_SETTLEMENT"]
    if not reserved and not settle:
        return []
    zone = site_zone()
    start, end = month_bounds(month, zone)
    end = min(end, until)
    if end <= start:
        return []
    usage = _hourly_usage(month, through) if settle else {}
    flavors = reserved | {f for (_hour, f) in usage}
    nodes = _top_nodes(flavors)
    fraction = {
        pk: Fraction(top, bottom)
        for pk, top, bottom in Flavor.objects.filter(pk__in=flavors).values_list(
            "pk", "fraction_numerator", "fraction_denominator"
        )
    }
    found = []
    hour = start
    while hour < end:
        for flavor_id in sorted(flavors):
            hour_usage = usage.get((hour, flavor_id), {})
            borrowed = any(tier == Tier.ON_LOAN for (_t, tier) in hour_usage)
            if flavor_id not in reserved and not borrowed:
                continue  # nothing to settle in this hour
            limits = {dept: _limits(node, hour, zone) for dept, node in nodes.get(flavor_id, {}).items()}
            if flavor_id in reserved:
                found += _reserved(flavor_id, hour, limits, fraction[flavor_id], schedules)
            if borrowed:
                found += _credits(flavor_id, hour, limits, fraction[flavor_id], hour_usage)
        hour += HOUR
    return found


def _hourly_usage(month: date, through: int | None) -> dict[tuple[datetime, int], dict[tuple, Decimal]]:
    """{(hour, flavor): {(top-level department, tier): card-seconds}} of the month's regular rows."""
    top = _top_of()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT hour_start, flavor_id, department_id, tier, sum(card_seconds) FROM billing_usagerecord"
            " WHERE month = %s AND (%s::bigint IS NULL OR id <= %s)"
            " GROUP BY hour_start, flavor_id, department_id, tier",
            [month, through, through],
        )
        rows = cursor.fetchall()
    found: dict[tuple, dict[tuple, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for hour, flavor_id, dept, tier, seconds in rows:
        found[(hour, flavor_id)][(top[dept], tier)] += seconds
    return found


def _top_of() -> dict[int, int]:
    parents = dict(Department.objects.values_list("id", "parent_id"))
    top = {}
    for dept in parents:
        node, seen = dept, set()
        while parents.get(node) is not None and node not in seen:
            seen.add(node)
            node = parents[node]
        top[dept] = node
    return top


class _Node:
    def __init__(self, node: QuotaNode):
        self.base = Limits(node.quota, node.borrow_limit, node.lend_limit)
        self.windows: list[Window] = []
        self.loans_out: list[LoanSpan] = []
        self.loans_in: list[LoanSpan] = []


def _top_nodes(flavors: set[int]) -> dict[int, dict[int, _Node]]:
    """{flavor: {top-level department: node with its windows and active loans}}."""
    qs = QuotaNode.objects.filter(
        flavor_id__in=flavors, department__isnull=False, department__parent__isnull=True
    )
    by_id = {n.pk: _Node(n) for n in qs}
    found: dict[int, dict[int, _Node]] = defaultdict(dict)
    for n in qs:
        found[n.flavor_id][n.department_id] = by_id[n.pk]
    for w in QuotaWindow.objects.filter(quota_node_id__in=by_id, active=True).order_by("id"):
        by_id[w.quota_node_id].windows.append(
            Window(frozenset(int(d) for d in w.weekdays), w.start_time, w.end_time, w.quota, w.lend_limit)
        )
    for loan in Loan.objects.filter(state=LoanState.ACTIVE):
        span = LoanSpan(loan.amount, loan.starts_at, loan.ends_at)
        if loan.lender_id in by_id:
            by_id[loan.lender_id].loans_out.append(span)
        if loan.borrower_id in by_id:
            by_id[loan.borrower_id].loans_in.append(span)
    return found


def _limits(node: _Node, at: datetime, zone) -> Limits:
    return effective_limits(
        node.base, at=at, zone=zone, windows=node.windows, loans_out=node.loans_out, loans_in=node.loans_in
    )


def _card_seconds(units: Decimal, fraction: Fraction) -> Decimal:
    """Card-seconds of ``units`` of a flavor held for an hour: numerator first, divided last."""
    return units * fraction.numerator * SECONDS / fraction.denominator


def _reserved(flavor_id, hour, limits: dict[int, Limits], fraction, schedules) -> list[pricing.Usage]:
    if pricing.period_at(schedules.get((flavor_id, Tier.RESERVED), ()), hour) is None:
        return []
    return [
        pricing.Usage(
            LineKey(dept, LineKind.RESERVED, None, None, flavor_id, Tier.RESERVED),
            (flavor_id, Tier.RESERVED),
            hour,
            hour + HOUR,
            _card_seconds(lim.quota, fraction).quantize(PLACES),
        )
        for dept, lim in sorted(limits.items())
        if lim.quota > 0
    ]


def _credits(flavor_id, hour, limits: dict[int, Limits], fraction, usage: dict) -> list[pricing.Usage]:
    """``usage``: {(top-level department, tier): card-seconds} of this hour and flavor."""
    tops = set(limits) | {t for (t, _tier) in usage}
    idle, external, lendable = {}, {}, {}
    for t in tops:
        quota = _card_seconds(limits[t].quota, fraction) if t in limits else Decimal(0)
        in_quota = usage.get((t, Tier.STANDARD), Decimal(0))
        on_loan = usage.get((t, Tier.ON_LOAN), Decimal(0))
        idle[t] = max(Decimal(0), quota - in_quota)
        external[t] = max(Decimal(0), on_loan - idle[t])
        lendable[t] = max(Decimal(0), idle[t] - on_loan)
        lend_limit = limits[t].lend_limit if t in limits else None
        if lend_limit is not None:
            lendable[t] = min(lendable[t], _card_seconds(lend_limit, fraction))
    credit: dict[int, Decimal] = defaultdict(Decimal)
    for borrower, borrowed in external.items():
        pool = sum((v for t, v in lendable.items() if t != borrower), Decimal(0))
        if borrowed <= 0 or pool <= 0:
            continue
        for t, v in lendable.items():
            if t != borrower and v > 0:
                credit[t] += borrowed * v / pool
    return [
        pricing.Usage(
            LineKey(t, LineKind.LENDER_CREDIT, None, None, flavor_id, Tier.ON_LOAN),
            (flavor_id, Tier.ON_LOAN),
            hour,
            hour + HOUR,
            -min(c, lendable[t]).quantize(PLACES),
        )
        for t, c in sorted(credit.items())
        if min(c, lendable[t]).quantize(PLACES) > 0
    ]
