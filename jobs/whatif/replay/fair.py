"""Fair-share usage of a replay's own simulated history (DESIGN §16, docs/replay.md).

The engine is fed, before every cycle, each project's decayed usage: the sum over every
allocation the replay has made since it began (from admission to its end, or ``now`` while it
runs) of :func:`jobs.scheduler.fairshare.decayed_card_seconds` — the same formula the live
service applies to its allocations. Summing every allocation at every cycle would cost
O(allocations × cycles); the integral has a closed form that keeps two numbers per project:

    E(t) = 2^((t − ref)/h)
    an allocation of u cards from s to e contributes u·h/ln2·(E(e) − E(s))/E(now)
    running (e = now):                              u·h/ln2·(1 − E(s)/E(now))

so with ``R`` = Σ u over running allocations and ``C`` = Σ u·(E(e) − E(s)) over ended ones
− Σ u·E(s) over running ones, usage(now) = h/ln2 · (R + C/E(now)). ``ref`` moves forward
(rescaling ``C``) before ``E`` could overflow. Half-life 0 or less: no decay, card-seconds.
"""

from __future__ import annotations

from jobs.scheduler.fairshare import LN2

REBASE = 64.0  # half-lives between reference times: E stays below 2^64


class DecayedUsage:
    """Σ decayed_card_seconds per project over allocations started and ended in any order."""

    def __init__(self, half_life_s: float, ref: float) -> None:
        self.h = float(half_life_s)
        self.ref = ref
        self.running: dict[str, tuple[str, float, float]] = {}  # key -> (project, units, start)
        self.r: dict[str, float] = {}
        self.c: dict[str, float] = {}

    def _e(self, t: float) -> float:
        if self.h <= 0:
            return t - self.ref  # no decay: card-seconds, E(t) = t
        x = (t - self.ref) / self.h
        if x > REBASE:
            self._rebase(t)
            x = 0.0
        return 2.0 ** x

    def _rebase(self, t: float) -> None:
        scale = 2.0 ** (-(t - self.ref) / self.h)
        self.c = {p: v * scale for p, v in self.c.items()}
        self.ref = t

    def start(self, key: str, project: str, units: float, t: float) -> None:
        if key in self.running:
            self.end(key, t)
        e = self._e(t)  # first: a rebase rescales ``c``
        self.running[key] = (project, units, t)
        self.r[project] = self.r.get(project, 0.0) + units
        self.c[project] = self.c.get(project, 0.0) - units * e

    def seed(self, project: str, value: float, t: float) -> None:
        """``value`` decayed card-seconds of ``project`` at ``t`` from before the replay began (a
        history export's usage at its start): it decays from ``t`` on like any past allocation."""
        if value <= 0:
            return
        if self.h <= 0:
            self.c[project] = self.c.get(project, 0.0) + value
            return
        e = self._e(t)  # first: a rebase rescales ``c``
        self.c[project] = self.c.get(project, 0.0) + value * e * LN2 / self.h

    def end(self, key: str, t: float) -> None:
        found = self.running.pop(key, None)
        if found is None:
            return
        project, units, _ = found
        e = self._e(t)  # first: a rebase rescales ``c``
        self.r[project] -= units
        self.c[project] += units * e

    def at(self, now: float) -> dict[str, float]:
        """Each project's decayed usage at ``now`` (normalised card-seconds)."""
        if self.h <= 0:
            x = now - self.ref
            return {p: max(0.0, self.r.get(p, 0.0) * x + c) for p, c in self.c.items()}
        e = self._e(now)
        k = self.h / LN2
        return {p: max(0.0, k * (self.r.get(p, 0.0) + c / e)) for p, c in self.c.items()}


__all__ = ["DecayedUsage"]
