"""The domestic readiness chart in a real browser (issue 23 item 5): plotly.js draws the
reports page's readiness figure with a bar group per domestic flavor."""

import pytest

from tests.readiness_world import mixed_fleet

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_readiness_chart_draws_the_domestic_flavors_bars(world, browser_for, shot):
    mixed_fleet(world)
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(page.base + "/reports/?month=2026-11")
    page.wait_for_selector("#readiness-chart .main-svg")
    traces = page.evaluate("document.getElementById('readiness-chart').data.map(t => [t.name, t.x, t.y])")
    by_name = {name: (x, y) for name, x, y in traces}
    assert by_name["Throughput, declared"] == (["Ascend-910B", "MLU370"], [80, 60])
    assert by_name["Throughput, measured"][1][0] == 75
    # Drawn, not just embedded: four traces of a slot per flavor, and a visible bar for each value
    # (declared 2, measured 1, pytorch 2, mindspore 1); a missing value draws a bar of no height.
    assert page.locator("#readiness-chart .barlayer .trace").count() == 4
    drawn = page.evaluate(
        "Array.from(document.querySelectorAll('#readiness-chart .barlayer .point path'))"
        ".map(p => (p.getAttribute('d') || '').match(/^M[\\d.]+,([\\d.]+)V([\\d.]+)/))"
        ".filter(m => m && m[1] !== m[2]).length"
    )
    assert drawn == 6
    ticks = page.evaluate(
        "Array.from(document.querySelectorAll('#readiness-chart .xtick text')).map(t => t.textContent)"
    )
    assert ticks == ["Ascend-910B", "MLU370"]
    assert page.locator("table.readiness-table tr[data-flavor]").count() == 2
    assert errors == []
    shot(page, "readiness")
