"""What a worker takes of its node besides its GPUs (DESIGN §15), in units of its flavor. Pure.

A node of ``u`` units (GPUs, MIG slices, or cores of a CPU flavor) with allocatable CPU ``c``, memory
``m`` and local disk ``d`` gives each unit a *share*: ``c/u``, ``m/u``, ``d/u``. A flavor's share is
that of its smallest node (the least per unit over its nodes that report the figure), so a worker
that fits the share on one node fits it on every node of the flavor.

A worker asking ``g`` units and a request ``(cpu, memory, disk)`` takes its *footprint*

    units = max(g, ⌈cpu / share_cpu⌉, ⌈memory / share_memory⌉, ⌈disk / share_disk⌉)

units of its node: a request within the share takes exactly its GPUs; one beyond it takes GPUs it
does not use, which nobody else can use either — they are *stranded*. The scheduler places and
counts footprints like GPUs, so it never gives any node more CPU, memory or disk than it has:
Σ request ≤ Σ units × share ≤ the node's units × its own share ≤ what the node has, per dimension
(``tests/core/test_resource_properties.py`` holds it as a property of the engine). A shared
worker (``milli`` < 1000 of one device) works the same in thousandths of one unit.

A figure no node of the flavor reports (``None``) constrains nothing: only GPUs are placed then.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

FULL = 1000
DIMENSIONS = ("cpu_millicores", "memory_mib", "local_disk_gib")


@dataclass(frozen=True, slots=True)
class Request:
    """What one worker asks of its node besides its GPUs; ``None``: nothing asked of it."""

    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None

    def get(self, dim: str) -> int | None:
        return getattr(self, dim)


@dataclass(frozen=True, slots=True)
class Share:
    """What one unit of a flavor comes with on its smallest node; ``None``: not known."""

    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None

    def get(self, dim: str) -> int | None:
        return getattr(self, dim)

    @property
    def known(self) -> bool:
        return any(self.get(d) for d in DIMENSIONS)


@dataclass(frozen=True, slots=True)
class NodeSize:
    """A node as the share sees it: its units and its allocatable figures (``None``: unknown)."""

    units: int
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None


def share_of(nodes: Iterable[NodeSize]) -> Share:
    """The share of one unit on the flavor's smallest node, per dimension (floor: a share never
    promises more than a node has)."""
    least: dict[str, int] = {}
    for node in nodes:
        if node.units <= 0:
            continue
        for dim in DIMENSIONS:
            value = getattr(node, dim)
            if value is not None:
                per = value // node.units
                least[dim] = min(per, least.get(dim, per))
    return Share(**least)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def footprint_units(units: int, request: Request, share: Share) -> int:
    """Units of the node one worker of ``units`` whole units takes with ``request``."""
    taken = units
    for dim in DIMENSIONS:
        asked, per = request.get(dim), share.get(dim)
        if asked and per:
            taken = max(taken, _ceil(asked, per))
        elif asked and per == 0:
            return 1 << 30  # the nodes have none of it: never fits
    return taken


def footprint_milli(milli: int, request: Request, share: Share) -> int:
    """Thousandths of one unit a shared worker of ``milli`` takes with ``request``."""
    taken = milli
    for dim in DIMENSIONS:
        asked, per = request.get(dim), share.get(dim)
        if asked and per:
            taken = max(taken, _ceil(asked * FULL, per))
        elif asked and per == 0:
            return 1 << 30
    return taken


def binding(units_or_milli: int, request: Request, share: Share, *, shared: bool = False) -> str | None:
    """The dimension that sets the footprint above the GPUs asked (None: the GPUs do)."""
    best, which = units_or_milli, None
    for dim in DIMENSIONS:
        asked, per = request.get(dim), share.get(dim)
        if asked and per:
            taken = _ceil(asked * FULL, per) if shared else _ceil(asked, per)
            if taken > best:
                best, which = taken, dim
    return which


def default_request(share: Share, *, units: int = 0, milli: int | None = None) -> Request:
    """A worker's default: its units' share of the node (a shared worker's, its thousandths)."""
    out = {}
    for dim in DIMENSIONS:
        per = share.get(dim)
        if per is not None:
            out[dim] = per * milli // FULL if milli is not None else per * units
    return Request(**out)


def share_from(values: dict | None) -> Share:
    """A share stored as a dict (``Job.unit_share``): its known dimensions."""
    return Share(**{d: v for d, v in (values or {}).items() if d in DIMENSIONS and v is not None})


def filled(asked: Request, share: Share, *, units: int = 0, milli: int | None = None) -> Request:
    """What one worker asks: its own figures, its units' share (:func:`default_request`) for the
    ones it left empty."""
    default = default_request(share, units=units, milli=milli)
    return Request(**{d: asked.get(d) if asked.get(d) is not None else default.get(d) for d in DIMENSIONS})


def most_per_worker(share: Share, largest_node_units: int) -> Request:
    """The most one worker may ask: every unit of the flavor's largest node at the share (what the
    placement can give one worker)."""
    return Request(**{d: share.get(d) * largest_node_units for d in DIMENSIONS if share.get(d) is not None})



# -- stranded GPUs of a node (the figures the node map, the metrics and the dashboard show) -------


@dataclass(frozen=True, slots=True)
class Held:
    """What the jobs on a node hold of it: ``milli`` thousandths of its units and, when they asked
    any CPU, memory or disk, ``request`` (one worker's figures, the rest filled from its share:
    :func:`filled`). ``None``: they asked nothing and hold their units' share of *this* node."""

    milli: int
    request: Request | None = None


@dataclass(frozen=True, slots=True)
class Stranding:
    """A node's whole free units (``free``), those its free CPU, memory and disk can still feed at
    its share (``usable``), and the rest (``stranded``: free, but nobody can use them now)."""

    free: int
    usable: int

    @property
    def stranded(self) -> int:
        return self.free - self.usable


def held_share(share: Share, milli: int) -> Request:
    """``milli`` thousandths of units' share of a node, rounded up (a shared GPU's part holds at
    least its part: what the engine's ``Pool.implied`` counts)."""
    return Request(**{d: _ceil(share.get(d) * milli, FULL) for d in DIMENSIONS if share.get(d) is not None})


def stranding(node: NodeSize, free_units: int, held: Iterable[Held]) -> Stranding:
    """How many of a node's ``free_units`` whole free units its free CPU, memory and disk can feed:
    ``min(free units, ⌊free CPU ÷ share⌋, ⌊free memory ÷ share⌋, ⌊free disk ÷ share⌋)`` at the
    node's own share (:func:`share_of` of this node), the free figures being its allocatable ones
    less what ``held`` holds. The same count the engine's placement works with
    (``jobs/scheduler/engine/pool.py``; ``tests/core/test_stranding.py`` holds them equal)."""
    share = share_of([node])
    left = {d: getattr(node, d) for d in DIMENSIONS if share.get(d) is not None}
    for h in held:
        asked = h.request if h.request is not None else held_share(share, h.milli)
        for d in left:
            left[d] -= asked.get(d) or 0
    usable = free_units
    for d, value in left.items():
        per = share.get(d)
        usable = min(usable, value // per if per else 0)  # a node with none of it feeds nothing
    return Stranding(free_units, max(usable, 0))
