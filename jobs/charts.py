"""Plotly figures for the pages, built on the server. A page embeds the figure's JSON in a
``data-plotly`` attribute and ``static/js/charts.js`` draws it with the vendored plotly.js, so
no inline script is needed and an htmx swap can carry a chart."""

from __future__ import annotations

from datetime import timedelta

import plotly.graph_objects as go
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs.models import JobGpuSample

_LAYOUT = {
    "template": "none",  # plotly's default template would add ~10 kB of JSON to every chart
    "height": 280,
    "margin": {"l": 50, "r": 50, "t": 10, "b": 40},
    "legend": {"orientation": "h", "y": -0.2},
    "font": {"size": 12},
    "paper_bgcolor": "rgba(0,0,0,0)",
    "plot_bgcolor": "rgba(0,0,0,0)",
}


def utilisation(samples: list[JobGpuSample]) -> str:
    """GPU utilisation (%) and framebuffer memory (GiB) per minute, in the site time zone. A
    minute without a sample breaks the line: missing data is a gap, never a zero."""
    x, util, memory = [], [], []
    previous = None
    for s in samples:
        if previous is not None and s.minute - previous > timedelta(minutes=1):
            x.append(None)
            util.append(None)
            memory.append(None)
        local = timezone.localtime(s.minute)
        x.append(local.strftime("%Y-%m-%d %H:%M"))
        util.append(round(s.gpu_util_pct, 1))
        memory.append(round(s.fb_used_mib / 1024, 2))
        previous = s.minute
    dots = _lone_points(x)
    fig = go.Figure(
        [
            go.Scatter(x=x, y=util, name=_("GPU utilisation (%)"), connectgaps=False, **dots),
            go.Scatter(
                x=x, y=memory, name=_("GPU memory used (GiB)"), yaxis="y2", connectgaps=False, **dots
            ),
        ],
        layout={
            **_LAYOUT,
            "yaxis": {"title": {"text": "%"}, "range": [0, 100]},
            "yaxis2": {"title": {"text": "GiB"}, "overlaying": "y", "side": "right", "rangemode": "tozero"},
        },
    )
    return fig.to_json()


def _lone_points(x: list) -> dict:
    """A line needs two points: a sample with a gap (or the edge) on both sides — a job's only
    minute so far — would draw nothing. Such samples get a marker, the others none."""
    last = len(x) - 1
    lone = [
        v is not None and (i == 0 or x[i - 1] is None) and (i == last or x[i + 1] is None)
        for i, v in enumerate(x)
    ]
    if not any(lone):
        return {"mode": "lines"}
    return {"mode": "lines+markers", "marker": {"size": [7 if flag else 0 for flag in lone]}}


def pool_usage(rows: list[tuple[str, float, float]]) -> str:
    """Per flavor: devices in use and free of the healthy capacity, stacked."""
    names = [name for name, _used, _cap in rows]
    used = [used for _name, used, _cap in rows]
    free = [max(cap - used, 0) for _name, used, cap in rows]
    fig = go.Figure(
        [
            go.Bar(x=names, y=used, name=_("In use"), marker_color="#1f77b4"),
            go.Bar(x=names, y=free, name=_("Free"), marker_color="#d5dbe3"),
        ],
        layout={**_LAYOUT, "barmode": "stack", "height": 240, "yaxis": {"title": {"text": _("GPUs")}}},
    )
    return fig.to_json()
