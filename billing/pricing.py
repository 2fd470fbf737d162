"""Card-hours × effective-dated rates → statement lines, with one rounding rule (DESIGN §7).

Pure: no Django, no database. The caller passes usage quantities and the rate schedules;
the result depends on nothing else, so the rules are table-tested without a database.

* A rate applies from its ``valid_from`` until the next rate of the same schedule (half-open).
* Usage is grouped into lines by the caller's ``key`` and by the rate period it falls in, so a
  line whose usage spans a rate change becomes two lines, split at the change.
* Each line's amount is rounded half-up to 0.01 (``money``) once; totals are sums of the
  rounded lines, never a rounding of the unrounded sum — so a statement adds up on paper.
* Normalised card-seconds (标准卡时, DESIGN §14) = card-seconds × the relative throughput each
  ledger row was metered with, summed exactly. A centre pricing per normalised card-hour
  (``price(..., normalised=True)``) prices a line on them — same rate lookup, same one rounding;
  a line without them (reserved fees, lender credits: capacity, not work) stays on plain ones.
* CPU and memory beyond the share (DESIGN §15 "Metering") are lines of their own, ``resource``
  ``core`` (core-seconds, priced per core-hour) or ``gib`` (MiB-seconds, priced per GiB-hour =
  1024 MiB × 3600 s): the same grouping, the same one rounding, from the exact seconds.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
SECONDS_PER_HOUR = Decimal(3600)
HOURS_PLACES = Decimal("0.000001")  # card-hours shown on a line (display only)
CARD, CORE, GIB = "card", "core", "gib"  # what a line bills (billing.models.Resource)
MIB_PER_GIB = Decimal(1024)
# Seconds of a resource's unit per priced hour: a core-hour is 3600 core-seconds, a GiB-hour
# 3600 × 1024 MiB-seconds.
PER_HOUR = {CORE: SECONDS_PER_HOUR, GIB: SECONDS_PER_HOUR * MIB_PER_GIB}


def money(amount: Decimal) -> Decimal:
    """The one rounding rule: half-up to 0.01. Negative amounts (credits) round the same way
    in magnitude (−0.005 → −0.01), so a credit mirrors the charge it offsets."""
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def display_hours(card_seconds: Decimal) -> Decimal:
    return (card_seconds / SECONDS_PER_HOUR).quantize(HOURS_PLACES, rounding=ROUND_HALF_UP)


@dataclass(frozen=True, slots=True)
class RatePeriod:
    """A price per card-hour valid in [valid_from, valid_until); ``valid_until`` None = open."""

    price: Decimal
    valid_from: datetime
    valid_until: datetime | None = None
    rate_id: int | None = None

    def covers(self, at: datetime) -> bool:
        return self.valid_from <= at and (self.valid_until is None or at < self.valid_until)


@dataclass(frozen=True, slots=True)
class Usage:
    """Card-seconds of one line key inside [start, end), which must lie in one rate period
    (the ledger is split at hours and rates change on the hour, so an hour always does)."""

    key: Hashable
    schedule: Hashable  # selects the rate periods, e.g. (flavor, tier)
    start: datetime
    end: datetime
    card_seconds: Decimal
    normalised_seconds: Decimal | None = None  # Σ card-seconds × relative throughput; None: n/a
    resource: str = CARD  # CORE / GIB: ``resource_seconds`` are core-/MiB-seconds beyond the share
    resource_seconds: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Line:
    key: Hashable
    schedule: Hashable
    period: RatePeriod | None  # None: no rate covers the usage (unpriced)
    card_seconds: Decimal
    start: datetime
    end: datetime
    normalised_card_seconds: Decimal | None = None
    price_normalised: bool = False  # the rate is per normalised card-hour
    resource: str = CARD
    resource_seconds: Decimal | None = None  # core-seconds (CORE) or MiB-seconds (GIB)

    @property
    def card_hours(self) -> Decimal:
        return display_hours(self.card_seconds)

    @property
    def core_seconds(self) -> Decimal | None:
        return self.resource_seconds if self.resource == CORE else None

    @property
    def mib_seconds(self) -> Decimal | None:
        return self.resource_seconds if self.resource == GIB else None

    @property
    def core_hours(self) -> Decimal | None:
        return None if self.core_seconds is None else display_hours(self.core_seconds)

    @property
    def gib_hours(self) -> Decimal | None:
        if self.mib_seconds is None:
            return None
        return (self.mib_seconds / PER_HOUR[GIB]).quantize(HOURS_PLACES, rounding=ROUND_HALF_UP)

    @property
    def normalised_card_hours(self) -> Decimal | None:
        if self.normalised_card_seconds is None:
            return None
        return display_hours(self.normalised_card_seconds)

    @property
    def priced_seconds(self) -> Decimal:
        """What the rate multiplies: core-/MiB-seconds on a CPU / memory line; normalised
        card-seconds when the centre prices them and the line has them, else plain card-seconds."""
        if self.resource != CARD:
            return self.resource_seconds or Decimal(0)
        if self.price_normalised and self.normalised_card_seconds is not None:
            return self.normalised_card_seconds
        return self.card_seconds

    @property
    def amount(self) -> Decimal | None:
        """Rounded from the exact (normalised) card-seconds, not from the displayed card-hours."""
        if self.period is None:
            return None
        return priced(self.priced_seconds, self.period.price, self.resource)


def priced(seconds: Decimal, price: Decimal, resource: str = CARD) -> Decimal:
    """``seconds`` of a resource (card-, core- or MiB-seconds) at ``price`` per its unit-hour, by
    the one rounding rule; the one division comes last."""
    return money(seconds * price / PER_HOUR.get(resource, SECONDS_PER_HOUR))


def periods_from(rates: Iterable[tuple[datetime, Decimal, int | None]]) -> list[RatePeriod]:
    """``(valid_from, price, id)`` rows of one schedule → consecutive half-open periods."""
    ordered = sorted(rates, key=lambda r: r[0])
    starts = [r[0] for r in ordered]
    if len(set(starts)) != len(starts):
        raise ValueError("two rates of one schedule start at the same instant")
    return [
        RatePeriod(price, valid_from, ordered[i + 1][0] if i + 1 < len(ordered) else None, rate_id)
        for i, (valid_from, price, rate_id) in enumerate(ordered)
    ]


def period_at(periods: Sequence[RatePeriod], at: datetime) -> RatePeriod | None:
    """The period covering ``at`` in a list made by ``periods_from`` (sorted, contiguous)."""
    index = bisect.bisect_right([p.valid_from for p in periods], at) - 1
    if index < 0:
        return None
    found = periods[index]
    return found if found.covers(at) else None


def price(
    usages: Iterable[Usage], schedules: Mapping[Hashable, Sequence[RatePeriod]], *, normalised: bool = False
) -> list[Line]:
    """Group usage into lines per (key, rate period) and price each line once — per normalised
    card-hour when ``normalised`` (the centre's setting) and the usage has normalised seconds.

    Raises ValueError if a usage straddles a rate change: it cannot be split without knowing
    how its card-seconds are spread over time, and guessing would misprice it."""
    groups: dict[tuple, list] = {}
    for usage in usages:
        periods = schedules.get(usage.schedule, ())
        period = period_at(periods, usage.start)
        if period is not None and period.valid_until is not None and usage.end > period.valid_until:
            raise ValueError(f"usage {usage.key!r} [{usage.start}, {usage.end}) spans a rate change")
        if period is None and periods and usage.end > periods[0].valid_from:
            raise ValueError(f"usage {usage.key!r} [{usage.start}, {usage.end}) spans a rate's start")
        group = groups.setdefault(
            (usage.key, usage.schedule, period),
            [Decimal(0), usage.start, usage.end, Decimal(0), usage.resource, Decimal(0)],
        )
        group[0] += usage.card_seconds
        group[1] = min(group[1], usage.start)
        group[2] = max(group[2], usage.end)
        # One usage without normalised seconds makes the whole line plain (None).
        group[3] = (
            None
            if group[3] is None or usage.normalised_seconds is None
            else (group[3] + usage.normalised_seconds)
        )
        group[5] += usage.resource_seconds or 0
    return [
        Line(key, schedule, period, seconds, start, end, norm, normalised, resource,
             None if resource == CARD else extra)
        for (key, schedule, period), (seconds, start, end, norm, resource, extra) in groups.items()
    ]


def total(lines: Iterable[Line]) -> Decimal:
    """Σ of the rounded line amounts (unpriced lines count as nothing)."""
    return sum((line.amount for line in lines if line.amount is not None), Decimal("0.00"))


def cost(card_hours: Decimal, price: Decimal) -> Decimal:
    """The price of ``card_hours`` at ``price`` per card-hour, rounded by the one rule — what a
    single statement line of that usage would say (the submission form's cost estimate)."""
    return money(card_hours * price)
