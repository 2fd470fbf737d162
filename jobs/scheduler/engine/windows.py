"""Reservations and maintenance windows in the cycle (DESIGN §17), pure.

A job *meets* a window when the span it may run if started now, ``[now, now + maximum
runtime)``, overlaps the window's ``[start, end)``. For a job that meets a window of another
project, or a maintenance (a window for nobody):

* the window's named nodes are barred to it (as nodes below its CUDA version are: placement
  plans on a copy of the pool without them, :meth:`Pool.without`);
* a count of a flavor holds that many whole GPUs of the flavor minus what the owner's jobs
  already use of it; placement plans on a copy of the pool with that many free GPUs taken —
  on the nodes with the most free GPUs, so whole nodes stay for the owner's gangs.

The owner's own jobs meet no bar: the reserved capacity is theirs to use (their quota still
applies — a reservation holds capacity, it grants no quota). Every placement of the cycle
(admission, backfill, preemption, borrowing) goes through ``Cycle.place``, so none lands in
a window; the backfill reservation of a blocked head skips barred nodes too.
"""

from __future__ import annotations

from jobs.scheduler.engine.model import Window
from jobs.scheduler.engine.pool import FULL, Pool


class Windows:
    """The snapshot's windows, with their instants as timestamps (the cycle's clock)."""

    __slots__ = ("items",)

    def __init__(self, windows, now: float) -> None:
        self.items = [(w, w.start.timestamp(), w.end.timestamp()) for w in windows
                      if w.end.timestamp() > now]

    def __bool__(self) -> bool:
        return bool(self.items)

    def met(self, project_id: str, now: float, runtime: float):
        """The windows a job of ``project_id`` running ``runtime`` seconds from ``now`` meets
        and does not own, soonest first."""
        found = [(start, w) for w, start, end in self.items
                 if w.project_id != project_id and now < end and now + runtime > start]
        return [w for _, w in sorted(found, key=lambda x: (x[0], x[1].id))]

    def barred(self, project_id: str, runtime: float, pool: Pool, now: float) -> list[tuple[int, Window]]:
        """(pool index, the window) of the nodes of ``pool`` barred to a job of ``project_id``
        that may run ``runtime`` seconds from ``now``."""
        out: list[tuple[int, Window]] = []
        seen: set[int] = set()
        for w in self.met(project_id, now, runtime):
            for node in w.nodes:
                i = pool.index.get(node)
                if i is not None and i not in seen:
                    seen.add(i)
                    out.append((i, w))
        return out

    def held(self, project_id: str, runtime: float, flavor: str, now: float,
             used_by) -> tuple[int, Window | None]:
        """Whole GPUs of ``flavor`` held back from a job of ``project_id`` by counts of other
        projects (each minus what its owner already uses of the flavor, ``used_by(project
        id)`` in milli), and the first such window."""
        total, first = 0, None
        for w in self.met(project_id, now, runtime):
            if w.gpus and w.flavor == flavor:
                left = w.gpus - (used_by(w.project_id) // FULL if w.project_id else 0)
                if left > 0:
                    total += left
                    first = first or w
        return total, first

    def held_until(self, project_id: str, runtime: float, flavor: str, now: float, used_by) -> float | None:
        """When the last count of another project that holds GPUs of ``flavor`` against a job
        of ``project_id`` ends (None: none holds any)."""
        ends = [end for w, _, end in self.items if w.gpus and w.flavor == flavor
                and w in self.met(project_id, now, runtime)
                and w.gpus - (used_by(w.project_id) // FULL if w.project_id else 0) > 0]
        return max(ends) if ends else None


def hold_back(pool: Pool, gpus: int) -> Pool:
    """A copy of ``pool`` with ``gpus`` of its whole free GPUs taken, from the nodes with the
    most free GPUs first (ties: pool order)."""
    twin = pool.clone()
    for i in sorted(range(len(pool.ids)), key=lambda i: (-pool.free[i], i)):
        if gpus <= 0:
            break
        for x in pool.free_gpus(i, min(gpus, pool.free[i])):
            twin.occupy(i, x, FULL)
            gpus -= 1
    return twin
