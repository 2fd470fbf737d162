"""Quota limits that change over a replay's virtual clock (pure: no Django).

A SPEC.json may describe more than plain quotas (a history export, ``jobs.whatif.history``, writes
all of it; docs/replay.md, "History as a trace")::

    "origin": "2026-11-02T00:00:00+08:00",   # the wall-clock instant of trace time 0
    "zone": "Asia/Shanghai",                  # the clock quota windows recur on
    "quotas": {"d/p": {"A100": 8},
               "d": {"A100": {"quota": 16, "borrow_limit": 4, "lend_limit": 8}}},
    "windows": [{"tenant": "d", "flavor": "A100", "weekdays": [0, 1, 2, 3, 4, 5, 6],
                 "start": "20:00", "end": "08:00", "quota": null, "lend_limit": 12.8}],
    "loans": [{"lender": "d", "borrower": "e/q", "flavor": "A100", "amount": 4,
               "start_s": -3600, "end_s": 86400}]

Quantities are devices of the flavor (GPUs), as in ``quotas``; a ``null`` / absent borrow or lend
limit means none. ``windows`` are listed in the order the portal applies them (the first
covering window of a node wins); a loan is active on ``[start_s, end_s)`` seconds from the
origin. The rules are the portal's own: every instant's limits come from
``quotas.effective.effective_limits``, evaluated at the origin and at every window edge and loan
start or end; each distinct set becomes a limit change of a :class:`jobs.whatif.replay.sim.World`, at
which the replay rebuilds its engine as the service's warm engine does. Nothing is re-implemented.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from decimal import Decimal, InvalidOperation
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jobs.scheduler.scheduler import Limits as EngineLimits
from jobs.whatif.replay.schedule import edge_instants, limit_schedule
from jobs.whatif.replay.sim import World, project_quotas
from jobs.whatif.replay.spec import spec_quotas, tenant_tree
from quotas.effective import Limits, LoanSpan, Window, effective_limits

Key = tuple[str, str]  # (tenant path, flavor)
__all__ = ["SpecLimits", "needs_world", "parse", "world"]


@dataclass(frozen=True)
class SpecLimits:
    base: dict[Key, Limits]  # explicit entries of ``quotas`` (GPUs, Decimal)
    windows: dict[Key, list[Window]]
    loans_out: dict[Key, list[LoanSpan]]
    loans_in: dict[Key, list[LoanSpan]]
    origin: datetime
    zone: ZoneInfo

    def at(self, at: datetime, keys: Iterable[Key], base: Mapping[Key, Limits]) -> dict[Key, EngineLimits]:
        out = {}
        for key in keys:
            e = effective_limits(
                base[key],
                at=at,
                zone=self.zone,
                windows=self.windows.get(key, ()),
                loans_out=self.loans_out.get(key, ()),
                loans_in=self.loans_in.get(key, ()),
            )
            out[key] = EngineLimits(_milli(e.quota), _milli(e.borrow_limit), _milli(e.lend_limit))
        return out

    def instants(self, horizon: float, clocks: Iterable[time] = ()) -> list[datetime]:
        """Window edges on every day the replay covers, and loan starts and ends; ``clocks``:
        more times of day (a policy's night window) whose edges count too."""
        own = (c for ws in self.windows.values() for w in ws for c in (w.start, w.end))
        return edge_instants(self.origin, horizon, self.zone, [*clocks, *own],
                             (s for spans in self.loans_out.values() for s in spans))


def _milli(value: Decimal | None) -> int | None:
    # as jobs.scheduling.snapshot.milli: the production engine sees exactly these integers
    return None if value is None else int((value * 1000).to_integral_value())


def _dec(value, what: str) -> Decimal | None:
    if value is None:
        return None
    try:
        out = Decimal(str(value))
    except InvalidOperation as exc:
        raise ValueError(f"{what}: not a number: {value!r}") from exc
    if not out.is_finite() or out < 0:
        raise ValueError(f"{what}: must be a number ≥ 0, not {value!r}")
    return out


def _clock(value, what: str) -> time:
    try:
        return time.fromisoformat(str(value))
    except ValueError as exc:
        raise ValueError(f"{what}: not a time of day (HH:MM): {value!r}") from exc


def needs_world(data: Mapping) -> bool:
    """True when the SPEC says more than plain quotas (the replay then runs on a World)."""
    objects = any(isinstance(v, Mapping) for per in (data.get("quotas") or {}).values() for v in per.values())
    return bool(data.get("windows") or data.get("loans") or objects or data.get("shares"))


def fair_shares(data: Mapping, known: Iterable[str]) -> dict[str, float]:
    """The SPEC's ``shares`` (fair share, DESIGN §16): tree node → a number ≥ 0. Absent or
    empty: no fair share (an export made before shares existed replays as it did)."""
    raw = data.get("shares") or {}
    if not isinstance(raw, Mapping):
        raise ValueError("shares: an object of tree node → number")
    known = set(known)
    out = {}
    for node, value in raw.items():
        if node not in known:
            raise ValueError(f"shares: {node!r} is not a node of the SPEC's tree")
        out[node] = _number(f"shares[{node}]", value)
    return out


def fair_settings(data: Mapping, known: Iterable[str]) -> dict:
    """The SPEC's ``fair_share`` block (a history export writes it, docs/replay.md) as World
    keyword arguments: ``half_life_s``, ``entry_s``, ``norms`` (flavor → normalised cards per
    unit) and ``usage_at_start`` (tree node → decayed card-seconds). Absent: {}."""
    raw = data.get("fair_share")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError("fair_share: an object")
    known = set(known)
    out: dict = {}
    for key, name in (("half_life_s", "fair_half_life_s"), ("entry_s", "fair_entry_s")):
        if raw.get(key) is not None:
            out[name] = _number(f"fair_share.{key}", raw[key])
    out["fair_norms"] = {str(f): _number(f"fair_share.norms[{f}]", v)
                         for f, v in _mapping("fair_share.norms", raw.get("norms")).items()}
    usage = _mapping("fair_share.usage_at_start", raw.get("usage_at_start"))
    for node in usage:
        if node not in known:
            raise ValueError(f"fair_share.usage_at_start: {node!r} is not a node of the SPEC's tree")
    out["fair_usage_at_start"] = {n: _number(f"fair_share.usage_at_start[{n}]", v) for n, v in usage.items()}
    return out


def _mapping(what: str, value) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{what}: an object")
    return value


def _number(what: str, value) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what}: not a number: {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: not a number: {value!r}") from exc
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"{what}: must be a number ≥ 0, not {value!r}")
    return v


