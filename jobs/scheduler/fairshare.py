"""Fair share over the tenant tree (DESIGN §16), pure: Slurm's Fair Tree on our tree.

Source: Slurm's Fair Tree fairshare algorithm, https://slurm.schedmd.com/fair_tree.html
(``doc/html/fair_tree.shtml``) and ``src/plugins/priority/multifactor/fair_tree.c``
(``_calc_assoc_fs``, ``_cmp_level_fs``, ``_calc_tree_fs``). Departments play Slurm's accounts,
projects its users.

* **Usage** ``U`` of a node: decayed normalised card-seconds of the projects in its subtree (the
  caller gives projects' usage; a department's is the sum of its children's, summed here).
* **Level fair share** among siblings: ``LF = S / U`` with ``S = shares / Σ sibling shares`` and
  ``U = usage / parent usage``. ``S == 0`` → ``LF = 0`` (last); ``U == 0`` with ``S > 0`` →
  ``LF = inf`` (first: no recent usage). Higher ``LF`` goes first.
* **Order** (the engine's and the report's alike, :meth:`FairTree.key`): compared level by level
  from the root, so if department A's LF beats department B's, every project under A goes before
  every project under B. Among siblings ``LF_i = (Σu/Σs) × s_i/u_i`` — the factor in front is
  common to the siblings, so ordering siblings by ``u_i / s_i`` ascending is ordering them by LF
  descending. A project's key is the tuple of ``u/s`` of its ancestors and itself, top down; two
  projects compare at the first level where their paths differ, which are siblings there.
* **Rank and factor** (what ``sshare`` shows as FairShare): projects sorted by key; rank 1 is
  served first, projects with equal keys share a rank (the next rank skips, as Slurm's tied users
  do); ``factor = (projects − rank + 1) / projects``: 1.0 for the first. A department has a level
  fair share but no rank or factor (as ``sshare`` shows for accounts).

This is the one Fair Tree: the scheduling cycle orders by the same key (it keeps its own cache of
the keys and charges usage as it admits, ``engine/state.py`` ``fair_key``), and the quota tree page
and the fair-share report read :func:`fair_figures`, so what the report ranks is the order the
engine serves. Deviations from Slurm, both from comparing keys rather than walking the tree: a
project and a department tied among their siblings — the project's key is a prefix of the
department's projects' keys, so it goes strictly first where Slurm lets it share a rank with the
department's first project; and when sibling departments tie, their merged children are compared
by ``u/s`` rather than by LF normalised within each department (they differ only when the
departments' own ``Σu/Σs`` differ). Ties are exact: equal floats of ``u/s``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from quotas.admission import TreeNode

__all__ = ["Fair", "FairTree", "decayed_card_seconds", "fair_figures", "fair_key", "level_fs"]

INF = float("inf")
LN2 = math.log(2.0)


def decayed_card_seconds(units: float, start: float, end: float | None, now: float,
                         half_life_s: float) -> float:
    """Usage of one allocation, decayed to ``now``: ``∫ units × 0.5^((now − t)/h) dt`` over
    ``[start, min(end, now)]`` = ``units × h/ln2 × (0.5^((now − min(end, now))/h) − 0.5^((now − start)/h))``.

    ``units``: normalised cards (DESIGN §14) held; times in POSIX seconds; ``end`` None: still
    running. Exact, so it does not depend on how often it is sampled, and additive: splitting
    an allocation in time or in cards gives the same sum (DESIGN §16, "splitting a job changes
    nothing"). ``half_life_s`` 0 or less: no decay (plain card-seconds, Slurm's
    ``PriorityDecayHalfLife=0``). The live service computes the same in SQL over allocations.
    """
    stop = now if end is None else min(end, now)
    if stop <= start or units == 0:
        return 0.0
    if half_life_s <= 0:
        return units * (stop - start)
    h = float(half_life_s)
    return units * h / LN2 * (0.5 ** ((now - stop) / h) - 0.5 ** ((now - start) / h))


def level_fs(share_norm: float, usage_efctv: float) -> float:
    """Slurm's ``_calc_assoc_fs``: S == 0 → 0; U == 0 → inf; else S / U."""
    if share_norm == 0:
        return 0.0
    if usage_efctv == 0:
        return INF
    return share_norm / usage_efctv


