"""Arrays and dependencies (DESIGN §17) in a real browser, in English and 中文: an array submitted
from the form, its page with its tasks' states, cancel all through its confirm dialog; a job
waiting on a dependency, whose page says which job it waits for."""

import pytest

from jobs.models import JobArray
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_submit
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _fits_the_window(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


def _submit(world, name, **kw):
    return job_submit(actor=world.users["pa1_member"], project=world.pa1, name=name, kind="training",
                      flavor=world.F, priority_class=fx.priority(), image="pytorch:2.3", gpus_per_worker=1,
                      max_runtime_seconds=7200, **kw)


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_an_array_from_the_form_its_page_and_cancel_all(world, browser_for, shot, lang):
    fx.priority()
    page = browser_for(world.users["pa1_member"], "pw-pa1_member", lang)
    page.goto(page.base + "/jobs/new/")
    page.fill("#id_name", "sweep")
    page.select_option("#id_project", label="Project a1 (pa1)")
    page.select_option("#id_flavor", label="F")
    page.fill("#id_gpus_per_worker", "1")
    page.fill("#id_max_runtime_seconds", "7200")
    page.fill("#id_image", "pytorch:2.3")
    page.fill("#id_array", "0-7%3")
    with page.expect_navigation():
        page.click("button.submit")
    array = JobArray.objects.get()
    assert page.url.endswith(f"/arrays/{array.pk}/")
    schedule_once()
    page.reload()
    assert "[0-7%3]" in page.inner_text("h1")
    rows = page.locator("table.array-tasks tbody tr")
    assert rows.count() == 8
    states = page.inner_text("dd.array-states")
    admitted, queued = ("Admitted 3", "Queued 5") if lang == "en" else ("已准入 3", "排队中 5")
    assert admitted in states and queued in states, states
    assert _fits_the_window(page)
    shot(page, f"array-page-{lang}")

    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.click("form[action$='/cancel/'] button")
    assert set(array.tasks.values_list("state", flat=True)) == {"cancelled"}
    assert page.locator("form[action$='/cancel/']").count() == 0  # nothing left to cancel
    shot(page, f"array-cancelled-{lang}")


@pytest.mark.parametrize("lang", ["en", "zh-hans"])
def test_a_job_waiting_on_a_dependency(world, browser_for, shot, lang):
    first = _submit(world, "prepare")
    then = _submit(world, "train", dependencies=[{"condition": "after_ok", "job": first.pk}])
    schedule_once()
    page = browser_for(world.users["pa1_member"], "pw-pa1_member", lang)
    page.goto(f"{page.base}/jobs/{then.pk}/")
    explain = page.inner_text("article.explain")
    assert f"#{first.pk}" in explain
    if lang == "en":
        assert f"It waits for job #{first.pk} (after it succeeds)." in explain
    else:
        assert "排队原因" in explain
    deps = page.locator("dd.job-dependencies a")
    assert deps.inner_text() == f"#{first.pk}"
    assert _fits_the_window(page)
    shot(page, f"job-waiting-on-dependency-{lang}")
    with page.expect_navigation():
        deps.click()
    assert page.url.endswith(f"/jobs/{first.pk}/")
