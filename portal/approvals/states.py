"""The one table of allowed transitions of approval requests and of their steps. Pure.

Terminal states are terminal; every change in ``portal.approvals.services`` is a conditional
UPDATE from a state this table allows, so two approvers (or an approver and the deadline task)
acting at once give exactly one outcome."""

from __future__ import annotations

REQUEST_TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"approved", "rejected", "expired", "cancelled"}),
    "approved": frozenset(),
    "rejected": frozenset(),
    "expired": frozenset(),
    "cancelled": frozenset(),
}

STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    # A later step waits; it opens when the one before is approved, or is skipped when the
    # request ends first (or an identical approver already covers it).
    "waiting": frozenset({"pending", "skipped"}),
    "pending": frozenset({"approved", "rejected", "escalated", "expired", "skipped"}),
    "approved": frozenset(),
    "rejected": frozenset(),
    "escalated": frozenset(),
    "expired": frozenset(),
    "skipped": frozenset(),
}

REQUEST_TERMINAL = frozenset(s for s, targets in REQUEST_TRANSITIONS.items() if not targets)
STEP_TERMINAL = frozenset(s for s, targets in STEP_TRANSITIONS.items() if not targets)


def sources_of(table: dict[str, frozenset[str]], target: str) -> list[str]:
    """The states from which ``target`` may be reached: the WHERE of a conditional update."""
    return [source for source, targets in table.items() if target in targets]
