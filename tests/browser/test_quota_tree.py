"""The quota tree in a real browser (issue 24 item 6), in English and Chinese: switch between one
flavor and all, fold and unfold a subtree (remembered across a reload), the over-quota row, the
bars' figures on hover and for screen readers, and who borrows a node's idle quota."""

from decimal import Decimal

import pytest

from jobs.scheduling.cycle import schedule_once
from quotas.models import Flavor, QuotaNode
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

TEXT = {
    "en": {"pa": "In quota 4, on loan 2 (of which 2 borrowed from outside), lent 0; quota 4.",
           "over": "over quota", "hidden": "1 project you cannot see uses 2 (1 on-loan jobs)."},
    "zh-hans": {"pa": "配额内 4，借用中 2（其中 2 借自外部），借出 0；配额 4。",
                "over": "超出配额", "hidden": "另有 1 个您无权查看的项目借用 2（1 个借用中任务）。"},
}


@pytest.fixture
def borrowing(world):
    """pa borrows 2 from its sibling A1; pb borrows 2 from A (i.e. A1, pa1); a second flavor on B."""
    fx.submit(world.pa, world.F, gpus=4, name="pa-in")
    fx.submit(world.pb, world.F, gpus=8, name="pb-in")
    schedule_once()
    loan = fx.submit(world.pa, world.F, gpus=2, name="pa-loan")
    fx.submit(world.pb, world.F, gpus=2, name="pb-loan")
    schedule_once()
    slices = Flavor.objects.create(name="S-slice", vendor="nvidia", model="A100 1g", memory_mib=10240,
                                   fraction_numerator=1, fraction_denominator=7,
                                   k8s_resource_name="nvidia.com/mig-1g.10gb")
    QuotaNode.objects.create(flavor=slices, department=world.A, quota=Decimal(7))
    return loan


def _row(page, key):
    return page.locator(f"table.tree tbody tr[data-node='{key}']")


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_flavors_folding_over_quota_and_borrowers(world, borrowing, browser_for, shot, lang):
    text = TEXT[lang]
    page = browser_for(world.users["a_admin"], "pw-a_admin", lang)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(page.base + "/quotas/?flavor=F")
    pa, a1, pa1, a = (f"project-{world.pa.pk}", f"department-{world.A1.pk}", f"project-{world.pa1.pk}",
                      f"department-{world.A.pk}")

    # The over-quota row is marked; the bar's figures are its title and hidden text.
    assert page.locator("table.tree tbody tr.over-quota").count() == 1
    assert "over-quota" in _row(page, pa).get_attribute("class")
    assert text["over"] in _row(page, pa).inner_text()
    bar = _row(page, pa).locator(".qbar")
    assert bar.get_attribute("title") == text["pa"]
    assert bar.locator(".visually-hidden").text_content() == text["pa"]
    assert float(bar.locator("rect.q-loan").get_attribute("width")) > 0

    # Who borrows from A1: pa by name with its job; B's project counted, not named.
    _row(page, a1).locator("details.borrowers summary").click()
    listing = _row(page, a1).locator(".borrower-list")
    listing.wait_for()
    assert "Project a" in listing.inner_text() and "Project b" not in listing.inner_text()
    assert listing.locator(f"a[href='/jobs/{borrowing.pk}/']").count() == 1
    assert text["hidden"] in listing.inner_text()
    shot(page, f"quota-tree-borrowers-{lang}")

    # Fold A: its subtree goes; a reload remembers it; unfold brings it back.
    page.click(f"button[data-tree-toggle='{a}']")
    assert not _row(page, pa).is_visible() and not _row(page, pa1).is_visible()
    assert _row(page, a).is_visible()
    page.reload()
    assert not _row(page, a1).is_visible()
    assert page.get_attribute(f"button[data-tree-toggle='{a}']", "aria-expanded") == "false"
    shot(page, f"quota-tree-folded-{lang}")
    page.click(f"button[data-tree-toggle='{a}']")
    assert _row(page, pa1).is_visible() and _row(page, pa).is_visible()

    # All flavors: a grid with a column per flavor held; then back to one flavor.
    with page.expect_navigation():
        page.select_option("select[name=flavor]", value="all")
    assert page.url.endswith("?flavor=all")
    heads = page.locator("table.tree thead th").all_inner_texts()
    assert heads[1:-1] == ["F", "S-slice"]  # then the fair-share column (issue 34)
    assert page.locator("table.tree thead th").last.get_attribute("class") == "fair-share"
    assert "0 / 7" in _row(page, a).inner_text() and "6 / 8" in _row(page, a).inner_text()
    assert "over-quota" in _row(page, pa).get_attribute("class")
    shot(page, f"quota-tree-all-{lang}")
    with page.expect_navigation():
        page.select_option("select[name=flavor]", value="S-slice")
    assert page.locator("table.tree tbody tr").count() == 1  # only A holds slices
    assert errors == []
