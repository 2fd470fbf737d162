"""The advisor's search space (issue 25), bounded by the platform admin (pure: no Django).

Bounds are JSON; every dimension is either a range ``[low, high]`` (numbers) or a list of
choices, and a dimension pinned to one value (``[1.0, 1.0]``, ``["best_fit"]``) is not searched.
Each dimension maps onto one replay input (docs/advisor.md):

=========================  =========================  ========================================
dimension                  bounds (default)           replay input
=========================  =========================  ========================================
``overcommit_ratio``       range [0.6, 1.5]           ``policy.overcommit_ratio``
``borrow_limit_ratio``     choices [null, .5, 1, 2]   ``policy.borrow_limit_ratio`` (null: no cap)
``lend_limit_ratio``       choices [null, .5, .75]    ``policy.lend_limit_ratio`` (null: all)
``night_lend_limit_ratio`` choices [null, .5, 1]      ``policy.night`` (null: no night window)
``grace_s``                range [0, 120] (whole s)   ``policy.grace_s``
``backfill``               choices [true, false]      ``policy.backfill``
``packing``                choices [frag.-aware, bf]  ``policy.packing``
``queueing``               choices [best_effort,      the replay's ``queueing`` key, one
                           strict_fifo]               dimension per project (``queueing:<p>``)
``fair_half_life_s``       choices [null]             ``policy.fair_half_life_s`` (null: as the
                           (whole s, 3,600–365 days;  input has it — no key); a value turns fair
                           not searched)              share on with that half-life (DESIGN §16)
``fair_weight``            choices [1] (factors > 0,  ``policy.fair_share_factors``, one
                           ≤ 100; not searched)       dimension per department
                                                      (``fair_weight:<d>``): its shares × the
                                                      factor (1: no key); turns fair share on
=========================  =========================  ========================================

The replay honours ``queueing`` through ``Options.queueing_by_tenant`` (jobs/scheduler/engine/fifo.py).
``night_hours`` ([20, 8] by default) fixes the window's hours; it is not searched.
Today's settings (:data:`TODAY`) are the engine's defaults: ratio 1, no caps, everything
lendable, no window, grace 0, backfill on, fragmentation-aware packing, best-effort queueing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

RANGES = {"overcommit_ratio": (0.1, 10.0, False), "grace_s": (0, 3600, True)}  # name: (min, max, int)
CHOICES = {
    "borrow_limit_ratio": "ratio_or_null",
    "lend_limit_ratio": "ratio_or_null",
    "night_lend_limit_ratio": "ratio_or_null",
    "backfill": (True, False),
    "packing": ("fragmentation_aware", "best_fit"),
    "queueing": ("best_effort", "strict_fifo"),
    "fair_half_life_s": "seconds_or_null",
    "fair_weight": "factor",
}
# The portal's half-life setting's range (jobs/rule_models.py), so that "apply" can set what is found.
FAIR_MIN_S, FAIR_MAX_S = 3600, 365 * 86_400
DEFAULT_BOUNDS = {
    "overcommit_ratio": [0.6, 1.5],
    "borrow_limit_ratio": [None, 0.5, 1.0, 2.0],
    "lend_limit_ratio": [None, 0.5, 0.75],
    "night_lend_limit_ratio": [None, 0.5, 1.0],
    "night_hours": [20, 8],
    "grace_s": [0, 120],
    "backfill": [True, False],
    "packing": ["fragmentation_aware", "best_fit"],
    "queueing": ["best_effort", "strict_fifo"],
    # Pinned by default (existing studies search what they did); e.g. [null, 86400, 604800, 2592000]
    # lets the advisor weigh a day, Slurm's week and a month against the input's own.
    "fair_half_life_s": [None],
    # Pinned too; e.g. [0.5, 1, 2] weighs halving and doubling each department's shares.
    "fair_weight": [1.0],
}
TODAY = {
    "overcommit_ratio": 1.0, "borrow_limit_ratio": None, "lend_limit_ratio": None,
    "night_lend_limit_ratio": None, "grace_s": 0, "backfill": True, "packing": "fragmentation_aware",
    "queueing": "best_effort", "fair_half_life_s": None, "fair_weight": 1.0,
}
PER_NODE = ("queueing", "fair_weight")  # one dimension per project / per department


@dataclass(frozen=True)
class Dimension:
    name: str  # ``queueing:<project>`` for the per-project strategy
    low: float | None = None  # a range
    high: float | None = None
    integer: bool = False
    choices: tuple = ()  # or a list of choices

    @property
    def fixed(self) -> bool:
        return (self.choices and len(self.choices) == 1) or (not self.choices and self.low == self.high)


def check_bounds(bounds: Mapping) -> dict:
    """The admin's bounds merged over the defaults, validated (errors name the dimension;
    nothing is clamped)."""
    if not isinstance(bounds, Mapping):
        raise ValueError("bounds: give a JSON object")
    unknown = sorted(set(bounds) - set(DEFAULT_BOUNDS))
    if unknown:
        raise ValueError(f"bounds: unknown dimension(s) {', '.join(unknown)}")
    out = {**DEFAULT_BOUNDS, **bounds}
    for name, (low, high, integer) in RANGES.items():
        out[name] = _range(name, out[name], low, high, integer)
    for name, allowed in CHOICES.items():
        out[name] = _choices(name, out[name], allowed)
    hours = out["night_hours"]
    if (not isinstance(hours, Sequence) or len(hours) != 2
            or any(isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= 23 for h in hours)
            or hours[0] == hours[1]):
        raise ValueError("bounds.night_hours: [start, end], two different whole hours from 0 to 23")
    out["night_hours"] = [int(h) for h in hours]
    return out


def _range(name: str, value, low: float, high: float, integer: bool) -> list:
    ok = (isinstance(value, Sequence) and len(value) == 2
          and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value))
    if not ok or not low <= value[0] <= value[1] <= high or (integer and any(v != int(v) for v in value)):
        kind = "whole numbers" if integer else "numbers"
        raise ValueError(f"bounds.{name}: [low, high], {kind} with {low:g} ≤ low ≤ high ≤ {high:g}")
    return [int(v) for v in value] if integer else [float(v) for v in value]


def _choices(name: str, value, allowed) -> list:
    if not isinstance(value, Sequence) or isinstance(value, str) or not value:
        raise ValueError(f"bounds.{name}: a non-empty list of choices")
    for v in value:
        number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        ratio = v is None or (number and 0 <= v <= 100)
        seconds = v is None or (number and v == int(v) and FAIR_MIN_S <= v <= FAIR_MAX_S)
        if allowed == "ratio_or_null":
            ok, what = ratio, "null or ratios from 0 to 100"
        elif allowed == "seconds_or_null":
            ok, what = seconds, f"null or whole seconds from {FAIR_MIN_S} to {FAIR_MAX_S}"
        elif allowed == "factor":
            ok, what = number and 0 < v <= 100, "numbers above 0, at most 100"
        else:
            ok, what = v in allowed, ", ".join(map(str, allowed))
        if not ok:
            raise ValueError(f"bounds.{name}: choices must be {what}, not {v!r}")
    if len(set(map(repr, value))) != len(value):
        raise ValueError(f"bounds.{name}: a choice is listed twice")
    return list(value)


def departments(projects: Sequence[str]) -> list[str]:
    """The departments of the replay's tree: every proper prefix of a project's path (``a/b/c``:
    ``a`` and ``a/b``; a one-part path is a project under the root), sorted."""
    return sorted({"/".join(p.split("/")[:k]) for p in projects for k in range(1, len(p.split("/")))})


def dimensions(bounds: Mapping, projects: Sequence[str]) -> list[Dimension]:
    """The searched dimensions of checked ``bounds`` (pinned ones included, as fixed), the
    queueing strategy once per project and the fair-share weight once per department (sorted)."""
    out = []
    for name in ("overcommit_ratio", "grace_s"):
        low, high = bounds[name]
        out.append(Dimension(name, low, high, integer=RANGES[name][2]))
    for name in ("borrow_limit_ratio", "lend_limit_ratio", "night_lend_limit_ratio", "backfill", "packing",
                 "fair_half_life_s"):
        out.append(Dimension(name, choices=tuple(bounds[name])))
    out.extend(Dimension(f"queueing:{p}", choices=tuple(bounds["queueing"])) for p in sorted(projects))
    out.extend(Dimension(f"fair_weight:{d}", choices=tuple(bounds["fair_weight"]))
               for d in departments(projects))
    return out


def today(projects: Sequence[str]) -> dict:
    """Today's settings as a candidate's params (the baseline every candidate is judged against)."""
    params = {k: v for k, v in TODAY.items() if k not in PER_NODE}
    params.update({f"queueing:{p}": TODAY["queueing"] for p in sorted(projects)})
    params.update({f"fair_weight:{d}": TODAY["fair_weight"] for d in departments(projects)})
    return params


def replay_inputs(params: Mapping, bounds: Mapping) -> dict:
    """A candidate's params as replay spec keys: ``{"policy": {...}, "queueing": {...}}``
    (``queueing`` lists the strict-FIFO projects only: best effort is the replay's default)."""
    policy = {
        "overcommit_ratio": float(params["overcommit_ratio"]),
        "grace_s": int(params["grace_s"]),
        "backfill": bool(params["backfill"]),
        "packing": params["packing"],
    }
    for key in ("borrow_limit_ratio", "lend_limit_ratio"):
        if params[key] is not None:
            policy[key] = float(params[key])
    if params["night_lend_limit_ratio"] is not None:
        start, end = bounds["night_hours"]
        policy["night"] = {"start_hour": start, "end_hour": end,
                           "lend_limit_ratio": float(params["night_lend_limit_ratio"])}
    if params.get("fair_half_life_s") is not None:
        policy["fair_half_life_s"] = int(params["fair_half_life_s"])
    factors = {k.split(":", 1)[1]: float(v) for k, v in sorted(params.items())
               if k.startswith("fair_weight:") and v != TODAY["fair_weight"]}
    if factors:
        policy["fair_share_factors"] = factors
    queueing = {k.split(":", 1)[1]: v for k, v in sorted(params.items())
                if k.startswith("queueing:") and v == "strict_fifo"}
    return {"policy": policy, "queueing": queueing}


def changes(params: Mapping, projects: Sequence[str]) -> dict:
    """The params that differ from today's (what "apply" turns into requests)."""
    base = today(projects)

    def was(key: str):  # a weight of a department the projects no longer name: today's is 1
        return base.get(key, TODAY["fair_weight"] if key.startswith("fair_weight:") else None)

    return {k: v for k, v in sorted(params.items()) if was(k) != v}
