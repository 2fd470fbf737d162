"""Queueing strategies per project (issue 25 item 4): strict FIFO and the aging bound.

``best_effort`` (the default) is the cycle as it always was: inside a priority level, a later
job of a project that fits goes ahead of an earlier one that does not (Kueue's
``BestEffortFIFO``). So a 64-GPU job waiting for its project's quota can wait for ever behind a
stream of 1-GPU jobs of the same project: each GPU the project frees is taken again at once by
a small job, and a job waiting for quota gets no reservation.

``strict_fifo`` (Kueue's ``StrictFIFO``): a job that cannot be admitted — for quota or for
capacity — blocks the later jobs of its project in its priority level that could use one of its
flavors. Its project's quota then drains to it, and, waiting for capacity, it gets a
reservation of its own (the project's head) even when it is not the level's head: blocking its
own project frees nothing for it while other projects' jobs take the GPUs.

The **aging bound**: a job of a best-effort project that has waited longer than the bound
(since its submission) is treated as strict: it blocks the later jobs of its project the same
way and gets a reservation, so no job starves for ever.

What does not block (it would stall its project for good, or it is not in the queue at all):
a job held by a spent budget, and a job that can never be admitted under the current limits,
whatever runs — a worker larger than any node, a request above its project's (or an
ancestor's) quota + borrow limit (above its quota without borrowing), above the flavor's
capacity, or a gang larger than every cluster.

Flavors: quota and capacity are per flavor, so a blocker blocks only later jobs that could run
on one of its flavors (a job with alternatives blocks, and is blocked, on any of them).
Priority levels: only the blocker's own level — a higher level is decided first anyway, and a
lower level's job of the project cannot hold it back for long: rule 6 lets the blocker preempt
it when it is preemptible (Kueue, whose queue is ordered by priority, blocks lower levels too;
see docs/scheduling.md).
"""

from __future__ import annotations

from jobs.scheduler.engine.pool import FULL
from jobs.scheduler.engine.state import Pending, State, SubQueue

STRICT, AGING = "strict_fifo", "aging"
# Reservations of blockers that are not their level's head, per cycle, in the cycle's order
# (levels, then dominant share): each costs a timeline search and slows every later backfill
# test, as Slurm bounds its backfill with bf_max_job_test. A blocker past the cap still blocks
# its project; it gets its reservation in a later cycle, once earlier ones have started.
MAX_OWN_RESERVATIONS = 16


def held_to_fifo(s: State, proj: int, p: Pending) -> str | None:
    """STRICT when the project is strict, AGING when ``p`` is over its aging bound, else None."""
    if proj in s.strict:
        return STRICT
    bound = s.bound(proj)
    if bound is not None and s.now - p.submitted > bound:
        return AGING
    return None


def waited(s: State, p: Pending) -> tuple[int, int] | None:
    """(seconds waited, bound) for a job over its aging bound, else None."""
    bound = s.bound(p.proj)
    if bound is None or s.now - p.submitted <= bound:
        return None
    return int(s.now - p.submitted), int(bound)


_FLAVORS: dict[str, frozenset[str]] = {}


def flavor_set(home: str) -> frozenset[str]:
    found = _FLAVORS.get(home)
    if found is None:
        found = _FLAVORS[home] = frozenset(home.split("|"))
    return found


class Blockers:
    """The jobs of one cycle that block their project: (priority, project) -> entries
    (submitted, id, flavors, why)."""

    __slots__ = ("by",)

    def __init__(self) -> None:
        self.by: dict[tuple[int, int], list[tuple[float, str, frozenset[str], str]]] = {}

    def add(self, sq: SubQueue, p: Pending, why: str) -> None:
        self.by.setdefault((sq.priority, sq.proj), []).append(
            (p.submitted, p.id, flavor_set(sq.flavor), why))

    def behind(self, priority: int, proj: int, home: str, submitted: float, jid: str):
        """The earliest blocker of the project and level that is before (submitted, jid) and
        shares a flavor with ``home``; None when nothing blocks."""
        entries = self.by.get((priority, proj))
        if not entries:
            return None
        flavors = flavor_set(home)
        key = (submitted, jid)
        found = None
        for e in entries:
            if (e[0], e[1]) < key and e[2] & flavors and (found is None or e[:2] < found[:2]):
                found = e
        return found


def hopeless(cycle, p: Pending) -> bool:
    """Can ``p`` never be admitted under the current limits, whatever runs? On every flavor."""
    flavors = p.flavors or (p.flavor,)
    try:
        for f in flavors:
            p.flavor = f
            if not _hopeless_on(cycle, p):
                return False
    finally:
        if p.flavors:
            p.flavor = p.flavors[0]
    return True


def _hopeless_on(cycle, p: Pending) -> bool:
    if cycle.invalid(p):
        return True
    s = cycle.s
    ledger, pool = s.ledgers[p.flavor], s.pools[p.flavor]
    r = p.min_workers * p.milli
    if r > ledger.capacity:
        return True
    limit = ledger.cap if cycle.borrowing else ledger.quota
    if any(r > limit[n] for n in p.path):
        return True
    if pool.chist is None or p.milli < FULL:
        return False
    return pool.largest_cluster(p.pmilli // FULL) < p.min_workers
