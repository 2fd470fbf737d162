"""The autoscaler's pure decision: HPA's ceil(current × value / target), a 10 % tolerance,
clamped to [min, max], no change within the cool-down."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.scheduler.autoscale_decision import AT_MAX, AT_MIN, COOLDOWN, DOWN, STEADY, UP, decide

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def _decide(current, value, target, lo=1, hi=8, last=None, cooldown=300):
    return decide(
        current=current, value=Decimal(value), target=Decimal(target), minimum=lo, maximum=hi,
        last_scaled_at=last, now=NOW, cooldown_seconds=cooldown,
    )


@pytest.mark.parametrize(
    ("current", "value", "target", "desired", "code"),
    [
        (2, "100", "50", 4, UP),  # twice the target per replica: twice the replicas
        (2, "75", "50", 3, UP),  # ceil(2 × 1.5)
        (3, "51", "50", 3, STEADY),  # 2 % over: within the tolerance
        (3, "55", "50", 3, STEADY),  # exactly 10 % over: still within
        (3, "56", "50", 4, UP),  # 12 % over: ceil(3.36)
        (4, "45", "50", 4, STEADY),  # 10 % under
        (4, "20", "50", 2, DOWN),  # ceil(1.6)
        (4, "0", "50", 1, DOWN),  # no load at all: the minimum
        (2, "1000", "50", 8, UP),  # far over: the maximum
        (8, "80", "50", 8, AT_MAX),  # wants 13, holds at 8
        (1, "0", "50", 1, STEADY),  # idle at one replica: nothing to do
        (1, "0.5", "0.25", 2, UP),  # fractional figures
    ],
)
def test_hpa_rule_with_tolerance_and_clamp(current, value, target, desired, code):
    decision = _decide(current, value, target)
    assert (decision.desired, decision.code) == (desired, code)
    assert decision.change == (code in (UP, DOWN))


def test_the_minimum_holds_and_says_so():
    decision = _decide(3, "0", "50", lo=3)
    assert (decision.desired, decision.code, decision.params["minimum"]) == (3, AT_MIN, 3)
    assert _decide(5, "0", "50", lo=3).desired == 3  # above the minimum it comes down to it


def test_a_replica_count_outside_the_bounds_is_brought_inside():
    assert (_decide(10, "50", "50").desired, _decide(10, "50", "50").code) == (8, DOWN)
    assert (_decide(1, "50", "50", lo=2).desired, _decide(1, "50", "50", lo=2).code) == (2, UP)


def test_no_change_within_the_cool_down_in_either_direction():
    last = NOW - timedelta(seconds=299)
    up = _decide(2, "100", "50", last=last)
    assert (up.desired, up.code, up.params["wanted"]) == (2, COOLDOWN, 4)
    assert up.params["until"] == last + timedelta(seconds=300)
    down = _decide(4, "10", "50", last=last)
    assert (down.desired, down.code) == (4, COOLDOWN)
    # At the end of the cool-down (and after it) the change is made.
    assert _decide(2, "100", "50", last=NOW - timedelta(seconds=300)).desired == 4
    assert _decide(4, "10", "50", last=NOW - timedelta(hours=1)).desired == 1
    # A steady service reports steady, not cool-down.
    assert _decide(3, "50", "50", last=last).code == STEADY


def test_reason_parameters_are_plain_figures():
    decision = _decide(2, "75.50000", "50")
    assert decision.params == {"value": "75.5", "target": "50", "current": 2, "desired": 4}


@pytest.mark.parametrize(
    "bad",
    [
        {"current": 0}, {"target": Decimal(0)}, {"value": Decimal(-1)}, {"minimum": 0},
        {"minimum": 5, "maximum": 4},
    ],
)
def test_impossible_inputs_are_refused(bad):
    args = {"current": 2, "value": Decimal(1), "target": Decimal(1), "minimum": 1, "maximum": 4,
            "last_scaled_at": None, "now": NOW, "cooldown_seconds": 300} | bad
    with pytest.raises(ValueError):
        decide(**args)


@given(
    current=st.integers(1, 64),
    value=st.decimals(min_value=0, max_value=10**6, places=3),
    target=st.decimals(min_value=Decimal("0.001"), max_value=10**6, places=3),
    lo=st.integers(1, 16),
    span=st.integers(0, 48),
)
def test_desired_is_always_within_bounds_and_moves_toward_the_load(current, value, target, lo, span):
    hi = lo + span
    decision = decide(current=current, value=value, target=target, minimum=lo, maximum=hi,
                      last_scaled_at=None, now=NOW, cooldown_seconds=300)
    if lo <= current <= hi:
        assert lo <= decision.desired <= hi
    if decision.code == UP:
        assert decision.desired > current and (value > target or current < lo)
    if decision.code == DOWN:
        assert decision.desired < current and (value < target or current > hi)
