"""A node cordoned by the health check in a real browser (issue 35 item 5), English and Chinese: an
XID error of one GPU, scraped by a real Prometheus from the simulator's DCGM exporter, cordons the
node at one poll; the node map shows it cordoned with the reason, its events show the health check
did it, and the job that ran there is on its way back to the queue."""

from __future__ import annotations

import pytest
from django.test import override_settings

from jobs.clusters import tasks
from quotas.models import Node
from tests import job_runs
from tests.services.test_gpu_metrics import _gpupool

pytestmark = [pytest.mark.browser, pytest.mark.prometheus, pytest.mark.django_db(transaction=True)]

WORDS = {
    "en": {"cordoned": "Cordoned", "unhealthy": "unhealthy", "by": "Cordoned by the health check"},
    "zh-hans": {"cordoned": "已隔离"},
}
REASON = "XID 79 on GPU 3"


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_a_node_cordoned_by_health_shows_its_reason_on_the_map(
    world, browser_for, shot, simserver, prometheus_for, lang
):
    words = WORDS[lang]
    job = job_runs.run(world, simserver, name="xid-job")
    node = Node.objects.get(pk=job.placement[0][0][0])
    simserver.backend().set_xid(node.name, 3, 79)
    prom = prometheus_for([simserver.url.removeprefix("http://")])
    prom.wait_for_scrapes(2)
    with override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": prom.url}):
        tasks.poll_metrics.apply()
    node.refresh_from_db()
    assert (node.state, node.health_reason) == ("cordoned", REASON)

    admin = browser_for(world.users["platform"], "pw-platform", lang)
    admin.goto(admin.base + "/nodes/?cluster=c1")
    card = admin.locator(f"#node-{node.pk}.node-state-cordoned")
    assert card.count() == 1
    assert words["cordoned"] in card.locator("mark.badge").first.inner_text()
    assert card.locator(".node-health").get_attribute("data-health-reason") == REASON
    assert REASON in card.locator(".node-health").inner_text()
    history = admin.inner_text("#node-events")
    assert REASON in history and node.name in history
    if lang == "en":  # the new words: the zh-hans catalogue gets them at the next regeneration
        assert words["unhealthy"] in card.inner_text() and words["by"] in history
    cell = admin.locator(f"#node-{node.pk} li.gpu").nth(job.placement[0][0][1])
    assert "xid-job" in cell.inner_text()  # still on the node: stopping, then requeued
    shot(admin, f"node-map-health-cordoned-{lang}")

    member = browser_for(world.users["pa1_member"], "pw-pa1_member", lang)
    member.goto(member.base + "/nodes/?cluster=c1")
    assert REASON in member.locator(f"#node-{node.pk} .node-health").inner_text()  # why is for all
    with admin.expect_navigation():
        admin.click(f'a[href="/nodes/{node.pk}/"]')
    assert admin.inner_text("#node-state") == words["cordoned"]
    assert REASON in admin.inner_text(".node-health") and REASON in admin.inner_text("#node-events")
    shot(admin, f"node-health-detail-{lang}")
