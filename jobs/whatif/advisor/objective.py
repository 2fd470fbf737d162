"""The advisor's objective (issue 25): one number per candidate, lower is better, and whether the
candidate is feasible at all (pure: no Django). Definitions and weights: docs/advisor.md.

Every term is a ratio to today's replay (the baseline), so today scores exactly
Σ weights = 1.0 and a candidate below 1 is better on the weighted mix::

    objective = 0.35 · avg  + 0.15 · p95  + 0.15 · alloc + 0.25 · reuse + 0.10 · lost

    avg   = mean over departments d of (avg_d + 1 s) / (avg0_d + 1 s)     queue delay
    p95   = mean over departments d of (p95_d + 1 s) / (p95_0_d + 1 s)
    alloc = alloc0 / alloc                                                window allocation rate
    reuse = (1 − reuse) / (1 − reuse0)      idle quota left unused, both judged against TODAY's quotas
    lost  = (lost + H) / (lost0 + H), H = 1 % of today's GPU-hours used   preempted work lost

(the + 1 s keeps a department that never queues from dividing by zero; a candidate losing 1 % of
today's GPU-hours to preemptions doubles the ``lost`` term. Reuse is judged against today's
project quotas, not the candidate's: with its own, lowering every project's quota
(``overcommit_ratio`` < 1) would "raise reuse" by relabelling the same schedule as borrowing.)

Infeasible (whatever the objective) when, for any department d present today:

* **fairness**: p95_d > bound × max(p95_0_d, floor_s) — delays under ``floor_s`` (60 s by
  default) count as equal, so a department whose p95 today is the 1 s coalescing window is not
  held to 1.5 s;
* **guarantee**: any flavor's quota of d is below today's (its guaranteed quota shrank);
* **stranded jobs**: more jobs never started than today.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

WEIGHTS = {"avg": 0.35, "p95": 0.15, "alloc": 0.15, "reuse": 0.25, "lost": 0.10}
EPS_S = 1.0
# A candidate beats today when its objective is below this: the page shows three decimals, so
# every candidate offered reads 0.999 or less — never "1.000", as if it were an improvement.
BEATS_TODAY_BELOW = 0.9995


@dataclass(frozen=True)
class Rules:
    p95_bound: float = 1.5  # a department's p95 may grow to this × today's (with the floor)
    p95_floor_s: float = 60.0
    weights: Mapping[str, float] = field(default_factory=lambda: dict(WEIGHTS))


@dataclass(frozen=True)
class Verdict:
    objective: float
    feasible: bool
    terms: dict  # name -> ratio (before weighting)
    violations: tuple[str, ...]  # why infeasible, machine-readable
    worst_p95_ratio: float  # max over departments of p95_d / max(p95_0_d, floor)


def check_rules(p95_bound, p95_floor_s) -> Rules:
    for name, v, low in (("p95_bound", p95_bound, 1.0), ("p95_floor_s", p95_floor_s, 0.0)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not v >= low or v > 1e9:
            raise ValueError(f"{name}: a number ≥ {low:g}, not {v!r}")
    return Rules(float(p95_bound), float(p95_floor_s))


def evaluate(before: Mapping, after: Mapping, rules: Rules = Rules()) -> Verdict:
    """``before`` / ``after``: run summaries (:func:`jobs.whatif.advisor.scenario.summarise`)."""
    depts = sorted(before["departments"])
    b, a = before["departments"], after["departments"]
    missing = {"avg_queue_delay_s": 0.0, "p95_queue_delay_s": 0.0, "quota_gpus": {}}
    terms = {
        "avg": _mean([(a.get(d, missing)["avg_queue_delay_s"] + EPS_S) / (b[d]["avg_queue_delay_s"] + EPS_S)
                      for d in depts]),
        "p95": _mean([(a.get(d, missing)["p95_queue_delay_s"] + EPS_S) / (b[d]["p95_queue_delay_s"] + EPS_S)
                      for d in depts]),
        "alloc": before["window_gpu_allocation_rate"] / max(after["window_gpu_allocation_rate"], 1e-9),
        "reuse": (1 - reuse_today(after)) / max(1 - reuse_today(before), 1e-9),
        "lost": _lost_ratio(before, after),
    }
    objective = sum(rules.weights[k] * v for k, v in terms.items())
    violations, worst = [], 0.0
    for d in depts:
        ref = max(b[d]["p95_queue_delay_s"], rules.p95_floor_s)
        ratio = a.get(d, missing)["p95_queue_delay_s"] / ref if ref > 0 else 0.0
        worst = max(worst, ratio)
        if ratio > rules.p95_bound:
            violations.append(f"fairness:{d}")
        for flavor, q in b[d]["quota_gpus"].items():
            if a.get(d, missing)["quota_gpus"].get(flavor, 0.0) < q:
                violations.append(f"guarantee:{d}:{flavor}")
    if after["never_started"] > before["never_started"]:
        violations.append("never_started")
    return Verdict(objective, not violations, terms, tuple(violations), worst)


def beats_today(value: float | None) -> bool:
    """Whether a candidate's objective is better than today's (1.0) by what the page can show."""
    return value is not None and value < BEATS_TODAY_BELOW


def reuse_today(summary: Mapping) -> float:
    """Window idle-quota reuse judged against today's quotas (metrics.Reuse). A summary stored
    before that figure existed has only reuse of its own quotas, the same for today's settings."""
    return summary.get("window_idle_quota_reuse_ratio_today_quotas", summary["window_idle_quota_reuse_ratio"])


def _lost_ratio(before: Mapping, after: Mapping) -> float:
    h = max(0.01 * before["gpu_hours"], 1e-6)
    return (after["preempted_gpu_hours_lost"] + h) / (before["preempted_gpu_hours_lost"] + h)


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 1.0
