"""Plotly figures of the reports page, built on the server like ``jobs/charts.py``: the page
embeds each figure's JSON in a ``data-plotly`` attribute and ``static/js/charts.js`` draws it
with the vendored plotly.js. Every figure has a title and axis titles; a chart without data is
not drawn at all (the page says so instead), so each function returns None for no data."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from quotas.selectors import site_zone

from .reports import IdleJob, MachineHours, QuotaBar, WaitBox

_LAYOUT = {
    "template": "none",  # plotly's default template would add ~10 kB of JSON to every chart
    "height": 380,
    "margin": {"l": 60, "r": 20, "t": 50, "b": 110},
    # Below the x-axis title: the legend is placed in pixels under the plot, not over its title.
    "legend": {"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
    "font": {"size": 12},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
}


def _layout(title: str, x: str, y: str, **more) -> dict:
    return {
        **_LAYOUT,
        "title": {"text": title, "x": 0, "xanchor": "left"},
        "xaxis": {"title": {"text": x}, "automargin": True, **more.pop("xaxis", {})},
        "yaxis": {"title": {"text": y}, "automargin": True, "rangemode": "tozero", **more.pop("yaxis", {})},
        **more,
    }


def month_days(month: date) -> list[date]:
    nxt = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return [month + timedelta(days=i) for i in range((nxt - month).days)]


def daily_card_hours(month: date, rows, names: dict[int, str], title: str) -> str | None:
    """(a) Stacked bars: card-hours per day, one trace per department; days without usage are
    left out of the data (the axis still spans the whole month)."""
    if not rows:
        return None
    series: dict[int, dict[str, float]] = {}
    for dept, day, hours in rows:
        points = series.setdefault(dept, {})
        points[day.isoformat()] = points.get(day.isoformat(), 0.0) + round(float(hours), 3)
    traces = [
        go.Bar(x=list(points), y=list(points.values()), name=names.get(dept, str(dept)))
        for dept, points in sorted(series.items(), key=lambda kv: names.get(kv[0], ""))
    ]
    days = month_days(month)
    span = [f"{days[0].isoformat()} 00:00", f"{(days[-1] + timedelta(days=1)).isoformat()} 00:00"]
    layout = _layout(
        title,
        _("Day"),
        _("Card-hours"),
        barmode="stack",
        showlegend=True,
        xaxis={"type": "date", "range": span},
    )
    return go.Figure(traces, layout=layout).to_json()


def external_split(rows, names: dict[int, str], title: str) -> str | None:
    """Stacked bars per department: card-hours of portal jobs and of external jobs."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: names.get(r[0], ""))
    x = [names.get(dept, str(dept)) for dept, _p, _e in rows]
    traces = [
        go.Bar(x=x, y=[round(float(p), 3) for _d, p, _e in rows], name=_("Portal jobs")),
        go.Bar(x=x, y=[round(float(e), 3) for _d, _p, e in rows], name=_("External jobs")),
    ]
    layout = _layout(title, _("Department"), _("Card-hours"), barmode="stack", showlegend=True)
    return go.Figure(traces, layout=layout).to_json()


def machine_hours(rows: list[MachineHours], names: dict[int, str], title: str) -> str | None:
    """Grouped bars per department: core-hours (left axis) and GiB-hours (right axis) the
    allocations held, each beside the part beyond the share the cards include."""
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: names.get(r.department_id, ""))
    x = [names.get(r.department_id, str(r.department_id)) for r in rows]

    def values(field: str) -> list[float]:
        return [round(float(getattr(r, field)), 3) for r in rows]

    traces = [
        go.Bar(x=x, y=values("core_hours"), name=_("Core-hours"), offsetgroup="cores"),
        go.Bar(x=x, y=values("extra_core_hours"), name=_("Core-hours beyond the share"),
               offsetgroup="extra-cores"),
        go.Bar(x=x, y=values("gib_hours"), name=_("GiB-hours"), yaxis="y2", offsetgroup="gib"),
        go.Bar(x=x, y=values("extra_gib_hours"), name=_("GiB-hours beyond the share"), yaxis="y2",
               offsetgroup="extra-gib"),
    ]
    layout = _layout(
        title, _("Department"), _("Core-hours"), barmode="group", showlegend=True,
        yaxis2={"title": {"text": _("GiB-hours")}, "overlaying": "y", "side": "right", "rangemode": "tozero",
                "automargin": True},
    )
    return go.Figure(traces, layout=layout).to_json()


