"""Issue 33 in a real browser, in English and in Chinese: the submission form shows the default CPU,
memory and disk of the chosen flavor and GPUs (and follows the GPU count), a request above the GPUs'
share says how many GPUs it strands, and an impossible request is an error on its field that
submits nothing."""

import pytest
from django.utils import translation
from django.utils.translation import gettext as _

from jobs.models import Job
from quotas.models import Node
from tests import factories as fx
from tests.browser.test_submit_form import LANGS, _checked, _fill_the_rest, _open_form

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _in(lang: str, msgid: str, **params) -> str:
    """The text as the page renders it for ``lang`` (the catalogue's, or the English source)."""
    with translation.override(lang):
        return _(msgid) % params


def _cores(lang, n) -> str:
    return _in(lang, "%(n)s cores", n=n)


@LANGS
def test_defaults_stranding_and_an_impossible_request_on_the_form(world, browser_for, shot, lang):
    fx.priority("training", 100)
    # A GPU of F comes with 12 cores, 96 GiB and 437 GiB of disk; one worker may ask 8 × that at most.
    Node.objects.filter(flavor=world.F).update(
        cpu_millicores=96_000, memory_mib=786_432, local_disk_gib=3_500
    )
    page = browser_for(world.users["pa1_member"], "pw-pa1_member", lang=lang)
    _open_form(page)
    _checked(page, lambda: page.select_option("#id_project", label="Project a1 (pa1)"))
    _fill_the_rest(page)
    default = "Empty: %(value)s (%(raw)s) — %(units)s × %(per)s, the share of one %(f)s GPU."
    said = _in(lang, default, value=_cores(lang, 12), raw=12000, units="1", per=_cores(lang, 12), f="F")
    assert said in page.inner_text("#id_cpu_millicores-feedback")
    assert "GiB" in page.inner_text("#id_memory_mib-feedback")
    # Two GPUs per worker: the default doubles, live.
    page.fill("#id_gpus_per_worker", "2")
    _checked(page, lambda: page.locator("#id_command").click())
    said = _in(lang, default, value=_cores(lang, 24), raw=24000, units="2", per=_cores(lang, 12), f="F")
    assert said in page.inner_text("#id_cpu_millicores-feedback")

    # 2 GPUs asking 60 cores: ⌈60/12⌉ = 5 GPUs' share, 3 of them stranded.
    page.fill("#id_cpu_millicores", "60000")
    _checked(page, lambda: page.locator("#id_command").click())
    stranded = page.locator("#job-summary .stranded")
    assert stranded.get_attribute("data-stranded") == "3"
    strands = (
        "This strands %(n)s GPUs: each worker's %(what)s is more than its GPUs' share (%(per)s per GPU of "
        "%(f)s), so it takes GPUs it does not use and nobody else can use them either."
    )
    said = _in(lang, strands, n="3", what=_in(lang, "CPU"), per=_cores(lang, 12), f="F")
    assert stranded.inner_text() == said
    shot(page, f"job-submit-strands-{lang}")

    # More than the biggest node can give one worker: the error on the field, and no stranding said.
    page.fill("#id_cpu_millicores", "96001")
    _checked(page, lambda: page.locator("#id_command").click())
    limit = (
        "More than any node of %(f)s can give one worker: at most %(most)s (its biggest node, %(node)s, has "
        "%(units)d units at %(share)s each)."
    )
    error = _in(lang, limit, f="F", most=_cores(lang, 96), node="n0", units=8, share=_cores(lang, 12))
    assert page.inner_text("#id_cpu_millicores-error") == error
    assert page.get_attribute("#id_cpu_millicores", "aria-invalid") == "true"
    assert page.locator("#job-summary .stranded").count() == 0
    shot(page, f"job-submit-impossible-request-{lang}")
    with page.expect_navigation():  # submitted anyway: refused, the page shows the error again
        page.click("form button.submit")
    assert page.inner_text("#id_cpu_millicores-error") == error
    assert Job.objects.count() == 0

    # Back within what a node has: submitted with what was asked.
    page.fill("#id_cpu_millicores", "60000")
    with page.expect_navigation():
        page.click("form button.submit")
    job = Job.objects.get()
    assert (job.gpus_per_worker, job.cpu_millicores, job.memory_mib) == (2, 60_000, None)
