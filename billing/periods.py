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


def parse_month(text: str) -> date:
    """``"2026-11"`` → ``date(2026, 11, 1)``; anything else raises ValueError with a message
    a person can act on."""
    found = _MONTH.match(text.strip()) if isinstance(text, str) else None
    if not found:
        raise ValueError(f"{str(text)[:20]!r} is not a month: use YYYY-MM, e.g. 2026-11.")
    year, month = int(found.group(1)), int(found.group(2))
    if not 1 <= month <= 12 or year < 2000:
        raise ValueError(f"{text!r} is not a month: use YYYY-MM with a month 01–12.")
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
