"""The pure pricing core: rate periods, the split of a line at a rate change, one rounding rule."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from billing import pricing
from billing.pricing import RatePeriod, Usage, money

T0 = datetime(2026, 10, 31, 16, tzinfo=UTC)  # 2026-11-01 00:00 Asia/Shanghai
H = timedelta(hours=1)


def _usage(key, hour, seconds, schedule=("A100", "standard")):
    return Usage(key, schedule, T0 + hour * H, T0 + (hour + 1) * H, Decimal(seconds))


@pytest.mark.parametrize(
    ("amount", "rounded"),
    [
        ("0.005", "0.01"),
        ("0.004999", "0.00"),
        ("1.115", "1.12"),
        ("2.675", "2.68"),  # a float would make this 2.67
        ("-0.005", "-0.01"),  # credits mirror charges
        ("-1.114", "-1.11"),
        ("0", "0.00"),
    ],
)
def test_money_rounds_half_up_to_the_cent(amount, rounded):
    assert money(Decimal(amount)) == Decimal(rounded)


def test_periods_are_half_open_until_the_next_rate():
    periods = pricing.periods_from([(T0 + 10 * H, Decimal("10"), 2), (T0, Decimal("12"), 1)])
    assert [p.rate_id for p in periods] == [1, 2]
    assert periods[0].valid_until == T0 + 10 * H and periods[1].valid_until is None
    assert pricing.period_at(periods, T0 - H) is None
    assert pricing.period_at(periods, T0).rate_id == 1
    assert pricing.period_at(periods, T0 + 10 * H - timedelta(microseconds=1)).rate_id == 1
    assert pricing.period_at(periods, T0 + 10 * H).rate_id == 2


def test_two_rates_of_one_schedule_cannot_start_together():
    with pytest.raises(ValueError, match="same instant"):
        pricing.periods_from([(T0, Decimal(1), 1), (T0, Decimal(2), 2)])


def test_a_line_spanning_a_rate_change_is_split_at_the_change():
    schedules = {
        ("A100", "standard"): pricing.periods_from([(T0, Decimal("12"), 1), (T0 + 3 * H, Decimal("10"), 2)])
    }
    usages = [_usage("p1", h, 3600) for h in range(6)]  # one card for six hours
    lines = sorted(pricing.price(usages, schedules), key=lambda ln: ln.start)
    assert [(ln.period.rate_id, ln.card_hours, ln.amount) for ln in lines] == [
        (1, Decimal("3.000000"), Decimal("36.00")),
        (2, Decimal("3.000000"), Decimal("30.00")),
    ]
    assert (lines[0].start, lines[0].end, lines[1].start, lines[1].end) == (
        T0,
        T0 + 3 * H,
        T0 + 3 * H,
        T0 + 6 * H,
    )
    assert pricing.total(lines) == Decimal("66.00")


def test_each_line_is_rounded_once_and_the_total_is_the_sum_of_rounded_lines():
    schedules = {("A100", "standard"): pricing.periods_from([(T0, Decimal("0.01"), 1)])}
    # Three lines of 0.5 card-hour at 0.01/card-hour = 0.005 each → 0.01 each (half-up), total 0.03,
    # whereas rounding the unrounded sum 0.015 would give 0.02.
    usages = [_usage(key, 0, 1800) for key in ("a", "b", "c")]
    lines = pricing.price(usages, schedules)
    assert [ln.amount for ln in lines] == [Decimal("0.01")] * 3
    assert pricing.total(lines) == Decimal("0.03")


def test_the_amount_uses_exact_card_seconds_not_the_displayed_hours():
    schedules = {("A100", "standard"): pricing.periods_from([(T0, Decimal("9999.0000"), 1)])}
    line = pricing.price([_usage("a", 0, "0.0018")], schedules)[0]  # 5e-7 card-hours
    assert line.card_hours == Decimal("0.000001")  # display rounds 5e-7 up
    assert line.amount == Decimal("0.00")  # 0.0049995 → 0.00


def test_usage_without_a_rate_is_an_unpriced_line():
    lines = pricing.price([_usage("a", 0, 3600)], {})
    assert lines[0].period is None and lines[0].amount is None
    assert pricing.total(lines) == Decimal("0.00")


def test_a_usage_straddling_a_rate_change_is_refused():
    schedules = {
        ("A100", "standard"): pricing.periods_from([(T0, Decimal(1), 1), (T0 + H / 2, Decimal(2), 2)])
    }
    with pytest.raises(ValueError, match="spans a rate change"):
        pricing.price([_usage("a", 0, 3600)], schedules)
    late = {("A100", "standard"): pricing.periods_from([(T0 + H / 2, Decimal(2), 2)])}
    with pytest.raises(ValueError, match="spans a rate's start"):
        pricing.price([_usage("a", 0, 3600)], late)


@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(0, 47), st.integers(0, 3600 * 64)),
        min_size=1,
        max_size=60,
    ),
    st.lists(st.integers(1, 47), max_size=4, unique=True),
    st.lists(st.decimals("0", "99.9999", places=4), min_size=5, max_size=5),
)
def test_pricing_keeps_every_card_second_and_prices_each_line_from_its_period(rows, changes, prices):
    starts = [0, *sorted(changes)]
    periods = pricing.periods_from([(T0 + s * H, prices[i], i) for i, s in enumerate(starts)])
    usages = [_usage(key, hour, seconds) for key, hour, seconds in rows]
    lines = pricing.price(usages, {("A100", "standard"): periods})
    assert sum(ln.card_seconds for ln in lines) == sum(u.card_seconds for u in usages)
    assert len({(ln.key, ln.period) for ln in lines}) == len(lines)
    for ln in lines:
        assert ln.period.covers(ln.start) and (
            ln.period.valid_until is None or ln.end <= ln.period.valid_until
        )
        assert ln.amount == money(ln.card_seconds * ln.period.price / 3600)
    assert pricing.total(lines) == sum(ln.amount for ln in lines)
    assert isinstance(RatePeriod(Decimal(1), T0), RatePeriod)