def quota_usage(bars: list[QuotaBar], title: str) -> str | None:
    """(b) Grouped bars per department: effective quota, used, borrowed (on loan), lent."""
    if not bars:
        return None
    x = [b.name for b in bars]
    traces = [
        go.Bar(x=x, y=[float(b.quota) for b in bars], name=_("Quota")),
        go.Bar(x=x, y=[float(b.used) for b in bars], name=_("Used")),
        go.Bar(x=x, y=[float(b.borrowed) for b in bars], name=_("Borrowed")),
        go.Bar(x=x, y=[float(b.lent) for b in bars], name=_("Lent")),
    ]
    return go.Figure(traces, layout=_layout(title, _("Department"), _("GPUs"), barmode="group")).to_json()


def node_utilisation(month: date, rows, title: str) -> str | None:
    """(c) Heatmap: mean utilisation of the allocated GPUs per node and day (a gap: no data)."""
    if not rows:
        return None
    days = month_days(month)
    nodes = sorted({name for name, _day, _v in rows})
    col = {d: i for i, d in enumerate(days)}
    row = {n: i for i, n in enumerate(nodes)}
    z: list[list[float | None]] = [[None] * len(days) for _n in nodes]
    for name, day, value in rows:
        z[row[name]][col[day]] = None if value is None else round(float(value), 1)
    trace = go.Heatmap(
        x=[d.isoformat() for d in days],
        y=nodes,
        z=z,
        zmin=0,
        zmax=100,
        colorscale="Viridis",
        colorbar={"title": {"text": "%"}},
        hoverongaps=False,
        name=_("GPU utilisation (%)"),
    )
    height = max(_LAYOUT["height"], 120 + 22 * len(nodes))
    layout = _layout(title, _("Day"), _("Node"), height=height, xaxis={"type": "date"})
    layout["yaxis"].pop("rangemode")
    return go.Figure([trace], layout=layout).to_json()


def queue_waits(boxes: list[WaitBox], title: str) -> str | None:
    """(d) One box per priority class from quantiles computed in SQL: whiskers at the 5th and
    95th percentile, box at the quartiles, line at the median; the mean is marked."""
    if not boxes:
        return None
    traces = []
    for b in boxes:
        p05, p25, p50, p75, p95 = (round(v, 2) for v in b.quantiles)
        label = f"{b.priority} (n={b.count})"
        traces.append(
            go.Box(
                x=[label],
                q1=[p25],
                median=[p50],
                q3=[p75],
                lowerfence=[p05],
                upperfence=[p95],
                mean=[round(b.mean, 2)],
                name=label,
                boxpoints=False,
            )
        )
    layout = _layout(title, _("Priority class"), _("Minutes queued"), showlegend=False)
    return go.Figure(traces, layout=layout).to_json()


def idle_jobs(jobs: list[IdleJob], title: str) -> str | None:
    """(e) Horizontal bars per job: card-hours, and the part of them its GPUs sat idle."""
    if not jobs:
        return None
    ordered = list(reversed(jobs))  # plotly draws the first category at the bottom
    y = [f"{j.name} #{j.id}" for j in ordered]
    text = [f"{j.mean_util:.0f} %" for j in ordered]
    traces = [
        go.Bar(
            y=y,
            x=[float(j.card_hours) for j in ordered],
            orientation="h",
            name=_("Card-hours"),
            text=text,
            textposition="auto",
        ),
        go.Bar(
            y=y,
            x=[float(j.idle_card_hours) for j in ordered],
            orientation="h",
            name=_("Idle card-hours (card-hours × (1 − utilisation))"),
        ),
    ]
    height = max(_LAYOUT["height"], 120 + 30 * len(jobs))
    layout = _layout(title, _("Card-hours"), _("Job"), barmode="group", height=height)
    layout["yaxis"].pop("rangemode")
    return go.Figure(traces, layout=layout).to_json()


def project_costs(rows, names: dict[int, str], projects: dict[int, str], currency: str, title: str):
    """(f) Bars per project, one trace (colour) per department."""
    if not rows:
        return None
    by_dept: dict[int, list[tuple[str, float]]] = {}
    fees = _("(department fees and credits)")
    for dept, project, amount in rows:
        label = projects.get(project, str(project)) if project is not None else fees
        by_dept.setdefault(dept, []).append((label, float(amount)))
    traces = []
    for dept, items in sorted(by_dept.items(), key=lambda kv: names.get(kv[0], "")):
        items.sort()
        traces.append(
            go.Bar(x=[i[0] for i in items], y=[i[1] for i in items], name=names.get(dept, str(dept)))
        )
    layout = _layout(title, _("Project"), _("Cost (%(currency)s)") % {"currency": currency}, showlegend=True)
    layout["yaxis"].pop("rangemode")
    return go.Figure(traces, layout=layout).to_json()


