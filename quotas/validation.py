"""Quota-tree consistency at one level (DESIGN §3, "Validation when quotas are edited").
Pure: callers load the numbers; this decides and explains."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal


@dataclass(frozen=True, slots=True)
class Share:
    quota: Decimal
    lend_limit: Decimal | None = None

    @property
    def never_lent(self) -> Decimal:
        """The part of the quota that is never lent: q − l, and 0 when all may be lent."""
        if self.lend_limit is None:
            return Decimal(0)
        return max(self.quota - self.lend_limit, Decimal(0))


@dataclass(frozen=True, slots=True)
class Violation:
    rule: str  # "overcommit" or "unlendable"
    total: Decimal
    limit: Decimal


def level_violations(
    parent_quota: Decimal, overcommit_ratio: Decimal, children: Iterable[Share]
) -> list[Violation]:
    """Σ q(children) ≤ ratio × q(parent) and Σ (q − l)(children) ≤ q(parent).

    At the pool root ``parent_quota`` is the healthy capacity and the ratio the pool's."""
    children = list(children)
    found = []
    total = sum((c.quota for c in children), Decimal(0))
    limit = overcommit_ratio * parent_quota
    if total > limit:
        found.append(Violation("overcommit", total, limit))
    kept = sum((c.never_lent for c in children), Decimal(0))
    if kept > parent_quota:
        found.append(Violation("unlendable", kept, parent_quota))
    return found
