"""Statement lines of a month, computed from the ledger and the rates (reads only).

PostgreSQL sums the ledger per line key and per *rate bucket* — the stretches between any
two rate starts — so a month of a million rows reaches Python as a few thousand sums; which
rate applies to a bucket, the split of a line at a rate change, and the rounding are decided
by the pure ``billing.pricing``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from decimal import Decimal

from django.conf import settings
from django.db import connection

from . import pricing
from .models import LineKind, Rate
from .periods import HOUR


@dataclass(frozen=True, slots=True)
class LineKey:
    department_id: int
    kind: str
    project_id: int | None
    user_id: int | None
    flavor_id: int
    tier: str
    original_month: date | None = None
    resource: str = pricing.CARD  # what the line bills: card-hours, or CPU / memory beyond the share


# (flavor, tier) → its card-hour periods; (flavor, tier, "core" | "gib") → its core-/GiB-hour ones.
Schedules = dict[tuple, list[pricing.RatePeriod]]

EARLIEST = datetime(1, 1, 1, tzinfo=UTC)  # bucket 1 starts here: width_bucket needs a first threshold
RESOURCE_ORDER = {pricing.CARD: 0, pricing.CORE: 1, pricing.GIB: 2}
KIND_ORDER = {LineKind.USAGE: 0, LineKind.ADJUSTMENT: 1, LineKind.RESERVED: 2, LineKind.LENDER_CREDIT: 3}


def rate_schedules() -> Schedules:
    rows: dict[tuple, list] = defaultdict(list)
    for flavor_id, tier, resource, valid_from, price, rate_id in Rate.objects.values_list(
        "flavor_id", "tier", "resource", "valid_from", "price", "id"
    ):
        rows[schedule_of(flavor_id, tier, resource)].append((valid_from, price, rate_id))
    return {key: pricing.periods_from(found) for key, found in rows.items()}


def schedule_of(flavor_id: int, tier: str, resource: str = pricing.CARD) -> tuple:
    """The rate schedule a usage is priced on (card-hours keep the two-part key settlement uses)."""
    return (flavor_id, tier) if resource == pricing.CARD else (flavor_id, tier, resource)


def _thresholds(schedules: Schedules) -> list[datetime]:
    starts = sorted({p.valid_from for periods in schedules.values() for p in periods})
    return [EARLIEST, *starts]


_SUMS = """
SELECT u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, {month},
       min(u.hour_start), max(u.hour_start), sum(u.card_seconds), sum(u.card_seconds * u.relative_throughput),
       sum(u.extra_core_seconds), sum(u.extra_mib_seconds)
FROM billing_usagerecord u
WHERE {where}
GROUP BY u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, {month_group}
         width_bucket(u.hour_start, %(thresholds)s::timestamptz[])
HAVING sum(u.card_seconds) <> 0 OR sum(u.card_seconds * u.relative_throughput) <> 0
    OR sum(u.extra_core_seconds) <> 0 OR sum(u.extra_mib_seconds) <> 0
"""
# (A charge and its reversal in one group cancel out: no line of nothing. A correction metered
# after a profile edit can leave card-seconds net 0 but normalised ones not: that line stays.)
# CPU and memory beyond the share (DESIGN §15) become lines of their own where a core-hour or
# GiB-hour rate exists for the flavor and tier; without one that part is not billed: the card's
# price includes the share, and the centre prices nothing more.


def usage_lines(
    month: date,
    schedules: Schedules,
    *,
    through: int | None,
    adjustments_after: int | None,
    department_ids: frozenset[int] | None = None,
) -> list[pricing.Line]:
    """Usage lines of ``month`` (ledger rows of the month with ``id ≤ through``; all rows when
    ``through`` is None) and, when ``adjustments_after`` is given, adjustment lines for rows of
    earlier months metered after that cursor."""
    params: dict = {"month": month, "through": through, "after": adjustments_after}
    params["thresholds"] = _thresholds(schedules)
    where = ["(%(through)s::bigint IS NULL OR u.id <= %(through)s)"]
    if department_ids is not None:
        where.append("u.department_id = ANY(%(departments)s)")
        params["departments"] = sorted(department_ids)
    usages = _sums(
        " AND ".join(["u.month = %(month)s", *where]), params, LineKind.USAGE, with_month=False,
        schedules=schedules,
    )
    if adjustments_after is not None:
        late = " AND ".join(["u.month < %(month)s", "u.id > %(after)s", *where])
        usages += _sums(late, params, LineKind.ADJUSTMENT, with_month=True, schedules=schedules)
    lines = pricing.price(usages, schedules, normalised=prices_normalised())
    # CPU / memory beyond the share in hours no rate of theirs covers: not billed (see _SUMS).
    return [line for line in lines if line.resource == pricing.CARD or line.period is not None]


def prices_normalised() -> bool:
    """The centre prices usage per normalised card-hour (标准卡时, DESIGN §14)."""
    return bool(settings.GPUPOOL["PRICE_NORMALISED_CARD_HOURS"])


def _sums(
    where: str, params: dict, kind: str, *, with_month: bool, schedules: Schedules
) -> list[pricing.Usage]:
    sql = _SUMS.format(
        where=where,
        month="u.month" if with_month else "NULL::date",
        month_group="u.month," if with_month else "",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    found = []
    for dept, project, user, flavor, tier, original, first, last, seconds, normalised, cores, mib in rows:
        key = LineKey(dept, kind, project, user, flavor, tier, original)
        if seconds or normalised:
            found.append(pricing.Usage(key, (flavor, tier), first, last + HOUR, seconds, normalised))
        for resource, extra in ((pricing.CORE, cores), (pricing.GIB, mib)):
            schedule = schedule_of(flavor, tier, resource)
            if extra and schedule in schedules:
                found.append(pricing.Usage(
                    replace(key, resource=resource), schedule, first, last + HOUR, Decimal(0), None,
                    resource, extra,
                ))
    return found


def by_department(lines: list[pricing.Line]) -> dict[int, list[pricing.Line]]:
    found: dict[int, list[pricing.Line]] = defaultdict(list)
    for line in lines:
        found[line.key.department_id].append(line)
    for dept_lines in found.values():
        dept_lines.sort(key=_order)
    return dict(found)


def _order(line: pricing.Line):
    k: LineKey = line.key
    return (
        KIND_ORDER.get(k.kind, 9),
        k.original_month or date.min,
        k.project_id or 0,
        k.user_id or 0,
        k.flavor_id,
        k.tier,
        line.start,
        RESOURCE_ORDER.get(k.resource, 9),
    )
