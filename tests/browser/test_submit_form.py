"""The submission form in a real browser, in English and in Chinese (issue 32): the chosen priority
class survives every live check (item 1), an over-long name is refused with its length instead of
being cut by the input (item 2), and the storage list follows the chosen project (item 4)."""

import pytest

from jobs.models import Job, ProjectStorage
from tests import factories as fx

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LANGS = pytest.mark.parametrize("lang", ["en", "zh-hans"])

# Counts the live check's answers once htmx has settled them (the error box is the swap's target;
# the out-of-band parts are settled in the same step), so a test waits for the answer to be in the
# page, not for a transient state.
COUNT_CHECKS = """() => {
  window.liveChecks = 0;
  document.addEventListener("htmx:afterSettle", (e) => {
    if (e.target.id === "job-form-errors") { window.liveChecks += 1; }
  });
}"""


def _open_form(page):
    page.goto(f"{page.base}/jobs/new/")
    page.evaluate(COUNT_CHECKS)


def _checked(page, action) -> None:
    """Do ``action`` (which makes one change) and wait until the live check's answer is in."""
    seen = page.evaluate("window.liveChecks")
    action()
    page.wait_for_function("n => window.liveChecks > n", arg=seen)


def _fill_the_rest(page, name="bert-large"):
    _checked(page, lambda: page.select_option("#id_flavor", label="F"))
    page.fill("#id_name", name)
    page.fill("#id_image", "pytorch:2.3")
    page.fill("#id_max_runtime_seconds", "7200")
    _checked(page, lambda: page.locator("#id_command").click())  # leaving a field fires "change"


@LANGS
def test_item1_the_chosen_priority_class_survives_live_checks_and_is_submitted(
    world, browser_for, shot, lang
):
    fx.priority("best-effort", 0)
    fx.priority("dev", 50)
    training = fx.priority("training", 100)
    page = browser_for(world.users["a_admin"], "pw-a_admin", lang=lang)
    _open_form(page)
    page.select_option("#id_priority_class", label="training (100)")
    _checked(page, lambda: page.select_option("#id_project", label="Project a1 (pa1)"))
    assert page.input_value("#id_priority_class") == str(training.pk)
    _checked(page, lambda: page.select_option("#id_project", label="Project a (pa)"))
    _fill_the_rest(page)
    page.fill("#id_gpus_per_worker", "2")
    _checked(page, lambda: page.locator("#id_command").click())
    assert page.input_value("#id_priority_class") == str(training.pk)
    shot(page, f"job-submit-class-kept-{lang}")
    with page.expect_navigation():
        page.click("form button.submit")
    job = Job.objects.get()
    assert (job.name, job.project, job.priority_class) == ("bert-large", world.pa, training)


@LANGS
def test_item2_an_over_long_name_is_refused_with_its_length_not_cut(world, browser_for, shot, lang):
    fx.priority("training", 100)
    page = browser_for(world.users["pa1_member"], "pw-pa1_member", lang=lang)
    _open_form(page)
    _checked(page, lambda: page.select_option("#id_project", label="Project a1 (pa1)"))
    _fill_the_rest(page, name="a" * 10_000)
    assert len(page.input_value("#id_name")) == 10_000  # the input keeps what was typed or pasted
    said = {"en": "at most 63 characters (it has 10000)",
            "zh-hans": "不超过 63 字符 (目前字符数 10000)"}[lang]
    assert said in page.inner_text("#id_name-feedback")  # said live, on leaving the field
    with page.expect_navigation():
        page.click("form button.submit")
    assert Job.objects.count() == 0  # refused, not created under a cut name
    assert said in page.inner_text("#id_name-feedback")
    assert len(page.input_value("#id_name")) == 10_000
    shot(page, f"job-submit-name-too-long-{lang}")


@LANGS
def test_item4_the_storage_list_follows_the_chosen_project(world, browser_for, shot, lang):
    fx.priority("training", 100)
    make = ProjectStorage.objects.create
    make(project=world.pa, name="pa-data", kind="hostpath", host_path="/srv/pa", mount_path="/data")
    pa1_data = make(project=world.pa1, name="pa1-data", kind="hostpath", host_path="/srv/pa1",
                    mount_path="/data")
    page = browser_for(world.users["a_admin"], "pw-a_admin", lang=lang)
    _open_form(page)
    mounts = page.locator("#id_mounts")
    assert "pa-data" not in mounts.inner_text() and "pa1-data" not in mounts.inner_text()
    _checked(page, lambda: page.select_option("#id_project", label="Project a (pa)"))
    assert "pa / pa-data" in mounts.inner_text() and "pa1-data" not in mounts.inner_text()
    _checked(page, lambda: page.get_by_label("pa / pa-data", exact=False).check())
    _checked(page, lambda: page.select_option("#id_project", label="Project a1 (pa1)"))
    assert "pa1 / pa1-data" in mounts.inner_text()
    assert "pa / pa-data" not in mounts.inner_text()
    said = {"en": "pa-data is not a storage of project pa1", "zh-hans": "pa-data 不是项目 pa1 的存储"}[lang]
    assert said in page.inner_text("#id_mounts-feedback")  # the tick that went with the list is said
    _checked(page, lambda: page.get_by_label("pa1 / pa1-data", exact=False).check())
    _fill_the_rest(page)
    shot(page, f"job-submit-mounts-{lang}")
    with page.expect_navigation():
        page.click("form button.submit")
    job = Job.objects.get()
    assert job.project == world.pa1
    assert [m["name"] for m in job.mounts] == [pa1_data.name]
