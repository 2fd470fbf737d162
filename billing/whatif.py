"""策略推演 — the what-if page's service (docs/replay.md, "What-if page").

One month of the portal's own job history is replayed twice through ``jobs.whatif.replay.sim`` (the
production engine on a virtual clock): once with the current configuration (baseline), once
with one policy change; the result compares queue delay, card-hours, quota utilisation and
cost per department. Nothing here decides a scheduling question: the inputs are built with
the snapshot builders (``jobs.scheduling.snapshot``) and the effective-limit rules (``quotas.effective``),
the decisions are the engine's.

Inputs:

* **jobs** — submitted in the month (site zone) and started at least once: shape (workers,
  GPUs per worker, shared milli), flavor, project, priority value, submit time, and the run
  duration of their last run from the events (the last ``→ running`` to the transition out
  of it; a job still running counts until now). Jobs that never ran are not replayed.
* **pool** — the current schedulable nodes with their topology (``jobs.scheduling.config.read_rows``).
* **limits** — the current quota tree: quota, borrow and lend limits, active quota windows
  (recurring), and loans that were approved (active or returned) by their own dates. The
  limits change over the virtual clock at every window edge and loan start/end; the replay
  rebuilds its engine at each change as the service's warm engine does.

Changes: ``lend`` (a window on department D: lower its quota by X %, or raise its lend limit
to X % of its quota, between HH:MM and HH:MM every day; it wins over D's own windows),
``overcommit`` (D's children's quotas — and their window quotas — of one flavor × R ÷ D's
current ratio), ``no_backfill`` and ``no_borrowing`` (the engine's flags; no borrowing =
the static policy).
"""

from __future__ import annotations

import traceback
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.models import Job, JobEvent
from jobs.scheduling.config import milli, read_rows
from jobs.states import JobState
from jobs.whatif.replay.metrics import percentile
from jobs.whatif.replay.schedule import edge_instants, limit_schedule
from jobs.whatif.replay.sim import EPOCH, Options, World, simulate
from jobs.whatif.replay.trace import TraceJob, TraceNode
from portal.models import Department, Project
from quotas.admission import Limits as EngineLimits
from quotas.effective import Limits, LoanSpan, Window, effective_limits
from quotas.models import Flavor, Loan, LoanState, QuotaNode, QuotaWindow
from quotas.selectors import site_zone

from .models import Rate, Resource, Tier, WhatIfChange, WhatIfRun, WhatIfState
from .periods import month_bounds
from .pricing import cost

CHANGES = tuple(WhatIfChange.values)
LEND_MODES = ("lend_limit", "quota")
TERMINAL = {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED}
STALE = timedelta(minutes=10)  # a running what-if without a heartbeat for this long is re-claimed
BASE_OPTIONS = Options(policy="pooled", detail=True)
__all__ = ["CHANGES", "Inputs", "department_rows", "execute", "inputs", "replay"]


# --- inputs ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Inputs:
    month: date
    start: datetime  # trace time 0 (the month's first instant, site zone)
    jobs: list[TraceJob]
    skipped: int  # jobs of the month that never ran
    nodes: list[TraceNode]
    world: World
    options: Options
    department_of: dict[str, int]  # tenant (tree project id) -> department id
    card_fraction: dict[str, Fraction]  # flavor name -> exact card fraction
    quota_card_hours: dict[int, float]  # department -> ∫ effective quota dt over the month (baseline)


