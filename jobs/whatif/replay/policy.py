"""The ``policy`` key of a replay (issue 25, the policy advisor): quota rules and engine
settings a what-if changes, applied to the replay's inputs (pure: no Django).

``SPEC.json`` (or ``replay --policy-file``) may carry one top-level ``policy`` object; every
key is optional and an absent key keeps what the replay does today::

    {"policy": {
        "overcommit_ratio": 1.2,        # each department hands its projects quota × this
        "borrow_limit_ratio": 0.5,      # a project's borrow_limit = ratio × its quota (null: no cap)
        "lend_limit_ratio": 0.8,        # a project's lend_limit = ratio × its quota (null: all)
        "night": {"start_hour": 20, "end_hour": 8,        # a daily window (engine clock, UTC)
                  "borrow_limit_ratio": null, "lend_limit_ratio": 1.0},
        "grace_s": 30,                  # every priority class's grace period
        "backfill": true,               # EASY backfill on / off
        "packing": "fragmentation_aware" | "best_fit",
        "fair_half_life_s": 86400,      # fair share on, usage decaying with this half-life (0: none)
        "fair_entry_s": 3600,           # what an admission charges at once (with fair share)
        "fair_share_factors": {"ai": 2}}}  # a department's shares × this (fair share on)

Decisions (docs/advisor.md):

* **Departments keep their quota.** ``overcommit_ratio`` scales the *projects'* quotas (floored
  to whole milli-GPUs); each department's own quota node keeps the sum it had (DESIGN §3: the
  ratio lets the children's quotas add up to ratio × the parent's). Below 1 a department keeps
  part of its quota unassigned, shared by its projects on loan.
* Limits are per project and a ratio of the project's (new) quota; departments stay unlimited.
* ``night`` is a quota window (DESIGN §3.8) on the engine's virtual clock — the replay's
  ``EPOCH`` + trace time, UTC. Its limits replace the day ones inside the window; limit changes
  are :class:`jobs.whatif.replay.sim.World` changes, so the engine is rebuilt at each edge exactly as
  the warm engine is when a window opens.
* ``fair_half_life_s`` / ``fair_entry_s`` (DESIGN §16) turn fair share on for the replay with that
  half-life / entry charge: the input's shares when it has them (a history export's), else each
  tree node's quota (the portal's default shares). They win over a history export's own settings,
  so the advisor can ask "what if the centre's half-life were a day?". From 0 (no decay / no
  entry charge) to 3,650 days.
* ``fair_share_factors`` (department tree id → a number > 0, at most 100) multiplies those
  departments' shares — what a platform admin's weight does in the portal, as a factor of the
  default so that one advisor dimension means the same for every department. It turns fair share
  on too; a name that is not a department of the replay's tree is an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from jobs.scheduler.scheduler import Limits, TreeNode

PACKING = {"fragmentation_aware": True, "best_fit": False}
KEYS = ("overcommit_ratio", "borrow_limit_ratio", "lend_limit_ratio", "night", "grace_s", "backfill",
        "packing", "fair_half_life_s", "fair_entry_s", "fair_share_factors")
DAY = 86_400.0
FAIR_MAX_S = 3650 * DAY  # ten years: longer is no decay at all, which 0 says


def check(policy: Mapping) -> dict:
    """The policy, validated: unknown keys and out-of-range values are errors, never clamped."""
    if not isinstance(policy, Mapping):
        raise ValueError("policy: give a JSON object")
    unknown = sorted(set(policy) - set(KEYS))
    if unknown:
        raise ValueError(f"policy: unknown key(s) {', '.join(unknown)} (known: {', '.join(KEYS)})")
    out = dict(policy)
    if "overcommit_ratio" in out:
        _number(out, "overcommit_ratio", low=0.1, high=10.0)
    for key in ("borrow_limit_ratio", "lend_limit_ratio"):
        if out.get(key) is not None:
            _number(out, key, low=0.0, high=100.0)
    if "grace_s" in out:
        _number(out, "grace_s", low=0.0, high=DAY)
    if "backfill" in out and not isinstance(out["backfill"], bool):
        raise ValueError("policy.backfill: true or false")
    if "packing" in out and out["packing"] not in PACKING:
        raise ValueError(f"policy.packing: one of {', '.join(PACKING)}")
    if "night" in out:
        out["night"] = _night(out["night"])
    for key in ("fair_half_life_s", "fair_entry_s"):
        if key in out:
            _number(out, key, low=0.0, high=FAIR_MAX_S)
    if "fair_share_factors" in out:
        out["fair_share_factors"] = _factors(out["fair_share_factors"])
    return out


def _factors(factors) -> dict[str, float]:
    if not isinstance(factors, Mapping) or not all(isinstance(k, str) for k in factors):
        raise ValueError("policy.fair_share_factors: an object of department → number")
    for node, v in factors.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not 0 < v <= 100:
            raise ValueError(f"policy.fair_share_factors[{node}]: a number above 0, at most 100, not {v!r}")
    return {k: float(v) for k, v in factors.items()}


def _number(d: Mapping, key: str, *, low: float, high: float) -> float:
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not low <= v <= high:
        raise ValueError(f"policy.{key}: a number from {low:g} to {high:g}, not {v!r}")
    return float(v)


def _night(night: Mapping) -> dict:
    if not isinstance(night, Mapping):
        raise ValueError("policy.night: give a JSON object")
    unknown = sorted(set(night) - {"start_hour", "end_hour", "borrow_limit_ratio", "lend_limit_ratio"})
    if unknown:
        raise ValueError(f"policy.night: unknown key(s) {', '.join(unknown)}")
    out = dict(night)
    for key in ("start_hour", "end_hour"):
        if key not in out or isinstance(out[key], bool) or not isinstance(out[key], int) \
                or not 0 <= out[key] <= 23:
            raise ValueError(f"policy.night.{key}: a whole hour from 0 to 23")
    if out["start_hour"] == out["end_hour"]:
        raise ValueError("policy.night: start_hour and end_hour must differ")
    for key in ("borrow_limit_ratio", "lend_limit_ratio"):
        if out.get(key) is not None:
            _number({f"night.{key}": out[key]}, f"night.{key}", low=0.0, high=100.0)
    return out


def engine_settings(policy: Mapping, options):
    """``options`` (a :class:`jobs.whatif.replay.sim.Options`) with the policy's engine settings."""
    changes = {}
    if "grace_s" in policy:
        changes["grace"] = float(policy["grace_s"])
    if "backfill" in policy:
        changes["backfill"] = bool(policy["backfill"])
    if "packing" in policy:
        changes["fragmentation_aware"] = PACKING[policy["packing"]]
    if "fair_half_life_s" in policy or "fair_entry_s" in policy:
        # fair share on (quota shares when the input has none); the policy's settings win over
        # a history export's own
        changes.update(fair_share=True, fair_shares_from_quotas=True, fair_from_spec=False)
        changes["fair_half_life_s"] = float(policy.get("fair_half_life_s", options.fair_half_life_s))
        changes["fair_entry_s"] = float(policy.get("fair_entry_s", options.fair_entry_s))
    if policy.get("fair_share_factors"):
        changes.update(fair_share=True, fair_shares_from_quotas=True,
                       fair_share_factors=dict(policy["fair_share_factors"]))
    return replace(options, **changes)


