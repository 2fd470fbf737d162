"""An inference job's autoscaling section in a real browser, in English and Chinese: the last
decision and why, and the owner turning autoscaling on from the form."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from jobs.autoscale import QUOTA_SOME, _reason
from jobs.models import Job
from jobs.services import job_submit
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUERY = 'avg(gpupool_sim_requests_per_second{hpc_job="{job}"})'


def _service(world):
    return job_submit(
        actor=world.users["pa1_member"], project=world.pa1, name="llm-svc", kind="inference", flavor=world.F,
        priority_class=fx.priority(), image="vllm:0.6", workers=4, min_workers=1, gpus_per_worker=1,
    )


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_owner_turns_autoscaling_on_and_reads_the_last_decision(world, browser_for, shot, lang):
    svc = _service(world)
    page = browser_for(world.users["pa1_member"], "pw-pa1_member", lang)
    page.goto(f"{page.base}/jobs/{svc.pk}/")
    section = page.locator("section#autoscale")
    assert ("Autoscaling" if lang == "en" else "自动伸缩") in section.inner_text()
    page.fill("#id_query", QUERY)
    page.fill("#id_target", "10")
    with page.expect_navigation():
        page.click("form.autoscale-form button[type=submit]")
    svc.refresh_from_db()
    assert (svc.autoscale_query, svc.autoscale_target) == (QUERY, Decimal(10))
    assert f'hpc_job="gp-{svc.pk}"' in page.inner_text("code.autoscale-query")

    # What the pass records (tests/services/test_autoscale.py runs it for real), as the page shows it.
    decided = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
    reason = _reason(QUOTA_SOME, value="60", target="10", wanted=4, desired=3, current=1)
    Job.objects.filter(pk=svc.pk).update(autoscale_status={
        "value": "60", "target": "10", "replicas": 1, "desired": 3, "decided_at": decided.isoformat(),
        "reason": reason,
    })
    page.reload()
    assert page.inner_text("dd.autoscale-desired") == "3"
    expected = ("the quota allows 3" if lang == "en" else "配额只允许 3 个")
    assert expected in page.inner_text("dd.autoscale-reason")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, f"job-autoscale-{lang}")
