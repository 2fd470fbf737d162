"""The fair-share report (issue 34, DESIGN §16) in a real browser, in English and Chinese: the tree
with its figures and the plotly chart drawn; a platform admin edits a project's weight — a bad value
is shown on the form and changes nothing, a good one is back on the report as the node's shares."""

from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.models import FairShareWeight
from tests.billing.conftest import History

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Words already in the catalogue (the new ones arrive with the lead's makemessages/compile).
CRUMB = {"en": "Quota tree", "zh-hans": "配额树"}


@pytest.fixture
def ran(world):
    """pb held 8 cards for the last hour."""
    history, now = History(world), timezone.now()
    job = history.job(world.pb, world.F, gpus=8, submitted=now - timedelta(hours=2))
    history.admit(job, now - timedelta(hours=1), flavor=world.F)
    history.start(job, now - timedelta(hours=1))
    history.end(job, now - timedelta(seconds=1))
    return world


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_the_report_and_a_weight_edit(ran, browser_for, shot, lang):
    page = browser_for(ran.users["platform"], "pw-platform", lang)
    errors = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(page.base + "/quotas/fair-share/")
    assert CRUMB[lang] in page.locator("nav[aria-label=breadcrumb]").inner_text()
    pb = page.locator(f"#fair-p{ran.pb.pk}")
    cells = pb.locator("td").all_inner_texts()
    assert cells[3].strip() == "8.00"  # raw usage: 8 card-hours in the last half-life
    assert cells[7].strip() == "3"  # A's two projects (no usage) go first
    page.locator("#fair-share-chart .main-svg").first.wait_for()  # plotly drew the chart
    shot(page, f"fair-share-report-{lang}")

    pb.locator("a.edit-weight").click()
    page.fill("input[name=weight]", "0")
    page.click("#fair-share-weight-form button[type=submit]")
    assert page.locator("input[name=weight]").get_attribute("aria-invalid") == "true"
    assert not FairShareWeight.objects.exists()
    shot(page, f"fair-share-weight-error-{lang}")
    page.fill("input[name=weight]", "100")
    page.click("#fair-share-weight-form button[type=submit]")
    page.wait_for_url(page.base + "/quotas/fair-share/")
    assert FairShareWeight.objects.get(project=ran.pb).weight == 100
    assert page.locator(f"#fair-p{ran.pb.pk} td").nth(1).inner_text().startswith("100.000")
    assert not errors, errors
