"""Rack power on the node map in a real browser (issue 36 item 3), English and Chinese: a rack
whose cap was lowered to what runs there says new placements stop, with its planned and measured
draw; a job queued behind it waits although GPUs are free on that rack's nodes; each node names
its rack."""

from __future__ import annotations

from decimal import Decimal

import pytest

from jobs.scheduling.cycle import schedule_once
from quotas.models import Node, Rack
from tests import job_runs

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORDS = {
    "en": {"title": "Rack power", "at_cap": "At its power cap: no new placements here", "rack": "Rack"},
    "zh-hans": {"title": "机架功耗", "at_cap": "已达功耗上限：此处不再放置新任务", "rack": "机架"},
}
IDLE, BOARD = 1500, 700


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_the_node_map_shows_each_racks_power_and_a_lowered_cap(world, browser_for, shot, simserver, lang):
    words = WORDS[lang]
    job = job_runs.run(world, simserver, name="rack-job", gpus_per_worker=2)
    node = Node.objects.get(pk=job.placement[0][0][0])
    node.flavor.board_watts = BOARD
    node.flavor.save(update_fields=["board_watts"])
    capped, _ = Rack.objects.get_or_create(cluster=node.cluster, name="r-capped")
    mates = Node.objects.filter(cluster=node.cluster)
    mates.update(rack=capped, idle_watts=IDLE)
    planned = mates.count() * IDLE + 2 * BOARD
    capped.power_cap_kw = Decimal(planned) / 1000  # lowered to what runs there now
    capped.save(update_fields=["power_cap_kw"])
    assert sum(n.gpu_count for n in mates) > 2  # GPUs free in the rack
    waiting = job_runs.submit(world, name="behind-the-cap")
    schedule_once()
    waiting.refresh_from_db()
    assert waiting.state == "queued"

    admin = browser_for(world.users["platform"], "pw-platform", lang)
    admin.goto(admin.base + f"/nodes/?cluster={node.cluster.name}")
    section = admin.locator("#rack-power")
    assert words["title"] in section.locator("h2").inner_text()
    row = admin.locator("#rack-r-capped")
    assert row.get_attribute("data-planned-w") == str(planned)
    assert row.get_attribute("data-measured-w") == str(planned)  # no DCGM figure: the estimate
    assert words["at_cap"] in row.inner_text()
    assert f"{planned} W" in row.inner_text()
    assert f"{words['rack']} r-capped" in admin.locator(f"#node-{node.pk} header").inner_text()
    shot(admin, f"node-map-rack-power-{lang}")