def month_jobs(month: date, now: datetime) -> tuple[list[TraceJob], int]:
    start, end = month_bounds(month, site_zone())
    rows = list(
        Job.objects.filter(submitted_at__gte=start, submitted_at__lt=end)
        .order_by("submitted_at", "id")
        .values_list("id", "project_id", "flavor__name", "priority_class__value", "workers",
                     "gpus_per_worker", "gpu_milli", "submitted_at", "kind")
    )
    runs: dict[int, tuple[datetime | None, float | None]] = {}  # job -> (last start, last duration)
    events = (
        JobEvent.objects.filter(job_id__in=[r[0] for r in rows], kind="transition")
        .filter(Q(to_state=JobState.RUNNING) | Q(from_state=JobState.RUNNING))
        .order_by("job_id", "occurred_at", "id")
        .values_list("job_id", "from_state", "to_state", "occurred_at")
    )
    for jid, source, target, at in events.iterator():
        began, dur = runs.get(jid, (None, None))
        if target == JobState.RUNNING:
            runs[jid] = (at, None)
        elif source == JobState.RUNNING and began is not None:
            runs[jid] = (began, (at - began).total_seconds() if target in TERMINAL else None)
    out, skipped = [], 0
    for jid, project, flavor, priority, workers, gpus, gpu_milli, submitted, kind in rows:
        began, dur = runs.get(jid, (None, None))
        if began is None:
            skipped += 1
            continue
        if dur is None:  # still running (or last run interrupted): what is known so far
            dur = max(0.0, (now - began).total_seconds())
        out.append(TraceJob(
            str(jid), (submitted - start).total_seconds(), max(1.0, dur), gpus,
            gpu_milli if gpu_milli is not None else 1000, (flavor,), f"p{project}", kind, priority, workers,
        ))
    return out, skipped


def _key(node: QuotaNode) -> str:
    return f"p{node.project_id}" if node.project_id else f"d{node.department_id}"


@dataclass(frozen=True)
class _Config:
    """The quota tree's base values, windows and loans, by quota node id."""

    nodes: dict[int, QuotaNode]
    base: dict[int, Limits]
    windows: dict[int, list[Window]]
    loans_out: dict[int, list[LoanSpan]]
    loans_in: dict[int, list[LoanSpan]]

    def at(self, at: datetime, zone) -> dict[tuple[str, str], EngineLimits]:
        out = {}
        for pk, node in self.nodes.items():
            e = effective_limits(self.base[pk], at=at, zone=zone, windows=self.windows[pk],
                                 loans_out=self.loans_out[pk], loans_in=self.loans_in[pk])
            out[(_key(node), node.flavor.name)] = EngineLimits(
                milli(e.quota), milli(e.borrow_limit), milli(e.lend_limit))
        return out

    def instants(self, start: datetime, horizon: float, zone) -> list[datetime]:
        return edge_instants(start, horizon, zone,
                             (c for ws in self.windows.values() for w in ws for c in (w.start, w.end)),
                             (s for spans in self.loans_out.values() for s in spans))


def read_config() -> _Config:
    nodes = {n.pk: n for n in QuotaNode.objects.select_related("flavor", "project", "department")}
    windows: dict[int, list[Window]] = defaultdict(list)
    for w in QuotaWindow.objects.filter(active=True).order_by("id"):
        windows[w.quota_node_id].append(
            Window(frozenset(int(d) for d in w.weekdays), w.start_time, w.end_time, w.quota, w.lend_limit))
    loans_out: dict[int, list[LoanSpan]] = defaultdict(list)
    loans_in: dict[int, list[LoanSpan]] = defaultdict(list)
    for loan in Loan.objects.filter(state__in=[LoanState.ACTIVE, LoanState.RETURNED]):
        span = LoanSpan(loan.amount, loan.starts_at, loan.ends_at)
        loans_out[loan.lender_id].append(span)
        loans_in[loan.borrower_id].append(span)
    base = {pk: Limits(n.quota, n.borrow_limit, n.lend_limit) for pk, n in nodes.items()}
    return _Config(nodes, base, windows, loans_out, loans_in)


