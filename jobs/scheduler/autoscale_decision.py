"""The autoscaler's decision for an inference job (docs/scheduling.md "Autoscaling"): pure, no
Django, no clock — the caller passes ``now``.

Kubernetes' HorizontalPodAutoscaler rule: with ``current`` replicas each carrying ``value`` (the
query's per-replica figure) and a target of ``target`` per replica, the service wants
``ceil(current × value / target)`` replicas, unless ``value / target`` is within ``TOLERANCE`` of
1 (no change for a small wobble). The result is clamped to ``[minimum, maximum]``, and nothing
changes while the last change is younger than the cool-down (both directions: a scale-up right
after a scale-down is as disruptive as the reverse).

Reasons are codes with parameters; the caller turns them into messages for people.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

TOLERANCE = Decimal("0.1")

# Reason codes.
UP = "up"
DOWN = "down"
STEADY = "steady"  # within the tolerance
AT_MAX = "at_max"  # wants more but is at its maximum
AT_MIN = "at_min"  # wants fewer but is at its minimum
COOLDOWN = "cooldown"


@dataclass(frozen=True)
class Decision:
    desired: int
    code: str
    params: dict = field(default_factory=dict)

    @property
    def change(self) -> bool:
        return self.code in (UP, DOWN)


def decide(
    *,
    current: int,
    value: Decimal,
    target: Decimal,
    minimum: int,
    maximum: int,
    last_scaled_at: datetime | None,
    now: datetime,
    cooldown_seconds: int,
) -> Decision:
    """How many replicas the service should run, and why. ``current`` ≥ 1 replicas now,
    ``value`` ≥ 0 the per-replica metric, ``target`` > 0."""
    if current < 1 or target <= 0 or value < 0 or not 1 <= minimum <= maximum:
        raise ValueError("current ≥ 1, target > 0, value ≥ 0 and 1 ≤ minimum ≤ maximum")
    ratio = value / target
    if abs(ratio - 1) <= TOLERANCE:
        wanted = current
    else:
        wanted = max(1, math.ceil(current * ratio))
    desired = min(max(wanted, minimum), maximum)
    params = {"value": figure(value), "target": figure(target), "current": current, "desired": desired}
    if desired == current:
        if wanted > maximum:
            return Decision(current, AT_MAX, params | {"maximum": maximum})
        if wanted < minimum:
            return Decision(current, AT_MIN, params | {"minimum": minimum})
        return Decision(current, STEADY, params)
    if last_scaled_at is not None:
        until = last_scaled_at + timedelta(seconds=cooldown_seconds)
        if now < until:
            return Decision(current, COOLDOWN, params | {"wanted": desired, "until": until})
    return Decision(desired, UP if desired > current else DOWN, params)


def figure(value: Decimal) -> str:
    """A metric value for a reason: at most 3 decimals, no exponent, no trailing zeros."""
    return f"{float(value):.3f}".rstrip("0").rstrip(".")