def parse(data: Mapping) -> SpecLimits:
    try:
        return _parse(data)
    except KeyError as exc:
        raise ValueError(f"a window or loan lacks the field {exc}") from exc
    except (TypeError, AttributeError) as exc:
        raise ValueError(f"malformed windows, loans or quotas: {exc}") from exc


def _parse(data: Mapping) -> SpecLimits:
    try:
        zone = ZoneInfo(str(data.get("zone") or "UTC"))
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"zone: unknown time zone {data.get('zone')!r}") from exc
    origin_text = data.get("origin")
    if (data.get("windows") or data.get("loans")) and not origin_text:
        raise ValueError('windows and loans need "origin": the wall-clock instant of trace time 0')
    try:
        origin = (
            datetime.fromisoformat(str(origin_text)) if origin_text else datetime(2023, 1, 1, tzinfo=zone)
        )
    except ValueError as exc:
        raise ValueError(f"origin: not an ISO date-time: {origin_text!r}") from exc
    if origin.tzinfo is None:
        raise ValueError("origin: give a UTC offset (e.g. 2026-11-02T00:00:00+08:00)")
    base: dict[Key, Limits] = {}
    for tenant, per in (data.get("quotas") or {}).items():
        for flavor, value in per.items():
            what = f"quotas[{tenant}][{flavor}]"
            v = value if isinstance(value, Mapping) else {"quota": value}
            base[(tenant, flavor)] = Limits(
                _dec(v.get("quota", 0), what),
                _dec(v.get("borrow_limit"), what),
                _dec(v.get("lend_limit"), what),
            )
    windows: dict[Key, list[Window]] = defaultdict(list)
    for k, w in enumerate(data.get("windows") or ()):
        what = f"windows[{k}]"
        days = frozenset(int(d) for d in w.get("weekdays", range(7)))
        if not days <= set(range(7)):
            raise ValueError(f"{what}: weekdays are 0 (Monday) to 6")
        windows[(w["tenant"], w["flavor"])].append(
            Window(
                days,
                _clock(w["start"], what),
                _clock(w["end"], what),
                _dec(w.get("quota"), what),
                _dec(w.get("lend_limit"), what),
            )
        )
    loans_out: dict[Key, list[LoanSpan]] = defaultdict(list)
    loans_in: dict[Key, list[LoanSpan]] = defaultdict(list)
    for k, loan in enumerate(data.get("loans") or ()):
        what = f"loans[{k}]"
        try:
            start, end = float(loan["start_s"]), float(loan["end_s"])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what}: start_s and end_s are seconds from the origin") from exc
        if end <= start:
            raise ValueError(f"{what}: end_s must be after start_s")
        span = LoanSpan(
            _dec(loan["amount"], what), origin + timedelta(seconds=start), origin + timedelta(seconds=end)
        )
        loans_out[(loan["lender"], loan["flavor"])].append(span)
        loans_in[(loan["borrower"], loan["flavor"])].append(span)
    return SpecLimits(base, dict(windows), dict(loans_out), dict(loans_in), origin, zone)


