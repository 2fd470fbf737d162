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
* **Order**: compared level by level from the root, so if department A's LF beats department
  B's, every project under A goes before every project under B. Ties: sibling projects with the
  same LF share a rank; sibling departments with the same LF have their children merged.
* **Factor** (what ``sshare`` shows as FairShare): walking the sorted tree depth first, a
  project gets ``rank / number of projects``, rank counting down from the number of projects
  (the first gets 1.0; tied projects share a rank). A department reports the factor of its
  best-ranked project (Slurm gives accounts none; the report needs one per node).

The engine's key (:func:`fair_key`): among siblings ``LF_i = (Σu/Σs) × s_i/u_i`` — the factor
in front is common to the siblings, so ordering siblings by ``u_i / s_i`` ascending is ordering
them by LF descending. A project's key is the tuple of ``u/s`` of its ancestors, top down; two
projects compare at the first level where their ancestors differ, which are siblings there.
The key of a project only grows when any project's usage grows (the cycle charges usage as it
admits), which lets the cycle re-read it lazily like the dominant share. One deviation from
Slurm: when sibling departments tie, their merged children are compared by ``u/s`` rather
than by LF normalised within each department (they differ only when the departments' own
``Σu/Σs`` differ); :func:`ranks` follows Slurm exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from quotas.admission import TreeNode

__all__ = ["FairTree", "decayed_card_seconds", "fair_key", "level_fs"]

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


class FairTree:
    """Fair Tree over ``tree`` with projects' ``usage`` and every node's ``shares`` (a node
    missing from ``shares`` has 0). Read ``usage`` (subtree sums), ``level`` (LF), ``rank``
    and ``factor`` per node id; ``key(project)`` is the engine's order key."""

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
        self.level: dict[str, float] = {}
        for parent, kids in self.children.items():
            s_sum = sum(self.shares[k] for k in kids)
            u_parent = self.usage[parent] if parent is not None else sum(self.usage[k] for k in kids)
            for k in kids:
                s = self.shares[k] / s_sum if s_sum > 0 else 0.0
                u = self.usage[k] / u_parent if u_parent > 0 else 0.0
                self.level[k] = level_fs(s, u)
        self.rank: dict[str, int] = {}
        self.factor: dict[str, float] = {}
        self._rank_tree()

    def key(self, project_id: str) -> tuple[float, ...]:
        path = []
        nid: str | None = project_id
        while nid is not None:
            path.append(cost(self.usage[nid], self.shares[nid]))
            nid = self.parent[nid]
        return fair_key(reversed(path))

    # -- Slurm's _calc_tree_fs ---------------------------------------------------------------
    def _rank_tree(self) -> None:
        users = sum(1 for k in self.kind.values() if k == "project")
        self._count = users
        state = [users, users]  # rank, rank with no ties
        self._walk(list(self.children.get(None, [])), state, False)
        for nid in sorted(self.kind, key=lambda n: -self._depth(n)):
            if self.kind[nid] != "project":
                below = [self.factor[k] for k in self.children.get(nid, []) if k in self.factor]
                if below:
                    self.factor[nid] = max(below)
                    self.rank[nid] = max(self.rank[k] for k in self.children.get(nid, []) if k in self.rank)

    def _depth(self, nid: str) -> int:
        d = 0
        p = self.parent[nid]
        while p is not None:
            d, p = d + 1, self.parent[p]
        return d

    def _walk(self, siblings: list[str], state: list[int], account_tied: bool) -> None:
        # Higher LF first; on a tie, projects before departments (Slurm's _cmp_level_fs); then id.
        siblings.sort(key=lambda n: (-self.level[n], self.kind[n] != "project", n))
        prev = None
        i = 0
        while i < len(siblings):
            nid = siblings[i]
            lf = self.level[nid]
            tied = account_tied if i == 0 else prev == lf
            if self.kind[nid] == "project":
                if not tied:
                    state[0] = state[1]
                self.rank[nid] = state[0]
                self.factor[nid] = state[0] / self._count
                state[1] -= 1
                i += 1
            else:
                j = i
                while j + 1 < len(siblings) and self.kind[siblings[j + 1]] != "project" \
                        and self.level[siblings[j + 1]] == lf:
                    j += 1
                merged = [c for d in siblings[i:j + 1] for c in self.children.get(d, [])]
                if merged:
                    self._walk(merged, state, tied)
                i = j + 1
            prev = lf