def apply_change(config: _Config, change: str, params: dict) -> _Config:
    """The configuration with a ``lend`` or ``overcommit`` change (others change engine flags)."""
    windows = {pk: list(ws) for pk, ws in config.windows.items()}
    windows = defaultdict(list, windows)
    base = dict(config.base)
    dept, flavor = params.get("department"), params.get("flavor")
    mine = [n for n in config.nodes.values()
            if n.department_id == dept and (flavor is None or n.flavor_id == flavor)]
    if change == "lend":
        share = Decimal(str(params["percent"])) / 100
        start, end = time.fromisoformat(params["start"]), time.fromisoformat(params["end"])
        for n in mine:
            q = config.base[n.pk].quota
            w = (Window(frozenset(range(7)), start, end, quota=q * (1 - share))
                 if params.get("mode") == "quota"
                 else Window(frozenset(range(7)), start, end, lend_limit=q * share))
            windows[n.pk] = [w, *windows[n.pk]]  # the first covering window wins
    elif change == "overcommit":
        for n in mine:
            factor = Decimal(str(params["ratio"])) / (n.overcommit_ratio or Decimal(1))
            for child in config.nodes.values():
                if child.flavor_id != n.flavor_id or not _child_of(child, dept):
                    continue
                base[child.pk] = replace(base[child.pk], quota=base[child.pk].quota * factor)
                windows[child.pk] = [w if w.quota is None else replace(w, quota=w.quota * factor)
                                     for w in windows[child.pk]]
    return replace(config, base=base, windows=windows)


def _child_of(node: QuotaNode, dept: int) -> bool:
    """A direct child of department ``dept`` in the tree: its project or its sub-department."""
    if node.project_id:
        return node.project.department_id == dept
    return node.department.parent_id == dept


def schedule(config: _Config, start: datetime, horizon: float, zone
             ) -> tuple[dict, tuple[tuple[float, dict], ...]]:
    """Limits at trace time 0 and every change until ``horizon`` (seconds)."""
    instants = config.instants(start, horizon, zone)
    return limit_schedule(lambda at: config.at(at, zone), start, instants, horizon)


def inputs(month: date, change: str, params: dict, *, now: datetime | None = None
           ) -> tuple[Inputs, Inputs]:
    """(baseline, with the change): what the two replays are fed."""
    now = now or timezone.now()
    zone = site_zone()
    start, end = month_bounds(month, zone)
    jobs, skipped = month_jobs(month, now)
    rows = read_rows()
    enodes = tuple(n for n in rows.nodes if n.schedulable)
    tnodes = [TraceNode(n.id, n.gpus, n.flavor) for n in enodes]
    tree = rows.tree
    departments = dict(Project.objects.values_list("id", "department_id"))
    department_of = {f"p{p}": d for p, d in departments.items()}
    fractions = {
        name: Fraction(top, bottom)
        for name, top, bottom in Flavor.objects.values_list(
            "name", "fraction_numerator", "fraction_denominator"
        )
    }
    month_s = (end - start).total_seconds()
    horizon = max([month_s, *(j.submit_time + (j.duration or 0) for j in jobs)])
    config = read_config()
    after_config = apply_change(config, change, params)
    out = []
    for cfg in (config, after_config):
        limits, changes = schedule(cfg, start, horizon, zone)
        out.append(World(tree, limits, enodes, changes))
    quota_hours = _quota_card_hours(out[0], month_s, fractions)
    options = {
        "no_backfill": replace(BASE_OPTIONS, backfill=False),
        "no_borrowing": replace(BASE_OPTIONS, policy="static"),
    }.get(change, BASE_OPTIONS)
    common = {"month": month, "start": start, "jobs": jobs, "skipped": skipped, "nodes": tnodes,
              "department_of": department_of, "card_fraction": fractions, "quota_card_hours": quota_hours}
    return (Inputs(world=out[0], options=BASE_OPTIONS, **common),
            Inputs(world=out[1], options=options, **common))


def _quota_card_hours(world: World, span: float, fractions: dict) -> dict[int, float]:
    """Per department: ∫ its effective quota (card units) over [0, span) of the baseline."""
    out: dict[int, float] = defaultdict(float)
    steps = [(0.0, world.limits), *((t, lim) for t, lim in world.changes if t < span)]
    for k, (t, limits) in enumerate(steps):
        until = steps[k + 1][0] if k + 1 < len(steps) else span
        for (node, flavor), lim in limits.items():
            if node.startswith("d"):
                share = fractions.get(flavor, Fraction(1))
                held = lim.quota / 1000 * share.numerator / share.denominator
                out[int(node[1:])] += held * (until - t) / 3600
    return dict(out)


