"""The node map flags a node off its software baseline (DESIGN §15) in a real browser, in English
and Chinese: the badge names the reason, its tooltip the expected and reported versions."""

from __future__ import annotations

import pytest

from quotas.models import Node, SoftwareBaseline

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BADGE = {"en": "Off baseline: older than baseline", "zh-hans": "偏离基线：低于基线"}


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_the_node_map_flags_the_node_below_its_baseline(world, browser_for, shot, lang):
    Node.objects.filter(name="n0").update(driver_version="535.104.05", cuda_version="12.2")
    Node.objects.filter(name="n1").update(driver_version="535.104.05", cuda_version="12.4")
    SoftwareBaseline.objects.create(flavor=world.F, driver_version="535.104.05", cuda_version="12.4")
    n0, n1 = Node.objects.get(name="n0"), Node.objects.get(name="n1")
    page = browser_for(world.users["pb_member"], "pw-pb_member", lang)
    page.goto(page.base + "/nodes/?cluster=c1")
    flag = page.locator(f"#node-{n0.pk} mark.drift-older")
    assert flag.inner_text() == BADGE[lang]
    assert "12.4" in flag.get_attribute("title") and "12.2" in flag.get_attribute("title")
    assert page.locator(f"#node-{n1.pk} mark.drift").count() == 0
    shot(page, f"node-map-baseline-{lang}")
