"""Fair Tree (DESIGN §16, as Slurm's Fair Tree) for the report and the quota tree page. Pure: no
Django. A stand-in for the engine's own (``jobs.scheduler.fairshare``) until the two are merged:
small on purpose.

Among siblings each node's level fair share is ``S = shares_norm / usage_norm`` — its part of the
siblings' shares over its part of their decayed usage; no usage makes S infinite (it goes first).
The tree is walked from the root, siblings in descending S (ties: more shares first, then the id),
and the projects (the leaves) are ranked in the order they are met: rank 1 is served first.
A project's factor is ``(leaves − (rank − 1)) / leaves``: 1.0 for the first, 1/leaves for the last.
A department has a level fair share but no rank or factor of its own (as sshare shows for accounts)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal


def shares_of(nodes: Iterable[str], quota: Iterable[tuple[str, str, Decimal]], norms: Mapping[str, Decimal],
              weights: Mapping[str, Decimal]) -> dict[str, float]:
    """Every node's shares: its admin's weight, else its own quota in normalised cards summed over
    its flavors (``quota``: (node, flavor, units); ``norms``: normalised cards per unit of a
    flavor, 1 when unknown), 0 when it holds none."""
    total = {node: Decimal(0) for node in nodes}
    for node, flavor, units in quota:
        total[node] = total.get(node, Decimal(0)) + units * norms.get(flavor, Decimal(1))
    total.update(weights)
    return {node: float(value) for node, value in total.items()}


@dataclass(frozen=True)
class Fair:
    shares: float
    shares_norm: float  # among its siblings
    usage: float  # decayed normalised card-seconds, its subtree's
    usage_norm: float  # among its siblings
    level_fs: float  # shares_norm / usage_norm (inf: no usage)
    rank: int | None  # projects: 1 = first served
    factor: float | None  # projects: (leaves − rank + 1) / leaves


def _level_fs(shares_norm: float, usage_norm: float) -> float:
    if usage_norm > 0:
        return shares_norm / usage_norm
    return math.inf if shares_norm > 0 else 0.0


def fair_tree(parents: Mapping[str, str | None], shares: Mapping[str, float],
              usage: Mapping[str, float]) -> dict[str, Fair]:
    """Every node's figures. ``parents``: node → its parent (None at the root level); leaves are
    the nodes whose id starts with "p" (projects); ``usage``: per project."""
    children: dict[str | None, list[str]] = {}
    for node, parent in parents.items():
        children.setdefault(parent, []).append(node)
    total: dict[str, float] = {}

    def subtree(node: str) -> float:
        total[node] = float(usage.get(node, 0.0)) + sum(subtree(c) for c in children.get(node, ()))
        return total[node]

    for root in children.get(None, ()):
        subtree(root)
    level: dict[str, tuple[float, float, float]] = {}
    for kids in children.values():
        s_sum = sum(shares.get(k, 0.0) for k in kids)
        u_sum = sum(total[k] for k in kids)
        for k in kids:
            s_norm = shares.get(k, 0.0) / s_sum if s_sum > 0 else 0.0
            u_norm = total[k] / u_sum if u_sum > 0 else 0.0
            level[k] = (s_norm, u_norm, _level_fs(s_norm, u_norm))
    order: list[str] = []

    def walk(parent: str | None) -> None:
        kids = sorted(children.get(parent, ()), key=lambda k: (-level[k][2], -shares.get(k, 0.0), k))
        for k in kids:
            if k.startswith("p"):
                order.append(k)
            walk(k)

    walk(None)
    leaves = len(order)
    rank = {node: i + 1 for i, node in enumerate(order)}
    return {
        node: Fair(shares.get(node, 0.0), level[node][0], total[node], level[node][1], level[node][2],
                   rank.get(node), (leaves - rank[node] + 1) / leaves if node in rank else None)
        for node in parents if node in level
    }
