"""The shares of the tree's nodes for fair share (DESIGN §16). Pure: no Django. The Fair Tree
itself — level fair share, order, rank and factor — is one module, ``jobs.scheduler.fairshare``,
read by the engine, the quota tree page and the report alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
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
