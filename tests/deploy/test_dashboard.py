"""deploy/grafana/gpupool-dashboard.json: the five panels operators asked for are there, and every
PromQL expression names only series the portal's live /metrics really exposes — fetched from a
small world with queued, admitted jobs and a scheduling cycle behind it."""

from __future__ import annotations

import json
import re

import pytest

from jobs.scheduling.cycle import schedule_once
from tests import factories as fx
from tests.deploy.helpers import ROOT

pytestmark = pytest.mark.deploy

DASHBOARD = json.loads((ROOT / "deploy/grafana/gpupool-dashboard.json").read_text())
REQUIRED = {  # panel title -> series it must chart
    "Queue length": {"gpupool_queue_length"},
    "Admissions per minute": {"gpupool_admissions_total"},
    "Scheduling cycle time": {"gpupool_cycle_seconds"},
    "GPU usage vs quota per department": {"gpupool_gpus_in_use", "gpupool_quota"},
    "Idle GPUs": {"gpupool_gpus_unallocated", "gpupool_gpus_idle_allocated", "gpupool_idle_jobs"},
}
PROMQL_WORDS = {
    "sum", "avg", "min", "max", "count", "by", "without", "on", "ignoring", "group_left", "group_right",
    "rate", "irate", "increase", "delta", "max_over_time", "min_over_time", "avg_over_time", "topk",
    "bottomk", "clamp_min", "clamp_max", "and", "or", "unless", "offset", "bool", "label_replace", "abs",
}  # fmt: skip


def series_in(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    grouping labels, label matchers, strings or durations."""
    text = re.sub(r'"[^"]*"', "", expr)  # strings
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {n for n in names if n not in PROMQL_WORDS}


def exposed_series(text: str) -> set[str]:
    return {
        line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")
    }


@pytest.fixture
def live_metrics(client, db) -> set[str]:
    f = fx.flavor("A100")
    fx.nodes(f, 1, gpus=8)
    dept = fx.department("AI")
    proj = fx.project("llm", dept)
    fx.quota(f, dept, 8)
    fx.quota(f, proj, 8)
    fx.submit(proj, f, gpus=4, name="fits")
    fx.submit(proj, f, gpus=8, name="waits")  # 4 + 8 > 8 devices: stays queued
    schedule_once()
    response = client.get("/metrics")
    assert response.status_code == 200
    return exposed_series(response.content.decode())


def panels() -> list[dict]:
    return [p for p in DASHBOARD["panels"] if p.get("type") != "row"]


def test_the_required_panels_chart_their_series():
    by_title = {p["title"]: p for p in panels()}
    for title, wanted in REQUIRED.items():
        exprs = [t["expr"] for t in by_title[title]["targets"]]
        assert wanted <= set().union(*map(series_in, exprs)), title
    usage = by_title["GPU usage vs quota per department"]
    assert all("by (department)" in t["expr"] for t in usage["targets"])
    assert "rate(gpupool_admissions_total[" in by_title["Admissions per minute"]["targets"][0]["expr"]


def test_every_expression_names_only_series_the_portal_exposes(live_metrics):
    assert set().union(*REQUIRED.values()) <= live_metrics  # the world exercised every series
    for panel in panels():
        for target in panel["targets"]:
            assert series_in(target["expr"]) <= live_metrics, (panel["title"], target["expr"])
            assert series_in(target["expr"]), target["expr"]


def test_the_dashboard_imports_into_any_grafana():
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids)) and DASHBOARD["uid"] == "gpupool-portal"
    [variable] = DASHBOARD["templating"]["list"]
    assert (variable["type"], variable["query"]) == ("datasource", "prometheus")
    for panel in panels():  # no datasource uid of the machine it was made on
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])


def test_series_in_reads_promql():
    assert series_in('100 * sum by (department, flavor) (gpupool_gpus_in_use{flavor="A100"})') == {
        "gpupool_gpus_in_use"
    }
    assert series_in("60 * rate(gpupool_admissions_total[5m])") == {"gpupool_admissions_total"}
    assert series_in("max_over_time(gpupool_cycle_secs[15m])") == {"gpupool_cycle_secs"}  # a typo shows
