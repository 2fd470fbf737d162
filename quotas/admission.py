"""Pure quota rules of DESIGN §3 (no Django, no I/O, no clock).

Units: integer milli-units everywhere (1000 = one device of the flavor), so shared ``gpu_milli``
requests are exact and comparisons never round.

Inputs the caller builds from the database:

* ``TreeNode(id, parent_id, kind)`` — departments and projects; ``parent_id=None`` hangs a node
  under the implicit pool root of every flavor.
* ``Limits(quota, borrow_limit, lend_limit)`` per ``(tree node id, flavor)``, in milli-units. The
  caller has ALREADY applied loans and quota windows (the *effective* quota). A missing entry means
  ``quota=0, borrow_limit=None, lend_limit=None``.
* ``capacity`` ``C`` of a flavor: milli-units of the healthy (schedulable) nodes.

What this module decides (per flavor, on a :class:`Ledger`):

1. ``Ledger.rebuild`` — the in-quota / on-loan split of running jobs (rule 1).
2. ``Ledger.cap_room`` — caps with ``borrow_limit`` (rule 2) and the root capacity.
3. ``Ledger.in_quota_room`` — whether a request is in-quota (rule 3).
4. ``Ledger.loan_room`` — the on-loan admission with lend-limit hold-backs ``hold(n)`` summed over
   the sibling subtrees along the job's path (rule 4).
5. ``minimal_victim_set`` — a minimal victim set taken in preference order (rule 5; the order
   itself — nearest subtree first, then lowest priority, then most recently started — is
   generated from per-subtree indexes in ``jobs.scheduler.engine.preempt.reclaim_order``);
   ``priority_victims`` — within-project priority preemption (rule 6).

"Rooms" are the largest request a rule still admits, so elastic jobs can size themselves without
trial and error: a request ``r`` passes a rule iff ``r <= room``.

The pool root has no quota of its own: ``q(root) = C`` is implied by rule 2, so in-quota checks
stop at the top-level departments. ``u(root)`` counts only usage on healthy nodes (a cordoned node's
jobs do not eat the healthy capacity ``C``); tree nodes count all usage of their tenants.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

# "No cap" sentinel. Integers (not float inf) keep every comparison exact.
INF = 1 << 62
ROOT = -1

__all__ = [
    "INF",
    "Ledger",
    "Limits",
    "QuotaTree",
    "TreeNode",
    "minimal_victim_set",
    "priority_victims",
]


@dataclass(frozen=True, slots=True)
class TreeNode:
    """A department or project; ``parent_id=None`` means directly under the pool root."""

    id: str
    parent_id: str | None
    kind: str = "project"  # "department" | "project"


@dataclass(frozen=True, slots=True)
class Limits:
    """Effective limits of one tree node for one flavor, in milli-units."""

    quota: int = 0
    borrow_limit: int | None = None  # None: no cap beyond capacity; 0: never borrows
    lend_limit: int | None = None  # None: lends all idle quota; 0: lends nothing


NO_LIMITS = Limits()


class QuotaTree:
    """Index of the tenant tree: ids to small ints, parents and cached paths to the top.

    Nodes are indexed in sorted id order so results never depend on the caller's list order.
    """

    __slots__ = ("ids", "index", "parent", "depth", "kind", "_paths", "by_depth")

    def __init__(self, nodes: Iterable[TreeNode]):
        ordered = sorted(nodes, key=lambda n: n.id)
        self.ids = [n.id for n in ordered]
        self.index = {nid: i for i, nid in enumerate(self.ids)}
        if len(self.index) != len(self.ids):
            raise ValueError("duplicate tree node id")
        self.kind = [n.kind for n in ordered]
        self.parent = [self._parent_index(n) for n in ordered]
        self._paths: dict[int, tuple[int, ...]] = {}
        self.depth = [len(self.path(i)) for i in range(len(self.ids))]
        # Deepest first: one bottom-up pass computes subtree sums (hold-backs).
        self.by_depth = sorted(range(len(self.ids)), key=lambda i: -self.depth[i])

    def _parent_index(self, node: TreeNode) -> int:
        if node.parent_id is None:
            return ROOT
        try:
            return self.index[node.parent_id]
        except KeyError:
            raise ValueError(f"unknown parent {node.parent_id!r} of {node.id!r}") from None

    def path(self, i: int) -> tuple[int, ...]:
        """Node ``i`` and its ancestors up to the top level (the root excluded)."""
        cached = self._paths.get(i)
        if cached is not None:
            return cached
        path: list[int] = []
        n = i
        while n != ROOT:
            if len(path) > len(self.ids):
                raise ValueError(f"cycle in the tenant tree at {self.ids[i]!r}")
            path.append(n)
            n = self.parent[n]
        result = tuple(path)
        self._paths[i] = result
        return result

    def distance(self, path: Sequence[int], other: int) -> int:
        """Levels from ``path[0]`` up to its common ancestor with ``other`` (rule 5 nearness).

        0 = same project, 1 = same parent department, ..., ``len(path)`` = only the root.
        """
        other_path = set(self.path(other))
        for level, n in enumerate(path):
            if n in other_path:
                return level
        return len(path)


class Ledger:
    """Quota usage of one flavor over the tree (rules 1–4), mutable, in milli-units.

    Per node: ``quota``, ``cap = quota + borrow_limit`` (INF without a borrow limit),
    ``qml = quota − lend_limit`` (−INF when everything is lent), in-quota usage ``u_q`` and
    on-loan usage ``u_l`` of its subtree, and the hold-back ``hold`` with ``childsum`` = Σ hold
    of its children. ``root_used`` is the usage placed on healthy nodes; ``capacity`` is ``C``.
    """

    __slots__ = (
        "tree", "flavor", "quota", "cap", "qml", "u_q", "u_l", "hold", "childsum",
        "root_childsum", "root_used", "capacity", "loan",
    )

    def __init__(self, tree: QuotaTree, flavor: str,
                 limits: Mapping[tuple[str, str], Limits], capacity: int):
        self.tree = tree
        self.flavor = flavor
        self.capacity = capacity
        size = len(tree.ids)
        self.quota = [0] * size
        self.cap = [INF] * size
        self.qml = [-INF] * size
        for i, nid in enumerate(tree.ids):
            lim = limits.get((nid, flavor), NO_LIMITS)
            self.quota[i] = lim.quota
            if lim.borrow_limit is not None:
                self.cap[i] = lim.quota + lim.borrow_limit
            if lim.lend_limit is not None:
                self.qml[i] = lim.quota - lim.lend_limit
        self.u_q = [0] * size
        self.u_l = [0] * size
        self.hold = [0] * size
        self.childsum = [0] * size
        self.root_childsum = 0
        self.root_used = 0
        self.loan = 0  # total on-loan milli of the flavor (is there anything to reclaim?)
        self.recompute_holds()

    # -- hold-backs (rule 4) -------------------------------------------------------------
    def recompute_holds(self) -> None:
        """Bottom-up: hold(n) = max(q − l − u_q, Σ hold(children), 0)."""
        hold, childsum, qml, u_q, parent = self.hold, self.childsum, self.qml, self.u_q, \
            self.tree.parent
        for i in range(len(hold)):
            childsum[i] = 0
        self.root_childsum = 0
        for i in self.tree.by_depth:
            h = max(0, qml[i] - u_q[i], childsum[i])
            hold[i] = h
            p = parent[i]
            if p == ROOT:
                self.root_childsum += h
            else:
                childsum[p] += h

    def _refresh_holds(self, path: Sequence[int]) -> None:
        # Only the path's holds can change when its in-quota usage changes; walk it upwards.
        hold, childsum, qml, u_q = self.hold, self.childsum, self.qml, self.u_q
        last = len(path) - 1
        for k, n in enumerate(path):
            h = qml[n] - u_q[n]
            c = childsum[n]
            if c > h:
                h = c
            if h < 0:
                h = 0
            d = h - hold[n]
            if d:
                hold[n] = h
                if k == last:
                    self.root_childsum += d
                else:
                    childsum[path[k + 1]] += d

    def sibling_hold(self, path: Sequence[int]) -> int:
        """Σ hold(s) over the sibling subtrees along ``path`` (its own ancestors excluded)."""
        total = 0
        childsum, hold = self.childsum, self.hold
        last = len(path) - 1
        for k, n in enumerate(path):
            above = self.root_childsum if k == last else childsum[path[k + 1]]
            total += above - hold[n]
        return total

    # -- usage ---------------------------------------------------------------------------
    def add(self, path: Sequence[int], r: int, in_quota: bool, root_r: int) -> None:
        """Count a job of ``r`` milli (``root_r`` of it on healthy nodes)."""
        if in_quota:
            u = self.u_q
            for n in path:
                u[n] += r
            self._refresh_holds(path)
        else:
            u = self.u_l
            for n in path:
                u[n] += r
            self.loan += r
        self.root_used += root_r

    def remove(self, path: Sequence[int], r: int, in_quota: bool, root_r: int) -> None:
        self.add(path, -r, in_quota, -root_r)

    def rebuild(self, jobs: Iterable[tuple[Sequence[int], int, int]]) -> list[bool]:
        """Rule 1: the in-quota / on-loan split, recomputed from scratch.

        ``jobs`` yields ``(path, r, root_r)`` already in rule-1 order (priority desc, start time
        asc, id). A job is in-quota while ``u_q(n) + r <= q(n)`` holds on its whole path.
        """
        size = len(self.quota)
        u_q = self.u_q = [0] * size
        u_l = self.u_l = [0] * size
        quota = self.quota
        flags: list[bool] = []
        root = loan = 0
        for path, r, root_r in jobs:
            root += root_r
            ok = True
            for n in path:
                if u_q[n] + r > quota[n]:
                    ok = False
                    break
            if ok:
                u = u_q
            else:
                u = u_l
                loan += r
            for n in path:
                u[n] += r
            flags.append(ok)
        self.root_used = root
        self.loan = loan
        self.recompute_holds()
        return flags

    # -- rooms: the largest request each rule admits ------------------------------------
    def in_quota_room(self, path: Sequence[int]) -> int:
        """Rule 3: largest r with u_q(n) + r <= q(n) on the whole path."""
        quota, u_q = self.quota, self.u_q
        room = INF
        for n in path:
            v = quota[n] - u_q[n]
            if v < room:
                room = v
        return room

    def tree_cap_room(self, path: Sequence[int]) -> int:
        """Rule 2 below the root: largest r with u(n) + r <= q(n) + b(n) on the path."""
        cap, u_q, u_l = self.cap, self.u_q, self.u_l
        room = INF
        for n in path:
            v = cap[n] - u_q[n] - u_l[n]
            if v < room:
                room = v
        return room

    def root_room(self) -> int:
        """Rule 2 at the root: largest r with u(root) + r <= C."""
        return self.capacity - self.root_used

    def cap_room(self, path: Sequence[int]) -> int:
        """Rule 2 on the whole path, root included."""
        return min(self.tree_cap_room(path), self.capacity - self.root_used)

    def loan_room(self, path: Sequence[int]) -> int:
        """Rule 4 (with rule 2): largest on-loan r, i.e. u(root) + r + Σ hold(s) <= C."""
        room = self.cap_room(path)
        held = self.capacity - self.root_used - self.sibling_hold(path)
        return held if held < room else room

    # -- explain helpers ----------------------------------------------------------------
    def in_quota_blocker(self, path: Sequence[int], r: int) -> int:
        """First node where ``r`` is not in-quota, or ROOT if it is in-quota everywhere."""
        for n in path:
            if self.u_q[n] + r > self.quota[n]:
                return n
        return ROOT

    def cap_blocker(self, path: Sequence[int], r: int) -> int:
        """First node whose borrow cap ``r`` would break, or ROOT if none does."""
        for n in path:
            if self.u_q[n] + self.u_l[n] + r > self.cap[n]:
                return n
        return ROOT

    def used(self, n: int) -> int:
        return self.u_q[n] + self.u_l[n]


# -- rule 5 and 6: victims ---------------------------------------------------------------
def priority_victims(candidates: Iterable, priority: int) -> list:
    """Rule 6: same-project jobs that are preemptible and of lower priority, cheapest first.

    ``candidates`` are objects with ``priority``, ``preemptible``, ``started`` and ``id``.
    """
    chosen = [v for v in candidates if v.preemptible and v.priority < priority]
    chosen.sort(key=lambda v: (v.priority, -v.started, v.id))
    return chosen


def minimal_victim_set(candidates: Iterable, remove: Callable, restore: Callable,
                       fits: Callable[[], bool]) -> list | None:
    """Take victims in preference order until ``fits()``, then give back the unneeded ones.

    Victims are given back least-preferred first, so the set that remains is minimal (no victim
    can be spared) and leans on the preferred victims. On success the chosen victims stay removed
    (the caller admits the job into their room); on failure the state is restored untouched.
    """
    chosen: list = []
    found = False
    for victim in candidates:
        remove(victim)
        chosen.append(victim)
        if fits():
            found = True
            break
    if not found:
        for victim in reversed(chosen):
            restore(victim)
        return None
    spared = set()
    for k in range(len(chosen) - 2, -1, -1):
        restore(chosen[k])
        if fits():
            spared.add(k)
        else:
            remove(chosen[k])
    return [v for k, v in enumerate(chosen) if k not in spared]
