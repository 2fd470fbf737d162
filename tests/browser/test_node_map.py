"""The node / GPU map in a real browser (issue 24), in English and Chinese: a member sees the map
with their job linked from its GPU cell; a platform admin opens a node from the map, cordons it
with a reason (the simulator process has it cordoned), sees the event, and returns it to service."""

from __future__ import annotations

import pytest

from quotas.models import Node, NodeEvent
from tests import job_runs

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

WORDS = {
    "en": {"map": "Node map", "apply": "Apply", "cordon": "Cordon", "back": "Return to service",
           "cordoned": "Cordoned", "ready": "Ready"},
    "zh-hans": {"map": "节点图", "apply": "执行", "cordon": "隔离", "back": "恢复服务",
                "cordoned": "已隔离", "ready": "就绪"},
}


def _sim_state(simserver, name: str) -> str:
    return {n.name: n.state for n in simserver.backend().list_nodes()}[name]


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_a_member_reads_the_map_and_an_admin_cordons_and_returns_a_node(
    world, browser_for, shot, simserver, lang
):
    words = WORDS[lang]
    job = job_runs.run(world, simserver, name="map-job")
    node = Node.objects.get(pk=job.placement[0][0][0])

    member = browser_for(world.users["pa1_member"], "pw-pa1_member", lang)
    member.goto(member.base + "/nodes/")
    assert words["map"] in member.inner_text("h1")
    cell = member.locator(f"#node-{node.pk} li.gpu-used")
    assert cell.count() == 1 and cell.locator("a").get_attribute("href") == f"/jobs/{job.pk}/"
    assert member.locator(f"#node-{node.pk} li.gpu-free").count() == 7
    assert member.locator(f'a[href="/nodes/{node.pk}/"]').count() == 0  # no actions for a member
    shot(member, f"node-map-member-{lang}")

    admin = browser_for(world.users["platform"], "pw-platform", lang)
    admin.goto(admin.base + "/nodes/?cluster=c1")
    with admin.expect_navigation():
        admin.click(f'a[href="/nodes/{node.pk}/"]')
    assert "map-job" in admin.inner_text("#node-jobs")
    admin.check('#node-action input[name=action][value=cordon]')
    admin.fill("#id_reason", "ECC errors on GPU 2")
    shot(admin, f"node-cordon-form-{lang}")
    with admin.expect_navigation():
        admin.click(f"#node-action button:has-text('{words['apply']}')")
    assert admin.inner_text("#node-state") == words["cordoned"]
    assert "ECC errors on GPU 2" in admin.inner_text("#node-events")
    assert _sim_state(simserver, node.name) == "cordoned"
    admin.goto(admin.base + "/nodes/?cluster=c1")
    assert admin.locator(f"#node-{node.pk}.node-state-cordoned").count() == 1
    assert "ECC errors on GPU 2" in admin.inner_text("#node-events")
    shot(admin, f"node-map-cordoned-{lang}")

    with admin.expect_navigation():
        admin.click(f'a[href="/nodes/{node.pk}/"]')
    admin.check('#node-action input[name=action][value=return]')
    admin.fill("#id_reason", "DIMM replaced")
    with admin.expect_navigation():
        admin.click(f"#node-action button:has-text('{words['apply']}')")
    assert admin.inner_text("#node-state") == words["ready"]
    assert words["back"] in admin.inner_text("#node-events")
    assert _sim_state(simserver, node.name) == "ready"
    shot(admin, f"node-returned-{lang}")
    assert list(NodeEvent.objects.order_by("at", "id").values_list("action", "reason")) == [
        ("cordon", "ECC errors on GPU 2"), ("return", "DIMM replaced")]