def domestic_readiness(rows, title: str) -> str | None:
    """Grouped bars per domestic flavor, in percent: throughput against the reference card
    (declared and measured) and operator coverage per framework, with the bars of the evaluation
    (80 % throughput, 90 % coverage) as dashed lines."""
    if not rows:
        return None
    names = [r.flavor.name for r in rows]
    traces = [
        go.Bar(x=names, y=[float(r.declared * 100) for r in rows], name=_("Throughput, declared")),
        go.Bar(
            x=names,
            y=[float(r.measured.ratio * 100) if r.measured else None for r in rows],
            name=_("Throughput, measured"),
        ),
    ]
    frameworks = sorted({c.framework for r in rows for c in r.coverages})
    for framework in frameworks:
        found = [{c.framework: c.coverage for c in r.coverages}.get(framework) for r in rows]
        traces.append(
            go.Bar(
                x=names,
                y=[None if v is None else float(v * 100) for v in found],
                name=_("Operator coverage, %(framework)s") % {"framework": framework},
            )
        )
    bars = [
        (80, _("%(pct)d %% of the reference card's throughput") % {"pct": 80}),
        (90, _("%(pct)d %% operator coverage") % {"pct": 90}),
    ]
    layout = _layout(
        title,
        _("Flavor"),
        _("Percent"),
        barmode="group",
        shapes=[
            {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": y, "y1": y, "line": {"dash": "dash"}}
            for y, _label in bars
        ],
        annotations=[
            {
                "xref": "paper",
                "x": 1,
                "y": y,
                "text": label,
                "showarrow": False,
                "xanchor": "right",
                "yanchor": "bottom",
            }
            for y, label in bars
        ],
    )
    return go.Figure(traces, layout=layout).to_json()


USAGE_BARS = 30  # the chart shows the largest groups; the table and the files have them all


def usage(rows, dimension: str, second: str | None, title: str) -> str | None:
    """The usage explorer: card-hours per first-level group (largest first), stacked by the
    second level when there is one, with normalised card-hours as a marker per group."""
    if not rows:
        return None
    order: list[str] = []
    hours: dict[str, float] = {}
    stacks: dict[str, dict[str, float]] = {}
    normalised: dict[str, float] = {}
    for row in rows:
        first = row.labels[0]
        if first not in hours:
            order.append(first)
        hours[first] = hours.get(first, 0.0) + float(row.card_hours)
        normalised[first] = normalised.get(first, 0.0) + float(row.normalised_card_hours)
        if second is not None:
            stack = stacks.setdefault(row.labels[1], {})
            stack[first] = stack.get(first, 0.0) + round(float(row.card_hours), 3)
    x = sorted(order, key=lambda k: -hours[k])[:USAGE_BARS]
    if second is None:
        traces = [go.Bar(x=x, y=[round(hours[k], 3) for k in x], name=_("Card-hours"))]
    else:
        shown = set(x)
        traces = [
            go.Bar(x=[k for k in x if k in points], y=[points[k] for k in x if k in points], name=name)
            for name, points in sorted(stacks.items())
            if shown & set(points)
        ]
    traces.append(
        go.Scatter(
            x=x,
            y=[round(normalised[k], 3) for k in x],
            name=_("Normalised card-hours"),
            mode="markers",
            marker={"symbol": "diamond", "size": 10, "color": "#222"},
        )
    )
    layout = _layout(title, dimension, _("Card-hours"), barmode="stack", showlegend=True)
    return go.Figure(traces, layout=layout).to_json()


def _local(at: datetime) -> str:
    return at.astimezone(site_zone()).strftime("%Y-%m-%d %H:%M")


def burn_down(status, title: str, currency: str) -> str | None:
    """A budget's month: the cumulative use at the end of each day so far (today: now), the
    forecast line from now to the month's end at the last 7 days' rate, and the budget line —
    in money when the budget has an amount, else in card-hours (``budgets.BudgetStatus``)."""
    found = status.forecast
    if found is None:
        return None
    days = list(status.days)
    start = datetime(status.month.year, status.month.month, 1)
    x = [start.strftime("%Y-%m-%d %H:%M")] + [
        f"{(day + timedelta(days=1)).isoformat()} 00:00" for day, _v in days[:-1]
    ]
    x.append(_local(found.at))
    y = [0.0] + [round(float(value), 2) for _d, value in days]
    end = _local(found.month_end)
    unit = _("Spend (%(currency)s)") % {"currency": currency} if status.in_money else _("Card-hours")
    traces = [
        go.Scatter(x=x, y=y, mode="lines+markers", name=_("Used so far")),
        go.Scatter(
            x=[x[-1], end],
            y=[y[-1], round(float(found.projected), 2)],
            mode="lines",
            line={"dash": "dash"},
            name=_("Forecast at the last 7 days' rate"),
        ),
        go.Scatter(
            x=[x[0], end],
            y=[round(float(status.limit), 2)] * 2,
            mode="lines",
            line={"dash": "dot"},
            name=_("Budget"),
        ),
    ]
    layout = _layout(title, _("Day"), unit, showlegend=True, xaxis={"type": "date", "range": [x[0], end]})
    return go.Figure(traces, layout=layout).to_json()
