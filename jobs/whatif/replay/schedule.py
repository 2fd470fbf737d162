"""When a replay's limits change (pure: no Django): the instants a day's window edges and the
loans give, and the limits at each of them keeping only real changes — the one schedule of the
what-if page (billing/whatif.py), a recorded history (jobs.whatif.replay.limits) and a policy's night
window (jobs.whatif.replay.policy)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from quotas.effective import LoanSpan


def edge_instants(start: datetime, horizon: float, zone: ZoneInfo, clocks: Iterable[time],
                  loans: Iterable[LoanSpan]) -> list[datetime]:
    """Every instant limits may change from ``start`` over ``horizon`` seconds: the windows'
    edges (``clocks``, times of day in ``zone``) on every day covered — from the day before, as
    a window may open the evening before — and the loans' starts and ends."""
    clocks = set(clocks)
    first = start.astimezone(zone).date() - timedelta(days=1)
    found: set[datetime] = set()
    for d in range(int(horizon // 86400) + 3):
        day = first + timedelta(days=d)
        found |= {datetime.combine(day, c, tzinfo=zone) for c in clocks}
    for span in loans:
        found |= {span.starts_at, span.ends_at}
    return sorted(found)


def limit_schedule(limits_at: Callable[[datetime], dict], start: datetime, instants: Iterable[datetime],
                   horizon: float) -> tuple[dict, tuple[tuple[float, dict], ...]]:
    """The limits at ``start`` and each change after it, ``(seconds after start, limits)``, up
    to ``horizon``: an instant whose limits equal the previous ones is no change."""
    first = limits_at(start)
    changes, last = [], first
    for at in instants:
        t = (at - start).total_seconds()
        if t <= 0 or t > horizon:
            continue
        now = limits_at(at)
        if now != last:
            changes.append((t, now))
            last = now
    return first, tuple(changes)