# --- results --------------------------------------------------------------------------------------


def replay(inp: Inputs) -> dict:
    return simulate(inp.jobs, inp.nodes, options=inp.options, world=inp.world)


def current_prices(at: datetime) -> dict[tuple[str, str], Decimal]:
    """(flavor name, tier) -> the price per card-hour valid at ``at``."""
    rows = (
        Rate.objects.filter(
            valid_from__lte=at, tier__in=[Tier.STANDARD, Tier.ON_LOAN], resource=Resource.CARD
        )
        .order_by("flavor_id", "tier", "-valid_from")
        .distinct("flavor_id", "tier")
        .values_list("flavor__name", "tier", "price")
    )
    return {(f, t): p for f, t, p in rows}


def department_rows(inp: Inputs, result: dict, prices: dict) -> dict[int, dict]:
    """Per department (of the project): avg / p95 queue delay, card-hours, utilisation of its
    quota, cost (a line per flavor and tier, each rounded by the one rule, summed)."""
    waits: dict[int, list[float]] = defaultdict(list)
    jobs: dict[int, int] = defaultdict(int)
    for j in inp.jobs:
        dept = inp.department_of.get(j.tenant)
        jobs[dept] += 1
        if j.job_id in result["job_queue_delay_s"]:
            waits[dept].append(result["job_queue_delay_s"][j.job_id])
    hours: dict[int, float] = defaultdict(float)
    money: dict[int, Decimal] = defaultdict(lambda: Decimal("0.00"))
    unpriced: set[int] = set()
    for tenant, per in result["usage"].items():
        dept = inp.department_of.get(tenant)
        for flavor, use in per.items():
            frac = inp.card_fraction.get(flavor, Fraction(1))  # numerator first, divided last
            on_loan = Decimal(str(use["on_loan_gpu_hours"])) * frac.numerator / frac.denominator
            total = Decimal(str(use["gpu_hours"])) * frac.numerator / frac.denominator
            hours[dept] += float(total)
            for tier, card_hours in ((Tier.STANDARD, total - on_loan), (Tier.ON_LOAN, on_loan)):
                if card_hours <= 0:
                    continue
                price = prices.get((flavor, tier))
                if price is None:
                    unpriced.add(dept)
                else:
                    money[dept] += cost(card_hours, price)
    out = {}
    for dept in sorted(set(jobs) | set(hours)):
        quota = inp.quota_card_hours.get(dept, 0.0)
        w = waits.get(dept, [])
        out[dept] = {
            "jobs": jobs.get(dept, 0),
            "never_started": jobs.get(dept, 0) - len(w),
            "avg_queue_delay_s": sum(w) / len(w) if w else 0.0,
            "p95_queue_delay_s": percentile(w, 95),
            "card_hours": round(hours.get(dept, 0.0), 6),
            "quota_card_hours": round(quota, 6),
            "utilisation": hours.get(dept, 0.0) / quota if quota > 0 else None,
            "cost": str(money[dept]),
            "unpriced": dept in unpriced,
        }
    return out


def _overall(inp: Inputs, result: dict, rows: dict) -> dict:
    waits = list(result["job_queue_delay_s"].values())
    quota = sum(inp.quota_card_hours.values())
    hours = sum(r["card_hours"] for r in rows.values())
    return {
        "avg_queue_delay_s": sum(waits) / len(waits) if waits else 0.0,
        "p95_queue_delay_s": percentile(waits, 95),
        "card_hours": hours,
        "utilisation": hours / quota if quota else None,
        "cost": str(sum((Decimal(r["cost"]) for r in rows.values()), Decimal("0.00"))),
        "preemptions": result["preemptions"],
        "never_started": result["never_started"],
    }


