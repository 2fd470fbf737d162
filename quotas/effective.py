"""Effective quota of a tree node at an instant: base values, then a quota window's
override, then active loans (DESIGN §3.7, §3.8). Pure: no Django; the caller passes an
aware ``at`` and the site zone, so the result depends on nothing but its arguments.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, time, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo


@dataclass(frozen=True, slots=True)
class Limits:
    quota: Decimal
    borrow_limit: Decimal | None = None
    lend_limit: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Window:
    weekdays: frozenset[int]  # 0 = Monday, as datetime.weekday()
    start: time
    end: time
    quota: Decimal | None = None
    lend_limit: Decimal | None = None

    def covers(self, local: datetime) -> bool:
        clock = local.time().replace(tzinfo=None)
        if self.start < self.end:
            return local.weekday() in self.weekdays and self.start <= clock < self.end
        # Wraps midnight: the part after midnight belongs to the previous day's window.
        if clock >= self.start:
            return local.weekday() in self.weekdays
        previous_day = (local - timedelta(days=1)).weekday()
        return clock < self.end and previous_day in self.weekdays


@dataclass(frozen=True, slots=True)
class LoanSpan:
    amount: Decimal
    starts_at: datetime
    ends_at: datetime

    def active_at(self, at: datetime) -> bool:
        return self.starts_at <= at < self.ends_at  # half-open: returned at ends_at


def effective_limits(
    base: Limits,
    *,
    at: datetime,
    zone: ZoneInfo,
    windows: Iterable[Window] = (),
    loans_out: Iterable[LoanSpan] = (),
    loans_in: Iterable[LoanSpan] = (),
) -> Limits:
    """Window overrides first (the first covering window in the given order wins), then
    loans move quota from lender to borrower while they are active."""
    if at.tzinfo is None:
        raise ValueError("effective_limits needs an aware datetime")
    limits = base
    local = at.astimezone(zone)
    for window in windows:
        if window.covers(local):
            limits = replace(
                limits,
                quota=limits.quota if window.quota is None else window.quota,
                lend_limit=limits.lend_limit if window.lend_limit is None else window.lend_limit,
            )
            break
    moved = sum((loan.amount for loan in loans_in if loan.active_at(at)), Decimal(0)) - sum(
        (loan.amount for loan in loans_out if loan.active_at(at)), Decimal(0)
    )
    return replace(limits, quota=limits.quota + moved) if moved else limits
