"""A job's log and a dev job's port in a real browser (DESIGN §13, issue 22): the job page's log
tail grows by itself while the job runs on a simulator process, and "Open" shows a running dev
job's page through the portal."""

from __future__ import annotations

import pytest

from jobs.models import Job
from quotas.models import Cluster
from tests import factories as fx
from tests import job_runs
from tests.backends import k8s_standin

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The highest "step N/M" in the log panel, read in the page (no reload, no timing: the wait is for
# the text itself to change).
LAST_STEP = """() => {
  const pre = document.querySelector("#job-log pre.log-tail");
  if (!pre) { return 0; }
  const steps = [...pre.textContent.matchAll(/ step (\\d+)\\//g)].map((m) => Number(m[1]));
  return steps.length ? Math.max(...steps) : 0;
}"""
LATER_STEP = "(after) => (" + LAST_STEP + ")() > after"


def test_the_log_tail_grows_on_the_job_page(world, browser_for, shot, simserver, settings):
    settings.GPUPOOL = {**settings.GPUPOOL, "DEMO": True}  # the form's simulated duration
    fx.priority()
    cluster = job_runs.cluster_on(simserver)
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(page.base + "/jobs/new/")
    page.fill("#id_name", "tail-watch")
    page.select_option("#id_project", label="Project a1 (pa1)")
    page.select_option("#id_flavor", label="F")
    page.fill("#id_gpus_per_worker", "1")
    page.fill("#id_image", "pytorch:2.3")
    page.fill("#id_sim_duration_seconds", str(job_runs.LONG))
    with page.expect_navigation():
        page.click("main form button[type=submit]:has-text('Submit')")
    job = Job.objects.get(name="tail-watch")
    assert page.url.endswith(f"/jobs/{job.pk}/")
    assert "Not started yet" in page.inner_text("#job-log")

    job_runs.start(cluster, job)  # a real cycle admits it, dispatch sends it to the simulator
    # The page was loaded while the job waited: its log panel picks the start up by itself.
    page.wait_for_selector("#job-log pre.log-tail")
    page.wait_for_function(LATER_STEP, arg=0)
    seen = page.evaluate(LAST_STEP)
    page.wait_for_function(LATER_STEP, arg=seen)  # and goes on growing without a reload
    assert page.evaluate(LAST_STEP) > seen
    # A tail is read from its end: the box shows its last line, scrolled to the bottom.
    at_end = """(box) => {
      const outer = box.getBoundingClientRect(), log = box.querySelector("pre").getBoundingClientRect();
      return log.top < outer.top && Math.abs(log.bottom - outer.bottom) <= 2;  // overflows, bottom in view
    }"""
    page.wait_for_function(LATER_STEP, arg=page.evaluate(LAST_STEP) + 100)  # enough to overflow the box
    assert page.eval_on_selector("#job-log .log-scroll", at_end)
    assert page.get_attribute("#job-log a.log-download", "href") == f"/jobs/{job.pk}/log/download/"
    shot(page, "job-log-tail")


def test_open_shows_a_running_dev_jobs_page(world, browser_for, shot, simserver):
    job = job_runs.run(world, simserver, kind="dev", expose_port=8888, name="notebook")
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.goto(page.base + f"/jobs/{job.pk}/")
    assert "exposes port 8888" in page.inner_text("section.access")
    shot(page, "job-dev-access")
    with page.expect_popup() as popup:
        page.click("section.access a.open-port")
    dev = popup.value
    dev.wait_for_load_state()
    assert dev.url == page.base + f"/jobs/{job.pk}/open/"
    assert dev.inner_text("h1") == f"gpupool dev job gp-{job.pk}"
    assert "Simulated dev server on port 8888" in dev.inner_text("body")
    shot(dev, "job-dev-page")


k8s_api = k8s_standin.k8s_api  # the fixture, under this module's name


def test_the_tunnel_command_is_copied_with_one_click(world, browser_for, k8s_api):
    cluster = Cluster.objects.create(name="k1", kind="kubernetes", config={"host": k8s_api.url, "token": "t"})
    job = job_runs.submit(world, kind="dev", expose_port=8888, name="no-ingress")
    Job.objects.filter(pk=job.pk).update(state="running", cluster=cluster, backend_id=f"gp-{job.pk}")
    page = browser_for(world.users["pa1_member"], "pw-pa1_member")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=page.base)
    page.goto(page.base + f"/jobs/{job.pk}/")
    command = f"kubectl -n gpupool-jobs port-forward pod/gp-{job.pk} 8888"
    assert page.inner_text("#tunnel-command") == command
    page.click("button[data-copy=tunnel-command]")
    page.wait_for_selector("button[data-copy=tunnel-command]:has-text('Copied')")
    assert page.evaluate("navigator.clipboard.readText()") == command
