"""The domestic readiness report on the reports page (DESIGN §14, issue 23 item 5): a table and
a plotly figure per domestic flavor — coverage against 90 %, throughput against 80 % of the
reference, declared and measured — in English and Chinese."""

import json
from html import unescape

import pytest

from tests.readiness_world import mixed_fleet

pytestmark = pytest.mark.django_db


def _figure(html: str) -> dict:
    start = html.index('id="readiness-chart" data-plotly="') + len('id="readiness-chart" data-plotly="')
    return json.loads(unescape(html[start : html.index('"', start)]))


def test_the_report_compares_each_domestic_flavor_with_the_bar(world, page_client):
    mixed_fleet(world)
    html = page_client("pa1_member").get("/reports/?month=2026-11").content.decode()
    figure = _figure(html)
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["Throughput, declared"]["x"] == ["Ascend-910B", "MLU370"]  # no NVIDIA card
    assert traces["Throughput, declared"]["y"] == [80.0, 60.0]
    assert traces["Throughput, measured"]["y"] == [75.0, None]  # 300 s on the A100, 400 s here
    assert traces["Operator coverage, pytorch"]["y"] == [93.0, 85.0]
    assert traces["Operator coverage, mindspore"]["y"] == [98.0, None]
    assert sorted(s["y0"] for s in figure["layout"]["shapes"]) == [80, 90]
    table = html[html.index('class="striped readiness-table"') :]
    ascend = table[table.index('data-flavor="Ascend-910B"') : table.index('data-flavor="MLU370"')]
    assert "0.750" in ascend and "1 template, 1 runs" in ascend and "MLPerf Training v4.0" in ascend
    assert "<mark>no</mark>" in ascend  # measured below 80 %
    mlu = table[table.index('data-flavor="MLU370"') :]
    assert "below 0.8" in mlu and "pytorch 85 %" in mlu


def test_the_report_speaks_chinese(world, page_client):
    mixed_fleet(world)
    html = page_client("pa1_member", "zh-hans").get("/reports/?month=2026-11").content.decode()
    assert "国产卡就绪度" in html and "每个国产资源规格（华为昇腾" in html and "1 个模板，1 次运行" in html
    assert "吞吐量（声明）" in {t["name"] for t in _figure(html)["data"]}


def test_without_domestic_flavors_the_report_says_so(world, page_client):
    html = page_client("pa1_member").get("/reports/?month=2026-11").content.decode()
    assert "No active domestic flavor." in html