def world(data: Mapping, tenants: Iterable[str], horizon: float, policy: Mapping | None = None) -> World:
    """The replay's World for a SPEC: the tenant tree of the paths (``spec.tenant_tree``, a
    department without an entry gets the sum of its children's quotas, as without windows), the
    limits at trace time 0 and every change up to ``horizon`` seconds.

    ``policy`` (a replay ``policy`` object, :mod:`jobs.whatif.replay.policy`): at every instant the
    limits the SPEC has in force then (windows and loans included) are transformed by
    ``policy.limits_for`` — projects' quotas × ``overcommit_ratio``, departments keep theirs, a
    borrow / lend ratio the policy gives replaces the project's own limit (absent: the SPEC's is
    kept) — and inside the policy's ``night`` window (hours of the SPEC's ``zone``, the clock the
    portal's own windows recur on) the night ratios apply. The instants are the SPEC's edges and
    the night window's, one schedule (:func:`edge_instants`, :func:`limit_schedule`): an edge
    whose limits equal the previous ones is no change. Without a policy: exactly as before."""
    spec = parse(data)
    tree, derived = tenant_tree(set(tenants), spec_quotas(data))
    known = {n.id for n in tree}
    shares = fair_shares(data, known)
    fair = fair_settings(data, known) if shares else {}
    for key in (*spec.windows, *spec.loans_out, *spec.loans_in):
        if key[0] not in known:
            raise ValueError(f"{key[0]!r}: a window or loan names a tenant the SPEC does not have")
    base = {key: Limits(Decimal(lim.quota) / 1000) for key, lim in derived.items()}
    base.update(spec.base)
    for key in (*spec.windows, *spec.loans_out, *spec.loans_in):
        base.setdefault(key, Limits(Decimal(0)))
    keys = sorted(base)
    if policy is None:
        first, changes = limit_schedule(lambda at: spec.at(at, keys, base), spec.origin,
                                        spec.instants(horizon), horizon)
        return World(tree, first, (), changes, fair_shares=shares, **fair)
    from jobs.whatif.replay import policy as rules

    checked = rules.check(policy)
    night = checked.get("night")

    def limits_at(at: datetime) -> dict:
        local = at.astimezone(spec.zone)
        inside = bool(night) and rules.in_night(local.hour * 3600 + local.minute * 60 + local.second, night)
        return rules.limits_for(tree, spec.at(at, keys, base), checked, night=inside)

    clocks = (time(night["start_hour"]), time(night["end_hour"])) if night else ()
    first, changes = limit_schedule(limits_at, spec.origin, spec.instants(horizon, clocks), horizon)
    # idle-quota reuse is also judged against the projects' quotas as recorded (docs/advisor.md)
    today = project_quotas(tree, spec.at(spec.origin, keys, base))
    return World(tree, first, (), changes, reference_quotas=today, fair_shares=shares, **fair)


def load_world(path, jobs: Iterable, policy: Mapping | None = None) -> World | None:
    """The World of a SPEC.json file when it has windows, loans or limit objects, else None (the
    replay then builds its tree from plain quotas as before); ``policy``: see :func:`world`."""
    import json
    from pathlib import Path

    data = json.loads(Path(path).read_text())
    if not needs_world(data):
        return None
    jobs = list(jobs)
    return world(data, {j.tenant for j in jobs}, horizon(jobs), policy)


MAX_TAIL_S = 366 * 86400.0


def horizon(jobs: Iterable) -> float:
    """How far limit changes are computed: a queue can run long past the last submission (a
    backlog drains for hours), so up to the last submission plus every job's duration (the
    replay cannot end later while it has work: the engine runs something whenever jobs wait,
    unless quota keeps them out), and a week more, at most a year past the last submission.
    Changes after the replay's last event are skipped by the replay (they change nothing)."""
    jobs = list(jobs)
    last = max((j.submit_time for j in jobs), default=0.0)
    work = sum(j.duration or 0.0 for j in jobs)
    return last + min(work + 7 * 86400.0, MAX_TAIL_S)


def world_for(cluster, jobs, nodes, quotas, rules: Mapping | None, options):
    """(options, World or None, quotas) a replay of ``jobs`` runs with, under checked ``rules``
    (None: no policy). A SPEC (``cluster``: its path, or None) with windows, loans or limit
    objects gives its own World, the rules on top (:func:`world`); with plain quotas the rules
    build the World (``jobs.whatif.replay.policy.world``); without rules plain quotas stay quotas."""
    from jobs.whatif.replay import policy

    recorded = load_world(cluster, jobs, rules) if cluster else None
    if rules is None:
        return options, recorded, quotas
    if recorded is None:
        options, built = policy.world(jobs, nodes, quotas, rules, options)
        return options, built, None
    return policy.engine_settings(rules, options), recorded, quotas
