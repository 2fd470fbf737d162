"""The advisor page's figures and tables (issue 25), built on the server like the what-if's:
grouped bars per department (today / the best candidate) and the objective of every candidate."""

from __future__ import annotations

import plotly.graph_objects as go
from django.utils.translation import gettext as _

from jobs.charts import _LAYOUT


def _layout(title: str, x: str, y: str, **more) -> dict:
    return {**_LAYOUT, "height": 340, "margin": {"l": 60, "r": 20, "t": 50, "b": 60},
            "title": {"text": title, "x": 0, "xanchor": "left"},
            "xaxis": {"title": {"text": x}, "automargin": True},
            "yaxis": {"title": {"text": y}, "automargin": True, "rangemode": "tozero"}, **more}


def department_rows(before: dict, after: dict) -> list[dict]:
    rows = []
    for d, b in sorted(before["departments"].items()):
        a = after["departments"].get(d) or {}
        rows.append({"name": d, "jobs": b["jobs"],
                     "avg": (round(b["avg_queue_delay_s"], 1), round(a.get("avg_queue_delay_s", 0.0), 1)),
                     "p95": (round(b["p95_queue_delay_s"], 1), round(a.get("p95_queue_delay_s", 0.0), 1)),
                     "gpu_hours": (round(b["gpu_hours"], 1), round(a.get("gpu_hours", 0.0), 1))})
    return rows


def figures(before: dict, after: dict, candidates: list) -> list[dict]:
    depts = sorted(before["departments"])
    out = []
    for key, title in (("avg_queue_delay_s", _("Average queue delay per department")),
                       ("p95_queue_delay_s", _("95th percentile queue delay per department"))):
        today = [round(before["departments"][d][key], 1) for d in depts]
        best = [round((after["departments"].get(d) or {}).get(key, 0.0), 1) for d in depts]
        traces = [go.Bar(x=depts, y=today, name=_("Today")),
                  go.Bar(x=depts, y=best, name=_("Best candidate"))]
        fig = go.Figure(traces, layout=_layout(title, _("Department"), _("Seconds"), barmode="group"))
        out.append({"id": f"chart-{key}", "title": title, "figure": fig.to_json()})
    scored = [c for c in candidates if c.objective is not None]
    title = _("Objective of each candidate (lower is better; today = 1)")
    traces = []
    for feasible, name in ((True, _("Feasible")), (False, _("Infeasible"))):
        pts = [c for c in scored if bool(c.feasible) == feasible]
        traces.append(go.Scatter(x=[c.number for c in pts], y=[round(c.objective, 4) for c in pts],
                                 mode="markers", name=name))
    fig = go.Figure(traces, layout=_layout(title, _("Candidate"), _("Objective")))
    out.append({"id": "chart-objective", "title": title, "figure": fig.to_json()})
    return out
