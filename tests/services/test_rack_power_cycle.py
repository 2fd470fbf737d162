"""Rack power through the portal (issue 36 item 3, DESIGN §18): the scheduling cycle reads a rack's
cap, its nodes' idle draw and their flavor's board power; a rack at its cap takes no further job
although GPUs are free and the node map says so; raising the cap lets the job in; DCGM power
from a real Prometheus scraping the simulator replaces the estimate."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import override_settings
from django.utils import translation

from jobs.clusters import tasks
from jobs.clusters.power import rack_power
from jobs.scheduling.cycle import explain_job, schedule_once
from jobs.scheduling.explaining import explain_text
from quotas.models import Node, Rack
from tests import factories as fx
from tests.services.test_gpu_metrics import _gpupool

pytestmark = pytest.mark.django_db(transaction=True)

IDLE, BOARD = 1000, 700


def _rack(sim_pool, cap_w: int | None) -> Rack:
    f, cluster, *_ = sim_pool
    f.board_watts = BOARD
    f.save(update_fields=["board_watts"])
    rack, _ = Rack.objects.get_or_create(cluster=cluster, name="r1")
    rack.power_cap_kw = None if cap_w is None else Decimal(cap_w) / 1000
    rack.save(update_fields=["power_cap_kw"])
    Node.objects.filter(cluster=cluster).update(rack=rack, idle_watts=IDLE)
    return rack


def _set_cap(rack: Rack, cap_w: int) -> None:
    rack.power_cap_kw = Decimal(cap_w) / 1000
    rack.save(update_fields=["power_cap_kw"])


def test_a_rack_at_its_cap_takes_no_job_until_the_cap_is_raised(sim_pool):
    f, cluster, pa, pb, _ = sim_pool
    rack = _rack(sim_pool, 2 * IDLE + 16 * BOARD)
    fx.submit(pa, f, gpus=8, name="big")
    assert schedule_once().admitted == 1
    [row] = rack_power(cluster)
    assert (row.planned_w, row.measured_w, row.at_cap) == (2 * IDLE + 8 * BOARD, 2 * IDLE + 8 * BOARD, False)

    _set_cap(rack, 2 * IDLE + 8 * BOARD)  # lowered to what runs now
    small = fx.submit(pb, f, gpus=1, name="small")
    assert schedule_once().admitted == 0  # 8 GPUs free on the other node
    small.refresh_from_db()
    assert small.state == "queued"
    why = explain_job(small)
    assert why["reason"] == "power" and why["numbers"]["racks_at_cap"] == 1
    with translation.override("en"):  # the text is read in English here
        assert explain_text(why, None).startswith(f"GPUs of {f.name} are free, but only in racks at or near")
    [row] = rack_power(cluster)
    assert row.at_cap and not row.over_cap

    _set_cap(rack, 2 * IDLE + 9 * BOARD)  # room for one more card
    assert schedule_once().admitted == 1
    [row] = rack_power(cluster)
    assert row.planned_w == 2 * IDLE + 9 * BOARD and row.at_cap


@pytest.mark.prometheus
def test_dcgm_power_replaces_the_estimate(sim_pool, prometheus_for):
    f, cluster, pa, pb, simserver = sim_pool
    rack = _rack(sim_pool, 2 * IDLE + 8 * BOARD)
    fx.submit(pa, f, gpus=8, name="big")  # admitted, not dispatched: its cards idle in the simulator
    assert schedule_once().admitted == 1
    fx.submit(pb, f, gpus=4, name="more")
    assert schedule_once().admitted == 0  # the estimate: the rack is at its cap

    prom = prometheus_for([simserver.url.removeprefix("http://")])
    prom.wait_for_scrapes(2)
    with override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": prom.url}):
        tasks.poll_metrics.apply()
    watts = dict(Node.objects.filter(cluster=cluster).values_list("name", "measured_watts"))
    assert watts == {"sim-0": 500, "sim-1": 500}  # 8 idle cards × 62.5 W each, as DCGM reports them
    [row] = rack_power(cluster)
    assert (row.measured_w, row.measured_nodes, row.at_cap) == (2 * IDLE + 1000, 2, False)
    # measured 3,000 W of a 7,600 W cap: power for 6 more boards, so the 4-card job goes in
    assert schedule_once().admitted == 1
    _set_cap(rack, 2 * IDLE + 1000)  # lowered to the measured draw: nothing more fits
    fx.submit(pb, f, gpus=1, name="one")
    assert schedule_once().admitted == 0