def limits_for(tree: tuple[TreeNode, ...], base: Mapping[tuple[str, str], Limits], policy: Mapping,
               *, night: bool = False) -> dict[tuple[str, str], Limits]:
    """The limits under ``policy`` (``night``: inside its window). Departments keep ``base``."""
    kinds = {n.id: n.kind for n in tree}
    ratio = float(policy.get("overcommit_ratio", 1.0))
    rules = dict(policy)
    if night and policy.get("night"):
        rules.update({k: v for k, v in policy["night"].items() if k.endswith("_ratio")})
    out = {}
    for key, lim in base.items():
        if kinds.get(key[0]) != "project":
            out[key] = lim
            continue
        quota = math.floor(lim.quota * ratio)
        borrow, lend = lim.borrow_limit, lim.lend_limit
        if "borrow_limit_ratio" in rules:
            borrow = _limit(rules["borrow_limit_ratio"], quota)
        if "lend_limit_ratio" in rules:
            lend = _limit(rules["lend_limit_ratio"], quota)
        out[key] = Limits(quota, borrow, lend)
    return out


def _limit(ratio: float | None, quota: int) -> int | None:
    return None if ratio is None else math.floor(float(ratio) * quota)


def in_night(t_epoch: float, night: Mapping) -> bool:
    """Whether the engine time ``t_epoch`` (seconds since 1970, UTC) is inside the window."""
    hour = (t_epoch % DAY) / 3600
    start, end = night["start_hour"], night["end_hour"]
    return start <= hour < end if start < end else hour >= start or hour < end


