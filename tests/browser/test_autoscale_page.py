"""An inference job's autoscaling section in a real browser, in English and Chinese: the last
decision and why, and the owner turning autoscaling on from the form."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from jobs.models import Job
from jobs.scheduling.autoscale import QUOTA_SOME, _reason
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


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_autoscaling_is_set_in_the_submit_form_for_inference_jobs(world, browser_for, shot, lang):
    fx.priority()
    page = browser_for(world.users["pa1_member"], "pw-pa1_member", lang)
    page.goto(f"{page.base}/jobs/new/")
    fields = page.locator("#autoscale-fields")
    assert not fields.is_visible()  # training is preselected
    page.fill("#id_name", "llm-svc")
    page.select_option("#id_project", label="Project a1 (pa1)")
    page.select_option("#id_flavor", label="F")
    page.select_option("#id_kind", "inference")
    page.wait_for_selector("#autoscale-fields", state="visible")
    legend = "Autoscaling from load" if lang == "en" else "根据负载自动伸缩"
    assert legend in fields.inner_text()
    page.fill("#id_workers", "4")
    page.fill("#id_min_workers", "1")
    page.fill("#id_gpus_per_worker", "1")
    page.fill("#id_image", "vllm:0.6")
    page.fill("#id_autoscale_query", "sum(up)")  # names no job
    page.fill("#id_autoscale_target", "10")
    page.locator("#id_image").click()  # leaving the field fires "change": htmx validates
    page.wait_for_selector("#id_autoscale_query-error")
    assert "{job}" in page.inner_text("#id_autoscale_query-error")
    page.fill("#id_autoscale_query", QUERY)
    page.fill("#id_autoscale_cooldown_seconds", "120")
    page.locator("#id_image").click()
    page.wait_for_selector("#id_autoscale_query-error", state="detached")
    # Another kind hides the fields (and does not send them); back to inference, they are kept.
    page.select_option("#id_kind", "training")
    page.wait_for_selector("#autoscale-fields", state="hidden")
    page.select_option("#id_kind", "inference")
    page.wait_for_selector("#autoscale-fields", state="visible")
    assert page.input_value("#id_autoscale_query") == QUERY
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, f"job-submit-autoscale-{lang}")
    assert Job.objects.count() == 0  # live validation wrote nothing
    with page.expect_navigation():
        page.click("main form button.submit")
    job = Job.objects.get(name="llm-svc")
    assert page.url.endswith(f"/jobs/{job.pk}/")
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        QUERY, Decimal(10), 120
    )
    assert f'hpc_job="gp-{job.pk}"' in page.inner_text("code.autoscale-query")