def fair_key(usage_over_shares: Iterable[float]) -> tuple[float, ...]:
    """A project's engine key from its ancestors' ``u/s`` top down (smaller goes first)."""
    return tuple(usage_over_shares)


def cost(usage: float, shares: float) -> float:
    """``u/s`` of a node: 0 with no usage (first), inf with no shares (last; Slurm's LF 0)."""
    if shares <= 0:
        return INF
    return usage / shares if usage > 0 else 0.0


@dataclass(frozen=True)
class Fair:
    """One node's figures for the report and the quota tree page."""

    shares: float
    shares_norm: float  # among its siblings
    usage: float  # decayed normalised card-seconds, its subtree's
    usage_norm: float  # among its siblings
    level_fs: float  # shares_norm / usage_norm (inf: no usage)
    rank: int | None  # projects: 1 = first served
    factor: float | None  # projects: (projects − rank + 1) / projects


class FairTree:
    """Fair Tree over ``tree`` with projects' ``usage`` and every node's ``shares`` (a node
    missing from ``shares`` has 0). Read ``usage`` (subtree sums), ``shares_norm``,
    ``usage_norm``, ``level`` (LF) per node, ``rank`` and ``factor`` per project;
    ``key(project)`` is the engine's order key."""

    def __init__(self, tree: Iterable[TreeNode], usage: Mapping[str, float],
                 shares: Mapping[str, float]) -> None:
        nodes = sorted(tree, key=lambda n: n.id)
        self.kind = {n.id: n.kind for n in nodes}
        self.parent = {n.id: n.parent_id for n in nodes}
        self.children: dict[str | None, list[str]] = {}
        for n in nodes:
            self.children.setdefault(n.parent_id, []).append(n.id)
        self.shares = {n.id: float(shares.get(n.id, 0.0)) for n in nodes}
        self.usage = {n.id: 0.0 for n in nodes}
        for n in nodes:
            if n.kind != "project":
                continue  # a department's usage is its children's
            u = float(usage.get(n.id, 0.0))
            nid: str | None = n.id
            while nid is not None:
                self.usage[nid] += u
                nid = self.parent[nid]
        self.shares_norm: dict[str, float] = {}
        self.usage_norm: dict[str, float] = {}
        self.level: dict[str, float] = {}
        for parent, kids in self.children.items():
            s_sum = sum(self.shares[k] for k in kids)
            u_parent = self.usage[parent] if parent is not None else sum(self.usage[k] for k in kids)
            for k in kids:
                s = self.shares_norm[k] = self.shares[k] / s_sum if s_sum > 0 else 0.0
                u = self.usage_norm[k] = self.usage[k] / u_parent if u_parent > 0 else 0.0
                self.level[k] = level_fs(s, u)
        self.rank: dict[str, int] = {}
        self.factor: dict[str, float] = {}
        self._rank()

    def key(self, project_id: str) -> tuple[float, ...]:
        path = []
        nid: str | None = project_id
        while nid is not None:
            path.append(cost(self.usage[nid], self.shares[nid]))
            nid = self.parent[nid]
        return fair_key(reversed(path))

    def _rank(self) -> None:
        projects = sorted(((self.key(n), n) for n, k in self.kind.items() if k == "project"))
        count = len(projects)
        for i, (key, nid) in enumerate(projects):
            tied = i > 0 and key == projects[i - 1][0]
            self.rank[nid] = self.rank[projects[i - 1][1]] if tied else i + 1
            self.factor[nid] = (count - self.rank[nid] + 1) / count

    def figures(self) -> dict[str, Fair]:
        return {nid: Fair(self.shares[nid], self.shares_norm[nid], self.usage[nid], self.usage_norm[nid],
                          self.level[nid], self.rank.get(nid), self.factor.get(nid))
                for nid in self.kind}


def fair_figures(tree: Iterable[TreeNode], usage: Mapping[str, float],
                 shares: Mapping[str, float]) -> dict[str, Fair]:
    """Every node's figures (the report and the quota tree page)."""
    return FairTree(tree, usage, shares).figures()
