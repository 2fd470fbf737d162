"""A stopped clock for tests whose figures depend on where in the month "now" falls (budgets,
this month's estimate). They run at a pinned instant — the middle of a month, a working morning
in the site zone — instead of reading the wall clock and skipping during the first minutes or
hours of a real month (issue 32 item 14: on the 1st such tests silently did not run).

Services that take ``now`` get it passed; what reads the clock itself (a submission's approval
check, the budgets' decisive figure, the pages) calls ``django.utils.timezone.now``, which the
fixture stops at the pinned instant for the test (and a live server's thread in the same process).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.utils import timezone

from quotas.selectors import site_zone


def pinned_instant() -> datetime:
    """2026-11-20 10:30 in the site zone, in UTC as ``timezone.now`` returns it."""
    return datetime(2026, 11, 20, 10, 30, tzinfo=site_zone()).astimezone(UTC)


def set_clock(monkeypatch, at: datetime) -> datetime:
    """Stop ``timezone.now`` at ``at`` (a test moves a stopped clock on with this too)."""
    monkeypatch.setattr(timezone, "now", lambda: at)
    return at


@pytest.fixture
def pinned_now(monkeypatch) -> datetime:
    return set_clock(monkeypatch, pinned_instant())
