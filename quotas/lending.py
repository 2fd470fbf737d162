"""Whose idle quota the on-loan jobs use, now (issue 24 item 6). Pure: no Django.

DESIGN §3 splits running usage into in-quota and on-loan per job but never says whose idle quota
an on-loan job occupies; the quota tree's "who borrows from me" needs an answer. It is attributed
nearest first, as reclaim looks for victims (rule 5): a project's on-loan usage is taken from its
siblings' idle quota (in the order given), then from the idle part of its department's quota
that no child holds, then one level up (the department's siblings …), and what is left from the
pool's capacity that no quota holds. Nearer borrowers are served first: every borrower settles at
its deepest ancestors before anyone reaches the next level up, so lending inside a department is
counted before lending out of it.

A node lends at most ``max(quota − used, 0)`` of its subtree, and at most its lend limit, to
borrowers outside its subtree; within the lending subtree the amount is passed down to the
children that are idle, so an idle project sees who uses its quota, not only its department.

Figures per node (a department's figures cover its subtree):
* ``borrowed`` — on-loan usage inside the subtree covered from outside it (its siblings, other
  departments, the pool);
* ``lent`` — its idle quota used by borrowers outside its subtree;
* ``to[node]`` — per borrowing project, what it uses of the node's idle quota (lending out of the
  subtree, and a department's own unassigned quota used by its own projects).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal

Key = tuple[str, int]  # ("department" | "project", id)
ZERO = Decimal(0)


@dataclass(frozen=True, slots=True)
class Level:
    """A department or project of the tree with its effective quota in one flavor (0 where it
    holds no quota node) and lend limit (None: lends all idle quota)."""

    key: Key
    parent: Key | None
    quota: Decimal = ZERO
    lend_limit: Decimal | None = None


@dataclass(slots=True)
class Lending:
    borrowed: dict[Key, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    lent: dict[Key, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    to: dict[Key, dict[Key, Decimal]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(Decimal))
    )
    from_pool: dict[Key, Decimal] = field(default_factory=lambda: defaultdict(Decimal))


class _Tree:
    def __init__(self, levels: Iterable[Level], used: Mapping[Key, Decimal]):
        self.levels = {lv.key: lv for lv in levels}
        self.children: dict[Key | None, list[Key]] = defaultdict(list)
        for lv in self.levels.values():
            self.children[lv.parent if lv.parent in self.levels else None].append(lv.key)
        self.room: dict[Key, Decimal] = {}
        self.own: dict[Key, Decimal] = {}
        for key, lv in self.levels.items():
            idle = max(lv.quota - used.get(key, ZERO), ZERO)
            self.room[key] = idle if lv.lend_limit is None else min(idle, max(lv.lend_limit, ZERO))
            assigned = sum((self.levels[c].quota for c in self.children[key]), ZERO)
            self.own[key] = min(max(lv.quota - assigned, ZERO), idle)

    def path(self, key: Key) -> list[Key]:
        out = []
        while key in self.levels:
            out.append(key)
            key = self.levels[key].parent
        return out


def attribute(
    levels: Iterable[Level], on_loan: Mapping[Key, Decimal], used: Mapping[Key, Decimal]
) -> Lending:
    """``on_loan``: on-loan usage per project; ``used``: usage (in-quota + on-loan) of every node's
    subtree. Borrowers are served in the order of ``on_loan``."""
    tree = _Tree(levels, used)
    result = Lending()
    remaining = {p: amount for p, amount in on_loan.items() if amount > 0}
    paths = {p: tree.path(p) for p in remaining}
    longest = max((len(path) for path in paths.values()), default=0)
    # Index i on a path of length n is at depth n-1-i; settle at the deepest ancestors first.
    for depth in range(longest - 2, -2, -1):
        for project, path in paths.items():
            at = len(path) - 2 - depth  # the path node whose parent is at ``depth``
            if remaining[project] > 0 and 0 <= at < len(path):
                _settle(tree, result, project, path, at, remaining)
    for project, left in remaining.items():
        if left > 0:
            result.from_pool[project] += left
            for key in paths[project] or [project]:
                result.borrowed[key] += left
    return result


def _settle(tree: _Tree, result: Lending, project: Key, path: list[Key], at: int, remaining) -> None:
    """Cover what ``project`` still borrows from the siblings of ``path[at]``, then from the idle
    quota of their parent that no child holds."""
    child = path[at]
    parent = tree.levels[child].parent if tree.levels[child].parent in tree.levels else None
    inside = path[: at + 1]  # the borrower's side: these subtrees take it from outside
    for sibling in tree.children[parent]:
        if sibling == child or remaining[project] <= 0:
            continue
        take = min(remaining[project], tree.room[sibling])
        if take > 0:
            _lend(tree, result, sibling, project, take)
            _take(result, inside, project, take, remaining)
    if parent is not None and remaining[project] > 0:
        take = min(remaining[project], tree.own[parent])
        if take > 0:
            tree.own[parent] -= take
            result.to[parent][project] += take
            _take(result, inside, project, take, remaining)


def _take(result: Lending, inside: list[Key], project: Key, amount: Decimal, remaining) -> None:
    remaining[project] -= amount
    for key in inside:
        result.borrowed[key] += amount


def _lend(tree: _Tree, result: Lending, lender: Key, project: Key, amount: Decimal) -> None:
    """``lender`` lends ``amount`` out of its subtree; its idle children lend their part."""
    tree.room[lender] -= amount
    result.lent[lender] += amount
    result.to[lender][project] += amount
    left = amount
    for child in tree.children[lender]:
        take = min(left, tree.room[child])
        if take > 0:
            _lend(tree, result, child, project, take)
            left -= take
    if left > 0:
        tree.own[lender] = max(tree.own[lender] - left, ZERO)
