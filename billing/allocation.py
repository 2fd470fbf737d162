"""A job's event log → its allocation segments (DESIGN §7). Pure: no Django.

An allocation runs from the transition into ``running`` to the transition out of it
(succeeded, failed, cancelled, preempted, expired, lost): a preempted job keeps its GPUs
through its grace period, and ``preempted`` is recorded only when the backend says it has
exited. Inside an allocation a new segment starts whenever the tier (in-quota / on-loan) or
the worker count changes. Segments are half-open and cut only at event instants, so the
meter, which also cuts at every hour, produces the same rows whatever its watermark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

ADMITTED = "admitted"  # an admission: fresh tier and worker count for the next allocation
START = "start"  # transition into running
END = "end"  # transition out of running
TIER = "tier"  # the rule-1 split changed (an "on_loan" event)
WORKERS = "workers"  # elastic scaling changed the worker count (a "scaled" event)


# Instants may be datetimes or any other ordered values: the meter passes integer epoch
# microseconds, which it moves to and from PostgreSQL much faster than datetimes.
Instant = datetime | int


@dataclass(frozen=True, slots=True)
class Mark:
    at: Instant
    kind: str
    on_loan: bool | None = None
    workers: int | None = None
    flavor: int | None = None  # ADMITTED: the flavor this run was admitted on (None: the job's)


@dataclass(frozen=True, slots=True)
class Segment:
    start: Instant
    end: Instant
    on_loan: bool
    workers: int
    department: int | None = None  # set by ``by_owner``; None: the project never moved
    # The flavor the run was admitted on: a job with alternatives (DESIGN §14) may run on one,
    # be requeued and run on another — each run is charged on its own. None: the job's flavor.
    flavor: int | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """The project changed department at ``at`` (its effective-dated history)."""

    at: Instant
    from_department: int
    to_department: int


def segments(
    marks: Iterable[Mark], *, default_workers: int, until: Instant, since: Instant | None = None
) -> tuple[list[Segment], bool]:
    """The job's segments clipped to [since, until), and whether it still holds GPUs at
    ``until``. ``marks`` are in event order (at, id) and end before ``until``."""
    found: list[Segment] = []
    opened: Instant | None = None
    on_loan, workers, flavor = False, default_workers, None

    def close(at: Instant) -> None:
        if opened is not None and at > opened:
            found.append(Segment(opened, at, on_loan, workers, flavor=flavor))

    for mark in marks:
        if mark.kind == START:
            if opened is None:
                opened = mark.at
        elif mark.kind == END:
            close(mark.at)
            opened = None
        else:
            if mark.kind == ADMITTED:
                new_loan, new_workers = bool(mark.on_loan), mark.workers or default_workers
                flavor = mark.flavor  # a run's flavor is fixed at its admission (before its start)
            else:
                new_loan = on_loan if mark.on_loan is None else mark.on_loan
                new_workers = workers if not mark.workers else mark.workers
            if opened is not None and (new_loan, new_workers) != (on_loan, workers):
                close(mark.at)
                opened = mark.at
            on_loan, workers = new_loan, new_workers
    holding = opened is not None
    if holding:
        close(until)
    clipped = []
    for s in found:
        start = s.start if since is None else max(s.start, since)
        end = min(s.end, until)
        if end > start:
            clipped.append(Segment(start, end, s.on_loan, s.workers, flavor=s.flavor))
    return clipped, holding


def owner_at(moves: list[Move], at: Instant) -> int | None:
    """The department that owned the project at ``at``: the target of the last move at or before
    it, else the origin of the first move; None if the project never moved."""
    owner = moves[0].from_department if moves else None
    for move in moves:
        if move.at > at:
            break
        owner = move.to_department
    return owner


def by_owner(found: list[Segment], moves: list[Move]) -> list[Segment]:
    """``found`` cut at the project's moves, each piece naming the department that owned the
    project during it (DESIGN §7: usage is charged to the owner at the time of use). ``moves``
    are in order; a project that never moved keeps its segments, department None."""
    if not moves:
        return found
    pieces = []
    for s in found:
        cuts = [m.at for m in moves if s.start < m.at < s.end]
        for start, end in zip([s.start, *cuts], [*cuts, s.end], strict=True):
            pieces.append(Segment(start, end, s.on_loan, s.workers, owner_at(moves, start), s.flavor))
    return pieces
