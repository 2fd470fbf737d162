"""The budget burn-down forecast (docs/billing.md "Budgets"). Pure: no Django, no database.

* The **window** is the last 7 days: from the site-zone midnight 7 days before today's up to
  now (7 whole days and today so far), or from the month's start if that is later (early in the
  month: the days of the month so far).
* The **rate** is what was used in the window divided by its length.
* **Projected** at month end = used so far + rate × the time left to the month's end.
* The budget **runs out** when used + rate × t reaches the limit: that instant if it lies before
  the month's end, else not this month (None). A budget already spent ran out now or earlier.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

WINDOW_DAYS = 7
DAY_US = Decimal(86_400_000_000)


def window_start(now: datetime, month_start: datetime, zone: ZoneInfo) -> datetime:
    """The start of the rate window: local midnight ``WINDOW_DAYS`` days before today's, or
    the month's start if that is later."""
    local = now.astimezone(zone)
    midnight = datetime(local.year, local.month, local.day, tzinfo=zone) - timedelta(days=WINDOW_DAYS)
    return max(midnight.astimezone(month_start.tzinfo), month_start)


@dataclass(frozen=True)
class Forecast:
    used: Decimal
    window_start: datetime
    rate_per_day: Decimal  # exact: used in the window ÷ its length in days
    projected: Decimal  # at the month's end, unrounded (the caller rounds for its unit)
    runs_out_at: datetime | None  # None: not this month (or no limit)
    spent: bool  # the limit is already reached
    at: datetime  # now
    month_end: datetime


def forecast(
    *,
    used: Decimal,
    used_before_window: Decimal,
    start: datetime,
    now: datetime,
    month_end: datetime,
    limit: Decimal | None,
) -> Forecast:
    """The projection of ``used`` (at ``now``) to ``month_end`` at the rate of the window that
    began at ``start`` (``used_before_window`` had been used by then)."""
    elapsed = Decimal((now - start) // timedelta(microseconds=1))
    left = Decimal((month_end - now) // timedelta(microseconds=1)) if month_end > now else Decimal(0)
    grown = max(used - used_before_window, Decimal(0)) if elapsed > 0 else Decimal(0)
    # Products first, the one division last: a whole rate stays whole.
    per_day = grown * DAY_US / elapsed if elapsed > 0 else Decimal(0)
    projected = used + (grown * left / elapsed if elapsed > 0 else Decimal(0))
    spent = limit is not None and used >= limit
    runs_out = None
    if limit is not None and spent:
        runs_out = now
    elif limit is not None and grown > 0:
        needed = (limit - used) * elapsed / grown  # microseconds
        if needed < left:
            runs_out = now + timedelta(microseconds=int(needed))
    return Forecast(used, start, per_day, projected, runs_out, spent, now, month_end)
