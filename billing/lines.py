"""Statement lines of a month, computed from the ledger and the rates (reads only).

PostgreSQL sums the ledger per line key and per *rate bucket* — the stretches between any
two rate starts — so a month of a million rows reaches Python as a few thousand sums; which
rate applies to a bucket, the split of a line at a rate change, and the rounding are decided
by the pure ``billing.pricing``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime

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


Schedules = dict[tuple[int, str], list[pricing.RatePeriod]]

EARLIEST = datetime(1, 1, 1, tzinfo=UTC)  # bucket 1 starts here: width_bucket needs a first threshold
KIND_ORDER = {LineKind.USAGE: 0, LineKind.ADJUSTMENT: 1, LineKind.RESERVED: 2, LineKind.LENDER_CREDIT: 3}


def rate_schedules() -> Schedules:
    rows: dict[tuple[int, str], list] = defaultdict(list)
    for flavor_id, tier, valid_from, price, rate_id in Rate.objects.values_list(
        "flavor_id", "tier", "valid_from", "price", "id"
    ):
        rows[(flavor_id, tier)].append((valid_from, price, rate_id))
    return {key: pricing.periods_from(found) for key, found in rows.items()}


def _thresholds(schedules: Schedules) -> list[datetime]:
    starts = sorted({p.valid_from for periods in schedules.values() for p in periods})
    return [EARLIEST, *starts]


_SUMS = """
SELECT u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, {month},
       min(u.hour_start), max(u.hour_start), sum(u.card_seconds), sum(u.card_seconds * u.relative_throughput)
FROM billing_usagerecord u
WHERE {where}
GROUP BY u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, {month_group}
         width_bucket(u.hour_start, %(thresholds)s::timestamptz[])
HAVING sum(u.card_seconds) <> 0 OR sum(u.card_seconds * u.relative_throughput) <> 0
"""
# (A charge and its reversal in one group cancel out: no line of nothing. A correction metered
# after a profile edit can leave card-seconds net 0 but normalised ones not: that line stays.)


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
    usages = _sums(" AND ".join(["u.month = %(month)s", *where]), params, LineKind.USAGE, with_month=False)
    if adjustments_after is not None:
        late = " AND ".join(["u.month < %(month)s", "u.id > %(after)s", *where])
        usages += _sums(late, params, LineKind.ADJUSTMENT, with_month=True)
    return pricing.price(usages, schedules, normalised=prices_normalised())


def prices_normalised() -> bool:
    """The centre prices usage per normalised card-hour (标准卡时, DESIGN §14)."""
    return bool(settings.GPUPOOL["PRICE_NORMALISED_CARD_HOURS"])


def _sums(where: str, params: dict, kind: str, *, with_month: bool) -> list[pricing.Usage]:
    sql = _SUMS.format(
        where=where,
        month="u.month" if with_month else "NULL::date",
        month_group="u.month," if with_month else "",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [
        pricing.Usage(
            key=LineKey(dept, kind, project, user, flavor, tier, original),
            schedule=(flavor, tier),
            start=first,
            end=last + HOUR,
            card_seconds=seconds,
            normalised_seconds=normalised,
        )
        for dept, project, user, flavor, tier, original, first, last, seconds, normalised in rows
    ]


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
    )