def summarise(inputs_pair: tuple[Inputs, Inputs], results: tuple[dict, dict], prices: dict) -> dict:
    names = dict(Department.objects.values_list("id", "name"))
    before_rows = department_rows(inputs_pair[0], results[0], prices)
    after_rows = department_rows(inputs_pair[1], results[1], prices)
    depts = sorted(set(before_rows) | set(after_rows), key=lambda d: names.get(d, ""))
    keep = ("jobs", "finished", "never_started", "preemptions", "gpu_allocation_rate", "cycles",
            "wall_seconds")
    return {
        "jobs": len(inputs_pair[0].jobs),
        "skipped_never_ran": inputs_pair[0].skipped,
        "departments": [
            {"id": d, "name": names.get(d, str(d)), "before": before_rows.get(d), "after": after_rows.get(d)}
            for d in depts
        ],
        "before": _overall(inputs_pair[0], results[0], before_rows),
        "after": _overall(inputs_pair[1], results[1], after_rows),
        "replay": {"before": {k: results[0][k] for k in keep}, "after": {k: results[1][k] for k in keep}},
        "limit_changes": {"before": len(inputs_pair[0].world.changes),
                          "after": len(inputs_pair[1].world.changes)},
        "engine_epoch": EPOCH,
    }


# --- the run --------------------------------------------------------------------------------------


def claim(run_id: int) -> bool:
    """Take the run (queued, or running without a heartbeat for STALE): a conditional update,
    so two workers (a retried task) never run it twice at once, and a done run is left alone."""
    now = timezone.now()
    return bool(
        WhatIfRun.objects.filter(pk=run_id)
        .filter(Q(state=WhatIfState.QUEUED) | Q(state=WhatIfState.RUNNING, heartbeat_at__lt=now - STALE))
        .update(state=WhatIfState.RUNNING, heartbeat_at=now, progress=0, error="")
    )


def _progress(run_id: int, percent: int, step: str) -> None:
    WhatIfRun.objects.filter(pk=run_id).update(progress=percent, step=step, heartbeat_at=timezone.now())


def execute(run_id: int) -> str:
    """The Celery task's body: claim the run, build both inputs, replay twice, store the result.
    Returns the run's final state ("skipped" when another worker has it or it is done)."""
    if not claim(run_id):
        return "skipped"
    run = WhatIfRun.objects.get(pk=run_id)
    try:
        _progress(run_id, 5, gettext_noop("Reading the month's jobs and the configuration"))
        pair = inputs(run.month, run.change, run.params)
        _progress(run_id, 15, gettext_noop("Replaying with the current configuration"))
        before = replay(pair[0])
        _progress(run_id, 55, gettext_noop("Replaying with the change"))
        after = replay(pair[1])
        _progress(run_id, 95, gettext_noop("Comparing"))
        result = summarise(pair, (before, after), current_prices(timezone.now()))
    except Exception:  # the page shows the failure; the worker stays up
        with transaction.atomic():
            WhatIfRun.objects.filter(pk=run_id).update(
                state=WhatIfState.FAILED, error=traceback.format_exc(limit=5)[-4000:],
                finished_at=timezone.now())
        return WhatIfState.FAILED
    WhatIfRun.objects.filter(pk=run_id).update(
        state=WhatIfState.DONE, progress=100, step="", result=result, finished_at=timezone.now(),
        heartbeat_at=timezone.now())
    return WhatIfState.DONE


# --- the page: description, charts, table ---------------------------------------------------------


def describe(run: WhatIfRun) -> str:
    p = run.params or {}
    if run.change in ("lend", "overcommit"):
        dept = Department.objects.filter(pk=p.get("department")).values_list("name", flat=True).first() or "?"
        flavor = Flavor.objects.filter(pk=p.get("flavor")).values_list("name", flat=True).first()
    if run.change == "lend":
        values = {"dept": dept, "x": p.get("percent"), "start": p.get("start"), "end": p.get("end"),
                  "flavor": flavor or _("all flavors")}
        if p.get("mode") == "quota":
            text = _("%(dept)s's quota (%(flavor)s) lowered by %(x)s %% between %(start)s and %(end)s")
        else:
            text = _("%(dept)s lends up to %(x)s %% of its quota (%(flavor)s) between %(start)s and %(end)s")
        return text % values
    if run.change == "overcommit":
        return _("%(dept)s's overcommit ratio for %(flavor)s raised to %(ratio)s") % {
            "dept": dept, "flavor": flavor or "?", "ratio": p.get("ratio")}
    if run.change == "no_backfill":
        return _("Backfill off")
    return _("Borrowing off (static quotas)")