def department_quotas(tree: tuple[TreeNode, ...], limits: Mapping[tuple[str, str], Limits]
                      ) -> dict[str, dict[str, float]]:
    """Top-level departments' quotas in GPUs per flavor (what the guarantee constraint keeps)."""
    kinds = {n.id: (n.kind, n.parent_id) for n in tree}
    out: dict[str, dict[str, float]] = {}
    for (node, flavor), lim in sorted(limits.items()):
        kind, parent = kinds.get(node, (None, None))
        if kind == "department" and parent is None:
            out.setdefault(node, {})[flavor] = lim.quota / 1000
    return out


def world(jobs, nodes, quotas, policy: Mapping, options):
    """(options, :class:`jobs.whatif.replay.sim.World`) replaying ``jobs`` under ``policy``: the tenant
    tree and quotas the replay would use (derived when ``quotas`` is None, as ``simulate``
    derives them), with the policy's limits and, for a ``night`` window, a limit change at each
    of its edges from the first submit to the last possible finish."""
    from jobs.whatif.replay import sim
    from jobs.whatif.replay.spec import capacity, derive_quotas, tenant_tree

    policy = check(policy)
    flavors = sim.assign_flavors(jobs, nodes)
    runnable = [j for j in jobs if j.job_id in flavors]
    horizon = max((j.submit_time + (j.duration or 0.0) for j in runnable), default=0.0)
    if quotas is None:  # the same derivation as simulate's, so the baseline is unchanged
        quotas = derive_quotas(runnable, flavors, capacity(nodes), horizon, options.quota_split)
    tree, base = tenant_tree({j.tenant for j in runnable}, quotas)
    today = sim.project_quotas(tree, base)  # reuse is also judged against these
    day = limits_for(tree, base, policy)
    night = policy.get("night")
    t0 = min((j.submit_time for j in runnable), default=0.0)
    if not night:
        return engine_settings(policy, options), sim.World(tree, day, reference_quotas=today)
    from datetime import UTC, datetime, time

    from jobs.whatif.replay.schedule import edge_instants, limit_schedule

    dark = limits_for(tree, base, policy, night=True)

    def limits_at(at):
        return dark if in_night(at.timestamp(), night) else day

    # the one edge schedule of the what-if page and the history replay (jobs.whatif.replay.limits)
    start, span = datetime.fromtimestamp(sim.EPOCH + t0, UTC), horizon - t0
    clocks = (time(night["start_hour"]), time(night["end_hour"]))
    first, changes = limit_schedule(limits_at, start, edge_instants(start, span, UTC, clocks, ()), span)
    changes = tuple((t0 + t, limits) for t, limits in changes)
    return engine_settings(policy, options), sim.World(tree, first, changes=changes, reference_quotas=today)

