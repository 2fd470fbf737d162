"""Rack power caps in the cycle (DESIGN §18), pure.

A rack's draw is the sum over its nodes of the node's idle draw (its draw besides its GPU boards)
and its boards' draw: the DCGM power of its GPUs where the snapshot has it measured, else the
board power of each unit in use (a unit is in use when anything holds part of it). What the cycle
admits or ends from there moves the draw by the board power of each unit it takes or gives back:
a measurement is of the snapshot's instant, a plan is of the future, so a plan adds the estimate.

Placement never plans a rack above its cap: before a job is placed (``State.placeable``, every
placement of the cycle goes through it) the pool is cut to what each capped rack can still
power — ⌊(cap − draw) ÷ board power⌋ more units of the pool's flavor — on a copy, taking the
free units of the rack's nodes with the fewest free first, so whole free nodes stay whole for a
gang while there is power for one. A rack whose draw already reaches its cap (a cap lowered below
what runs there) takes no new unit at all; what runs there keeps running. A shared request that
fits on a unit already in use adds no board, so it may still land there.

Racks without a cap, and nodes in none, are not limited; a snapshot without capped racks costs
nothing (``State.power`` is None).
"""

from __future__ import annotations

from jobs.scheduler.engine.model import Snapshot
from jobs.scheduler.engine.pool import FULL, Pool


class Power:
    """Draw and headroom of the capped racks, kept true as the cycle changes its pools."""

    __slots__ = ("cap", "pools", "members", "base", "busy0", "_draw", "_key")

    def __init__(self, snap: Snapshot, pools: dict[str, Pool]) -> None:
        self.cap = dict(snap.rack_caps)
        self.pools = pools
        # flavor -> rack -> [(pool index, board W)]: the pool nodes in capped racks.
        self.members: dict[str, dict[str, list[tuple[int, int]]]] = {}
        self.base: dict[str, int] = dict.fromkeys(self.cap, 0)  # rack -> draw at the snapshot
        self.busy0: dict[tuple[str, int], int] = {}  # (flavor, pool index) -> units in use then
        held = _held_units(snap)
        for node in snap.nodes:
            info = snap.node_power.get(node.id)
            if info is None or info.rack not in self.cap:
                continue
            pool = pools.get(node.flavor)
            i = pool.index.get(node.id) if pool is not None else None
            busy = _busy(pool, i) if i is not None else held.get(node.id, 0)
            boards = info.measured_w if info.measured_w is not None else busy * info.board_w
            self.base[info.rack] += info.idle_w + boards
            if i is not None:
                self.busy0[node.flavor, i] = busy
                self.members.setdefault(node.flavor, {}).setdefault(info.rack, []).append((i, info.board_w))
        self._draw: dict[str, int] = {}
        self._key: tuple = ()

    def draw(self) -> dict[str, int]:
        """Watts each capped rack draws or is planned to draw now."""
        key = tuple(self.pools[f].version for f in self.members)
        if key != self._key:
            self._key = key
            draw = dict(self.base)
            for flavor, racks in self.members.items():
                pool = self.pools[flavor]
                for rack, nodes in racks.items():
                    draw[rack] += sum((_busy(pool, i) - self.busy0[flavor, i]) * board for i, board in nodes)
            self._draw = draw
        return self._draw

    def room(self, flavor: str) -> dict[str, int]:
        """Units of ``flavor`` each capped rack holding some can still power (rack -> units)."""
        racks = self.members.get(flavor)
        if not racks:
            return {}
        draw = self.draw()
        out = {}
        for rack, nodes in racks.items():
            board = max(b for _, b in nodes)
            left = self.cap[rack] - draw[rack]
            out[rack] = max(0, left // board) if board > 0 else 1 << 30
        return out

    def at_cap(self, flavor: str) -> list[str]:
        """The capped racks with nodes of ``flavor`` that can power no further unit of it."""
        return sorted(rack for rack, units in self.room(flavor).items() if units <= 0)

    def limit(self, pool: Pool) -> Pool:
        """``pool`` as the racks' power lets a job use it: the live pool when no rack binds,
        otherwise a copy with the units no rack can power taken."""
        racks = self.members.get(pool.flavor)
        if not racks:
            return pool
        cuts: list[tuple[int, int]] = []
        for rack, units in self.room(pool.flavor).items():
            nodes = sorted((pool.free[i], i) for i, _ in racks[rack] if pool.free[i] > 0)
            over = sum(f for f, _ in nodes) - units
            for f, i in nodes:
                if over <= 0:
                    break
                k = min(f, over)
                cuts.append((i, k))
                over -= k
        if not cuts:
            return pool
        twin = pool.clone()
        for i, k in cuts:
            # Whole free units taken until the node's usable count drops by k (with CPU and
            # memory reported, usable may be below whole: take whole − (usable − k)).
            whole = pool.whole[i] if pool.whole is not None else pool.free[i]
            for x in pool.free_gpus(i, whole - (pool.free[i] - k)):
                twin.occupy(i, x, FULL)
        return twin


def _busy(pool: Pool, i: int) -> int:
    """Units of node ``i`` that anything holds part of (each draws its board power)."""
    return sum(1 for u in pool.used[i] if u)


def _held_units(snap: Snapshot) -> dict[str, int]:
    """Units in use per node id by the snapshot's jobs and external allocations (for nodes that
    are not in a pool: cordoned, draining, down)."""
    units: set[tuple[str, int]] = set()
    for node in snap.nodes:
        units.update((node.id, g) for g, m in enumerate(node.external_milli) if m > 0)
    for job in snap.running:
        units.update((node, g) for node, g, _ in job.placement)
    out: dict[str, int] = {}
    for node, _ in units:
        out[node] = out.get(node, 0) + 1
    return out
