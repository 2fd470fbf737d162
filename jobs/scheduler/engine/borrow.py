"""Borrowing after in-quota demand, within one cycle.

A cycle first serves in-quota demand in the §5.1 order; a job that could only run on loan is
*promised* its room (counted here, so later borrowers and its project's fair share see it) and
placed in the borrowing phase after the last priority level, in the order it was promised.

Why: rule 5 lets any in-quota job reclaim on-loan capacity, whatever the priorities. Admitting a
borrower first and reclaiming it later in the same cycle ends in the same place, but wastes the
reclaimed job's leftover GPUs for the cycle (they look busy until it "exits") and costs a victim
search per reclaim. Kueue orders non-borrowing workloads first for the same reason. Running jobs
on loan are still reclaimed as rule 5 says.
"""

from __future__ import annotations

from jobs.scheduler.engine.state import Pending


class Tentative:
    """On-loan admissions promised in the in-quota pass (milli per flavor, per tree node)."""

    __slots__ = ("root", "node", "jobs", "state", "charged")

    def __init__(self, state) -> None:
        self.state = state
        self.root: dict[str, int] = {}
        self.node: dict[tuple[str, int], int] = {}
        self.jobs: list[Pending] = []
        self.charged: set[str] = set()  # promised jobs whose fair usage was charged (DESIGN §16)

    def promise(self, p: Pending, r: int) -> None:
        self.jobs.append(p)
        self.root[p.flavor] = self.root.get(p.flavor, 0) + r
        for n in p.path:
            self.node[(p.flavor, n)] = self.node.get((p.flavor, n), 0) + r
        key = (p.flavor, p.proj)
        self.state.tentative[key] = self.state.tentative.get(key, 0) + r
        self.state.shares.pop(p.proj, None)
        if self.state.fair and p.id not in self.charged:
            self.charged.add(p.id)
            self.state.fair_charge(p.proj, r)

    def tree_room(self, flavor: str, path, tcap: int) -> int:
        """Rule-2 room below the root left to a borrower after the promises."""
        if not self.node:
            return tcap
        ledger = self.state.ledgers[flavor]
        node = self.node
        return min(tcap, min(ledger.cap[n] - ledger.used(n) - node.get((flavor, n), 0)
                             for n in path))

    def root_taken(self, flavor: str) -> int:
        return self.root.get(flavor, 0)

    def release_all(self) -> list[Pending]:
        """End of the in-quota pass: forget the promises, return the jobs in promise order."""
        for _, proj in self.state.tentative:
            self.state.shares.pop(proj, None)
        self.state.tentative.clear()
        self.root.clear()
        self.node.clear()
        jobs, self.jobs = self.jobs, []
        return jobs
