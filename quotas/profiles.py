"""Accelerator profiles (DESIGN §14): the rules a flavor's declared relative throughput and
operator coverage follow. Pure: no Django — the model's ``clean()``, the flavor API and the
Django admin all call ``profile_problems`` and turn its codes into translated messages.

Operator coverage is stored as JSON, one entry per framework::

    {"pytorch": {"coverage": "0.93", "source": "vendor operator list v8.0", "date": "2026-06-01"}}

``coverage`` is a decimal *string* in 0..1 (a JSON float would not survive 0.1 + 0.2 exactly),
``source`` says where the number comes from, ``date`` (ISO, not in the future) when it was taken.
A relative throughput other than 1 needs a source and a date as well; the reference card's 1.0 is
a definition, not a measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal, InvalidOperation

ENTRY_KEYS = frozenset({"coverage", "source", "date"})
FRAMEWORK = re.compile(r"^[a-z][a-z0-9_.+-]{0,39}$")  # a job's ``framework`` (40 characters)
COVERAGE_PLACES = 3
SOURCE_MAX = 300
# The industry bar for a domestic card (DESIGN §14): ≥ 90 % of mainstream operators, ≥ 80 % of
# the reference card's throughput.
COVERAGE_BAR = Decimal("0.9")
THROUGHPUT_BAR = Decimal("0.8")
DOMESTIC_VENDORS = ("huawei", "cambricon", "hygon")


@dataclass(frozen=True, slots=True)
class Problem:
    field: str  # "operator_coverage", "relative_throughput_source", "relative_throughput_date"
    code: str  # "not_object", "framework", "keys", "coverage", "source", "date", "future", …
    params: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Coverage:
    framework: str
    coverage: Decimal
    source: str
    date: date


def parse_date(value) -> date | None:
    if isinstance(value, date):
        return value
    if not isinstance(value, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        return None


def parse_coverage(value) -> Decimal | None:
    """A share 0..1 with at most three decimals, given as a string; None when it is not one."""
    if not isinstance(value, str):
        return None
    try:
        number = Decimal(value.strip())
    except InvalidOperation:
        return None
    if not number.is_finite() or number < 0 or number > 1:
        return None
    if number.as_tuple().exponent < -COVERAGE_PLACES and number != round(number, COVERAGE_PLACES):
        return None
    return number


def coverage_problems(raw, *, today: date) -> list[Problem]:
    if not isinstance(raw, dict):
        return [Problem("operator_coverage", "not_object")]
    found: list[Problem] = []
    for framework, entry in sorted(raw.items(), key=lambda kv: str(kv[0])):
        found += _entry_problems(framework, entry, today)
    return found


def _entry_problems(framework, entry, today: date) -> list[Problem]:
    where = {"framework": str(framework)}
    if not isinstance(framework, str) or not FRAMEWORK.match(framework):
        return [Problem("operator_coverage", "framework", where)]
    if not isinstance(entry, dict) or set(entry) != ENTRY_KEYS:
        return [Problem("operator_coverage", "keys", where)]
    found = []
    if parse_coverage(entry["coverage"]) is None:
        found.append(Problem("operator_coverage", "coverage", where))
    if (
        not isinstance(entry["source"], str)
        or not entry["source"].strip()
        or len(entry["source"]) > SOURCE_MAX
    ):
        found.append(Problem("operator_coverage", "source", where))
    taken = parse_date(entry["date"])
    if taken is None:
        found.append(Problem("operator_coverage", "date", where))
    elif taken > today:
        found.append(Problem("operator_coverage", "future", where))
    return found


def throughput_problems(
    relative_throughput: Decimal, source: str, taken: date | None, *, today: date
) -> list[Problem]:
    found = []
    declared = relative_throughput is not None and relative_throughput != 1
    if (declared or taken is not None) and not (source or "").strip():
        found.append(Problem("relative_throughput_source", "source"))
    if (declared or (source or "").strip()) and taken is None:
        found.append(Problem("relative_throughput_date", "date"))
    if taken is not None and taken > today:
        found.append(Problem("relative_throughput_date", "future"))
    return found


def profile_problems(
    *, relative_throughput: Decimal, source: str, taken: date | None, operator_coverage, today: date
) -> list[Problem]:
    """Everything wrong with a flavor's profile (empty: valid)."""
    return throughput_problems(relative_throughput, source, taken, today=today) + coverage_problems(
        operator_coverage, today=today
    )


def coverages(raw) -> list[Coverage]:
    """The valid entries of a stored ``operator_coverage``, by framework (invalid ones skipped:
    they cannot be saved through ``clean()``, but a raw update could have written them)."""
    found = []
    for framework, entry in sorted((raw or {}).items()) if isinstance(raw, dict) else ():
        if not isinstance(entry, dict):
            continue
        share, taken = parse_coverage(entry.get("coverage")), parse_date(entry.get("date"))
        if share is not None and taken is not None:
            found.append(Coverage(framework, share, str(entry.get("source", "")), taken))
    return found