def _minutes(seconds: float) -> float:
    return round(seconds / 60, 2)


def _pct(value: float | None) -> float | None:
    return None if value is None else round(100 * value, 1)


def _delta(before, after) -> float | None:
    if before is None or after is None:
        return None
    return after - before


def charts(result: dict, currency: str) -> dict:
    """Grouped bars (before / after) per department, the table's rows and the headline deltas;
    built on the server like the reports' figures (``billing/charts.py``)."""
    import plotly.graph_objects as go

    from .charts import _layout

    depts = result["departments"]
    names = [d["name"] for d in depts]

    def value(d: dict, side: str, key: str):
        row = d[side]
        return None if row is None else row[key]

    metrics = [
        ("delay", _("Average queue delay per department"), _("Minutes"),
         lambda d, s: _minutes(value(d, s, "avg_queue_delay_s") or 0)),
        ("p95", _("95th percentile queue delay per department"), _("Minutes"),
         lambda d, s: _minutes(value(d, s, "p95_queue_delay_s") or 0)),
        ("utilisation", _("Utilisation of its quota per department"), _("Percent of quota card-hours"),
         lambda d, s: _pct(value(d, s, "utilisation"))),
        ("cost", _("Cost per department at the current rates"), currency,
         lambda d, s: float(value(d, s, "cost") or 0)),
    ]
    figures = []
    for key, title, unit, get in metrics:
        traces = [
            go.Bar(x=names, y=[get(d, "before") for d in depts], name=_("Current configuration")),
            go.Bar(x=names, y=[get(d, "after") for d in depts], name=_("With the change")),
        ]
        figure = go.Figure(traces, layout=_layout(title, _("Department"), unit, barmode="group"))
        figures.append({"id": f"chart-{key}", "key": key, "title": title,
                        "figure": figure.to_json() if depts else None})
    rows = []
    for d in depts:
        b, a = d["before"] or {}, d["after"] or {}
        rows.append({
            "name": d["name"],
            "jobs": b.get("jobs", a.get("jobs", 0)),
            "cells": [
                (_minutes(b.get("avg_queue_delay_s", 0)), _minutes(a.get("avg_queue_delay_s", 0))),
                (_minutes(b.get("p95_queue_delay_s", 0)), _minutes(a.get("p95_queue_delay_s", 0))),
                (round(b.get("card_hours", 0), 2), round(a.get("card_hours", 0), 2)),
                (_pct(b.get("utilisation")), _pct(a.get("utilisation"))),
                (b.get("cost", "0.00"), a.get("cost", "0.00")),
            ],
            "never_started": (b.get("never_started", 0), a.get("never_started", 0)),
        })
    before, after = result["before"], result["after"]
    headline = {
        "delay": (_minutes(before["avg_queue_delay_s"]), _minutes(after["avg_queue_delay_s"]),
                  _minutes(after["avg_queue_delay_s"] - before["avg_queue_delay_s"])),
        "p95": (_minutes(before["p95_queue_delay_s"]), _minutes(after["p95_queue_delay_s"]),
                _minutes(after["p95_queue_delay_s"] - before["p95_queue_delay_s"])),
        "utilisation": (_pct(before["utilisation"]), _pct(after["utilisation"]),
                        _delta(_pct(before["utilisation"]), _pct(after["utilisation"]))),
        "cost": (before["cost"], after["cost"], str(Decimal(after["cost"]) - Decimal(before["cost"]))),
    }
    unpriced = any((d["before"] or {}).get("unpriced") or (d["after"] or {}).get("unpriced") for d in depts)
    return {"charts": figures, "rows": rows, "headline": headline, "currency": currency, "unpriced": unpriced}
