"""Calendar months and hours in the site time zone (DESIGN §7). Pure: no Django.

Storage is UTC; a month is the half-open interval from local midnight of its first day to
local midnight of the next month's first day, and every such instant is also a local hour
boundary — so a ledger split at hours is split at months too.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
HOUR = timedelta(hours=1)
# The months the portal knows: a month past 9999-11 has no end (date(10000, 1, 1) raises), and no
# usage, rate or statement of ours is from before 2000 or after 2100. The same range bounds every
# date-time a user gives (portal/daterange.py); docs/billing.md.
FIRST_MONTH = date(2000, 1, 1)
LAST_MONTH = date(2100, 12, 1)


class MonthOutOfRange(ValueError):
    """A well-formed month outside FIRST_MONTH..LAST_MONTH."""


def parse_month(text: str) -> date:
    """``"2026-11"`` → ``date(2026, 11, 1)``; anything else raises ValueError with a message
    a person can act on (``MonthOutOfRange`` for a real month outside the portal's range)."""
    found = _MONTH.match(text.strip()) if isinstance(text, str) else None
    if not found:
        raise ValueError(f"{str(text)[:20]!r} is not a month: use YYYY-MM, e.g. 2026-11.")
    year, month = int(found.group(1)), int(found.group(2))
    if not 1 <= month <= 12:
        raise ValueError(f"{text!r} is not a month: use YYYY-MM with a month 01–12.")
    if not FIRST_MONTH.year <= year <= LAST_MONTH.year:  # before date(): year 0 raises too
        raise MonthOutOfRange(
            f"{text.strip()!r} is out of range: months run from {month_label(FIRST_MONTH)} "
            f"to {month_label(LAST_MONTH)}."
        )
    return date(year, month, 1)


def month_label(month: date) -> str:
    return f"{month.year:04d}-{month.month:02d}"


def next_month(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def previous_month(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def month_start(month: date, zone: ZoneInfo) -> datetime:
    """The instant (UTC) at which ``month`` begins in ``zone``."""
    return datetime(month.year, month.month, 1, tzinfo=zone).astimezone(UTC)


def month_bounds(month: date, zone: ZoneInfo) -> tuple[datetime, datetime]:
    return month_start(month, zone), month_start(next_month(month), zone)


def month_of(at: datetime, zone: ZoneInfo) -> date:
    local = at.astimezone(zone)
    return date(local.year, local.month, 1)


def floor_hour(at: datetime, zone: ZoneInfo) -> datetime:
    """The start of the local hour containing ``at`` (as PostgreSQL's date_trunc('hour', at, zone))."""
    if at.tzinfo is None:
        raise ValueError("floor_hour needs an aware datetime")
    local = at.astimezone(zone).replace(minute=0, second=0, microsecond=0)
    return local.astimezone(UTC)


def is_hour_boundary(at: datetime, zone: ZoneInfo) -> bool:
    return floor_hour(at, zone) == at
