"""Card fractions, exactly (DESIGN §2). Pure: no Django.

A flavor is a rational share of one physical card — 1/1 a whole card, 1/7 an A100 1g.10gb MIG
slice, 3/7 a 3g.40gb — stored as numerator / denominator. Card-seconds multiply integers and the
numerator first and divide by the denominator last, so seven 1/7 slices for an hour are exactly
3600 card-seconds of one card (a rounded 0.14285714 × 7 is 0.99999998).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from fractions import Fraction

MAX_DENOMINATOR = 64
# The old column kept 8 places: a decimal within half a unit of the 8th place of a fraction with a
# small denominator is that fraction (0.14285714 is 1/7); any other decimal must be exact.
DECIMAL_TOLERANCE = Fraction(1, 2 * 10**8)
CARD_SECONDS_PLACES = Decimal("0.000001")
MILLI = 1000
SYNTAX = "Enter a fraction such as 1/7, or a decimal such as 0.5."


class FractionError(ValueError):
    """Input that is not a card fraction. ``code`` says which rule it breaks (callers translate):
    "syntax", "inexact" (a decimal that is no small fraction), "range" or "denominator"."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def parse_card_fraction(value) -> Fraction:
    """``"1/7"``, ``"3/7"``, ``"1"``, ``"0.5"`` (or a Decimal/int/Fraction) → the exact fraction,
    0 < f ≤ 1 with a denominator of at most 64. Raises ``FractionError`` otherwise."""
    if isinstance(value, bool) or value is None:
        raise FractionError("syntax", SYNTAX)
    try:
        if isinstance(value, Fraction):
            fraction = value
        elif isinstance(value, str) and "/" in value:
            top, _slash, bottom = value.strip().partition("/")
            fraction = Fraction(int(top.strip()), int(bottom.strip()))
        else:
            fraction = _from_decimal(Decimal(str(value).strip()))
    except FractionError:
        raise
    except (ValueError, ZeroDivisionError, InvalidOperation):
        raise FractionError("syntax", SYNTAX) from None
    return check_card_fraction(fraction)


def _from_decimal(number: Decimal) -> Fraction:
    if not number.is_finite():
        raise ValueError(number)
    exact = Fraction(number)
    near = exact.limit_denominator(MAX_DENOMINATOR)
    if abs(near - exact) > DECIMAL_TOLERANCE:
        raise FractionError(
            "inexact",
            f"{number} is not a fraction of a card with a denominator of at most {MAX_DENOMINATOR}: "
            "write it as a fraction, e.g. 1/7."
        )
    return near


def check_card_fraction(fraction: Fraction) -> Fraction:
    if not 0 < fraction <= 1:
        raise FractionError("range", "A card fraction must be above 0 and at most 1 (a whole card).")
    if fraction.denominator > MAX_DENOMINATOR:
        raise FractionError("denominator", f"The denominator may be at most {MAX_DENOMINATOR}.")
    return fraction


def from_legacy_decimal(value: Decimal) -> Fraction:
    """The conversion of the old 8-place column (data migration): the nearest fraction with a
    denominator of at most 64."""
    return Fraction(str(value)).limit_denominator(MAX_DENOMINATOR)


def cards(devices, fraction: Fraction, gpu_milli: int | None = None) -> Fraction:
    """Whole-card equivalents of ``devices`` of the flavor (× gpu_milli/1000 for a shared
    request), exactly."""
    return Fraction(devices) * fraction * Fraction(gpu_milli or MILLI, MILLI)


def card_seconds(
    workers: int, gpus_per_worker: int, numerator: int, denominator: int, gpu_milli: int | None, seconds
) -> Decimal:
    """Card-seconds of an allocation: integers and the numerator first, the denominator last,
    rounded half-up to 1e-6 once (the ledger's precision)."""
    top = Decimal(workers * gpus_per_worker * numerator * (gpu_milli or MILLI)) * Decimal(seconds)
    return (top / Decimal(denominator * MILLI)).quantize(CARD_SECONDS_PLACES, rounding=ROUND_HALF_UP)


def times(amount: Decimal, fraction: Fraction) -> Decimal:
    """``amount`` (a Decimal) × the fraction, numerator first, divided last."""
    return amount * fraction.numerator / fraction.denominator


def label(numerator: int, denominator: int) -> str:
    """"1" for a whole card, "1/7" for a slice."""
    return str(numerator) if denominator == 1 else f"{numerator}/{denominator}"
