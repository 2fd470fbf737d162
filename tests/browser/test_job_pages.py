"""The job pages in a real browser: live validation of the submission form, the queue table
refreshing itself, charts drawn by plotly.js, and a layout that fits a 1280-px laptop."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobGpuSample, PriorityClass
from jobs.services import job_submit
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _fits_the_window(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def _submit(world, name, *, gpus=4):
    return job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name=name,
        kind="training",
        flavor=world.F,
        priority_class=fx.priority(),
        image="pytorch:2.3",
        gpus_per_worker=gpus,
        max_runtime_seconds=7200,
    )


def test_submit_form_validates_live_and_submits(world, browser_for, shot):
    fx.priority()
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.click("header a[href='/jobs/new/']")
    page.wait_for_url("**/jobs/new/")
    assert _fits_the_window(page)
    page.fill("#id_name", "bert-large")
    page.select_option("#id_project", label="Project a1 (pa1)")
    page.select_option("#id_flavor", label="F")
    page.fill("#id_workers", "2")
    page.fill("#id_gpus_per_worker", "16")
    page.fill("#id_max_runtime_seconds", "7200")
    page.locator("#id_image").click()  # leaving the field fires "change": htmx validates
    page.wait_for_selector("#id_gpus_per_worker-error")
    assert "at most 8" in page.inner_text("#id_gpus_per_worker-error")
    page.fill("#id_gpus_per_worker", "8")
    page.locator("#id_image").click()
    page.wait_for_selector("#id_gpus_per_worker-error", state="detached")
    assert "32" in page.inner_text("article.summary")  # 16 cards × 2 h
    page.fill("#id_image", "pytorch:2.3")
    shot(page, "job-submit")
    assert Job.objects.count() == 0  # live validation wrote nothing
    with page.expect_navigation():
        page.click("form button[type=submit]:has-text('Submit')")
    job = Job.objects.get()
    assert page.url.endswith(f"/jobs/{job.pk}/")
    assert "bert-large" in page.inner_text("h1")


def test_queue_table_refreshes_itself(world, browser_for, shot):
    _submit(world, "first")
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(page.base + "/jobs/queue/")
    assert "first" in page.inner_text("#queue-table")
    _submit(world, "second")
    page.wait_for_selector("#queue-table >> text=second")  # no reload: htmx polls
    assert _fits_the_window(page)
    shot(page, "job-queue")


def test_job_page_draws_the_utilisation_chart(world, browser_for, shot):
    job = _submit(world, "charted")
    node = world.F.nodes.first()
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=30)
    placement = [[[node.pk, g, 1000] for g in range(4)]]
    Job.objects.filter(pk=job.pk).update(
        state="running", started_at=start, granted_workers=1, placement=placement
    )
    JobGpuSample.objects.bulk_create(
        JobGpuSample(
            job=job,
            minute=start + timedelta(minutes=m),
            gpu_util_pct=40 + m,
            fb_used_mib=4096 + 50 * m,
            gpus=4,
        )
        for m in range(30)
        if not 10 <= m < 14
    )
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(page.base + f"/jobs/{job.pk}/")
    page.wait_for_selector(".chart .main-svg")
    assert _fits_the_window(page)
    shot(page, "job-detail")
    page.goto(page.base + "/")
    page.wait_for_selector(".chart .main-svg")
    assert _fits_the_window(page)
    shot(page, "dashboard-pool")


def test_item5_the_class_list_follows_the_kind_and_item4_is_said_live(world, browser_for):
    training = fx.priority()
    PriorityClass.objects.create(
        name="inference-online", value=1000, preemptible=False, allowed_kinds=["inference"]
    )
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(f"{page.base}/jobs/new/")
    page.select_option("#id_project", label="Project a1 (pa1)")
    page.select_option("#id_flavor", label="F")
    assert page.locator("#id_priority_class option", has_text="inference-online").count() == 0
    page.select_option("#id_kind", "inference")
    page.wait_for_selector("#id_priority_class option:has-text('inference-online')", state="attached")
    page.select_option("#id_priority_class", label="inference-online (1000)")
    page.select_option("#id_kind", "training")  # inference-online is not for training jobs
    page.wait_for_selector("#id_priority_class option:has-text('inference-online')", state="detached")
    assert page.input_value("#id_priority_class") == str(training.pk)
    assert "training was chosen instead" in page.inner_text("#id_priority_class-feedback")
    page.fill("#id_workers", "3")
    page.fill("#id_gpus_per_worker", "8")
    page.locator("#id_image").click()
    page.wait_for_selector("#id_workers-error")
    assert "the 16 that the largest cluster has" in page.inner_text("#id_workers-error")
    assert Job.objects.count() == 0


def test_item15_a_job_with_one_utilisation_sample_shows_a_point(world, browser_for, shot):
    job = _submit(world, "just-started")
    node = world.F.nodes.first()
    start = timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=1)
    Job.objects.filter(pk=job.pk).update(
        state="running", started_at=start, granted_workers=1, placement=[[[node.pk, 0, 1000]]]
    )
    JobGpuSample.objects.create(job=job, minute=start, gpu_util_pct=55.0, fb_used_mib=4096, gpus=1)
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(page.base + f"/jobs/{job.pk}/")
    page.wait_for_selector(".chart .main-svg")
    # plotly draws each trace's markers as path.point; a line through one point has none.
    assert page.locator(".chart .scatterlayer .trace .points path.point").count() == 2  # % and GiB
    shot(page, "job-detail-one-sample")


# Counted in the page, synchronously with htmx's own event, so the figures read after a step of
# the fake clock are exact: no waiting for something not to happen.
_COUNT_REFRESHES = """() => {
  window.__refreshes = 0;
  document.addEventListener("htmx:beforeRequest", (e) => {
    if ((e.detail.pathInfo.requestPath || "").startsWith("/jobs/queue/table/")) { window.__refreshes += 1; }
  });
}"""
# Chromium keeps a headless page "visible"; the page is told otherwise the way a browser tells it.
_SET_VISIBILITY = """(state) => {
  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => state});
  Object.defineProperty(document, "hidden", {configurable: true, get: () => state !== "visible"});
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_item14_the_queue_refreshes_only_while_visible_and_logs_no_error(world, browser_for, shot):
    _submit(world, "first")
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    errors = []
    page.on("console", lambda msg: msg.type == "error" and errors.append(msg.text))
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.clock.install()  # the page's timers run only when the test moves the clock
    page.goto(page.base + "/jobs/queue/")
    page.evaluate(_COUNT_REFRESHES)

    def refreshes_after(ms: int) -> int:
        page.clock.run_for(ms)
        return page.evaluate("window.__refreshes")

    def refreshed(action) -> None:
        with page.expect_response(lambda r: "/jobs/queue/table/" in r.url):
            action()
        page.clock.run_for(100)  # htmx's swap and settle steps are timers too

    assert refreshes_after(4_900) == 0
    _submit(world, "second")
    refreshed(lambda: page.clock.run_for(100))  # the 5th second: one refresh
    assert page.evaluate("window.__refreshes") == 1
    assert "second" in page.inner_text("#queue-table")  # swapped in, and armed again
    refreshed(lambda: page.clock.run_for(5_000))
    assert page.evaluate("window.__refreshes") == 2

    page.evaluate(_SET_VISIBILITY, "hidden")
    assert refreshes_after(60_000) == 2  # a minute in a background tab: nothing asked
    refreshed(lambda: page.evaluate(_SET_VISIBILITY, "visible"))  # back: at once
    assert page.evaluate("window.__refreshes") == 3
    refreshed(lambda: page.clock.run_for(5_000))
    assert page.evaluate("window.__refreshes") == 4
    assert errors == []  # no htmx:evalDisallowedError, nothing else
    shot(page, "job-queue-visible")
