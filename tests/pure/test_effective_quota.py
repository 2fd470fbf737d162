"""Effective quota: windows in the site zone (wrapping midnight), loans half-open."""

from datetime import UTC, datetime, time
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from quotas.effective import Limits, LoanSpan, Window, effective_limits
from quotas.validation import Share, level_violations

SHANGHAI = ZoneInfo("Asia/Shanghai")
BASE = Limits(quota=Decimal(10), borrow_limit=None, lend_limit=Decimal(2))
NIGHT = Window(weekdays=frozenset({0, 1, 2, 3, 4}), start=time(20), end=time(8), lend_limit=Decimal(8))


def local(y, m, d, hh, mm=0):
    return datetime(y, m, d, hh, mm, tzinfo=SHANGHAI)


@pytest.mark.parametrize(
    ("at", "lend_limit"),
    [
        (local(2026, 12, 7, 19, 59), Decimal(2)),  # Monday before the window
        (local(2026, 12, 7, 20, 0), Decimal(8)),  # Monday 20:00: opens (inclusive)
        (local(2026, 12, 8, 7, 59), Decimal(8)),  # Tuesday early morning: Monday's window
        (local(2026, 12, 8, 8, 0), Decimal(2)),  # closes at 08:00 (exclusive)
        (local(2026, 12, 12, 21, 0), Decimal(2)),  # Saturday evening: not a window day
        (local(2026, 12, 12, 3, 0), Decimal(8)),  # Saturday 03:00 belongs to Friday's window
        (local(2026, 12, 14, 3, 0), Decimal(2)),  # Monday 03:00 would be Sunday's: none
    ],
)
def test_window_that_wraps_midnight_belongs_to_its_start_day(at, lend_limit):
    got = effective_limits(BASE, at=at.astimezone(UTC), zone=SHANGHAI, windows=[NIGHT])
    assert got.lend_limit == lend_limit
    assert got.quota == Decimal(10)


def test_window_is_read_in_the_site_zone_not_utc():
    # 12:30 UTC is 20:30 in Shanghai: inside the window although UTC says midday.
    at = datetime(2026, 12, 7, 12, 30, tzinfo=UTC)
    assert effective_limits(BASE, at=at, zone=SHANGHAI, windows=[NIGHT]).lend_limit == Decimal(8)
    assert effective_limits(BASE, at=at, zone=ZoneInfo("UTC"), windows=[NIGHT]).lend_limit == Decimal(2)


def test_loans_move_quota_only_within_their_half_open_interval():
    loan = LoanSpan(Decimal(3), local(2026, 12, 1, 0), local(2026, 12, 2, 0))
    before, start, last, end = (
        local(2026, 11, 30, 23, 59),
        local(2026, 12, 1, 0),
        local(2026, 12, 1, 23, 59),
        local(2026, 12, 2, 0),
    )
    for at, lender_q, borrower_q in ((before, 10, 10), (start, 7, 13), (last, 7, 13), (end, 10, 10)):
        assert effective_limits(BASE, at=at, zone=SHANGHAI, loans_out=[loan]).quota == Decimal(lender_q)
        assert effective_limits(BASE, at=at, zone=SHANGHAI, loans_in=[loan]).quota == Decimal(borrower_q)


def test_window_override_then_loans_apply_on_top():
    window = Window(frozenset(range(7)), time(0), time(23, 59), quota=Decimal(6))
    loan = LoanSpan(Decimal(2), local(2026, 12, 1, 0), local(2026, 12, 3, 0))
    got = effective_limits(BASE, at=local(2026, 12, 2, 12), zone=SHANGHAI, windows=[window], loans_out=[loan])
    assert got.quota == Decimal(4)
    assert got.lend_limit == Decimal(2)


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="aware"):
        effective_limits(BASE, at=datetime(2026, 12, 1), zone=SHANGHAI)


@pytest.mark.parametrize(
    ("parent", "ratio", "children", "rules"),
    [
        (8, 1, [(4, None), (4, None)], []),
        (8, 1, [(4, None), (5, None)], ["overcommit"]),
        (8, Decimal("1.5"), [(6, None), (6, None)], []),  # DESIGN §3 overcommit example
        (8, 2, [(8, 0), (8, 0)], ["unlendable"]),  # 16 never-lent units promised out of 8
        (8, 2, [(8, 4), (8, 4)], []),  # 4 + 4 never-lent fit in 8
        (8, 1, [(8, 9)], []),  # lend limit above quota: nothing held back
        (0, 1, [(1, None)], ["overcommit"]),  # a parent without quota cannot hand any out
    ],
)
def test_level_validation_rules(parent, ratio, children, rules):
    found = level_violations(
        Decimal(parent),
        Decimal(ratio),
        [Share(Decimal(q), None if lend is None else Decimal(lend)) for q, lend in children],
    )
    assert [v.rule for v in found] == rules
