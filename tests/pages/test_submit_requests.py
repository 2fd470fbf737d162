"""Issue 33 item 2 on the submission form (DESIGN §15): CPU, memory and local disk per worker. The
help text under each says the default for the chosen flavor and GPUs (and follows them in the live
check); a request above the GPUs' share says how many GPUs it strands; an impossible request is an
error on its field; a submitted job stores what it asked."""

import importlib.util
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.html import escape
from django.utils.translation import gettext as _

from jobs.models import ApprovalPolicy, Job, JobEvent
from quotas.models import Node
from tests.pages.test_submit import _body

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _sized(world):
    # A GPU's share: 12 cores, 96 GiB, 437 GiB of disk; one worker may ask at most 8 × that.
    Node.objects.filter(flavor=world.F).update(
        cpu_millicores=96_000, memory_mib=786_432, local_disk_gib=3_500
    )


def _live(client, body):
    return client.post("/jobs/new/validate/", body, HTTP_HX_REQUEST="true")


def _feedback(html: str, field: str) -> str:
    start = html.index(f'id="id_{field}-feedback"')
    return html[start:html.index("</div>", start)]


def test_the_form_shows_each_default_for_the_chosen_flavor_and_gpus(page_client, world, prio):
    client = page_client("pa1_member")
    page = client.get("/jobs/new/").content.decode()
    assert "choose a flavor to see it" in _feedback(page, "cpu_millicores")
    html = _live(client, _body(world, prio, workers="1", gpus_per_worker="2")).content.decode()
    said = "Empty: 24 cores (24000) — 2 × 12 cores, the share of one F GPU."
    assert said in _feedback(html, "cpu_millicores")
    assert "Empty: 192 GiB (196608) — 2 × 96 GiB" in _feedback(html, "memory_mib")
    assert "Empty: 874 GiB (874) — 2 × 437 GiB" in _feedback(html, "local_disk_gib")
    # It follows the GPU count.
    html = _live(client, _body(world, prio, workers="1", gpus_per_worker="4")).content.decode()
    assert "Empty: 48 cores (48000) — 4 × 12 cores" in _feedback(html, "cpu_millicores")


def test_a_request_above_the_share_says_how_many_gpus_it_strands(page_client, world, prio):
    client = page_client("pa1_member")
    # 2 workers of 1 GPU asking 40 cores each: ⌈40/12⌉ = 4 GPUs' share, 3 stranded per worker.
    response = _live(client, _body(world, prio, workers="2", gpus_per_worker="1", cpu_millicores="40000"))
    summary = response.context["summary"]
    assert summary["stranded"]["count"] == 6
    html = response.content.decode()
    assert 'data-stranded="6"' in html
    said = "This strands 6 GPUs: each worker's CPU is more than its GPUs' share (12 cores per GPU of F)"
    assert escape(said) in html
    # Within the share: nothing stranded, nothing said.
    response = _live(client, _body(world, prio, workers="2", gpus_per_worker="1", cpu_millicores="12000"))
    assert response.context["summary"]["stranded"] is None
    assert "data-stranded" not in response.content.decode()
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_the_defaults_and_the_stranding_are_said_in_chinese_too(page_client, world, prio):
    client = page_client("pa1_member", language="zh-hans")
    assert "每个工作节点的 CPU（毫核）" in client.get("/jobs/new/").content.decode()
    response = _live(client, _body(world, prio, workers="1", gpus_per_worker="1", memory_mib="196608"))
    assert response.context["summary"]["stranded"]["count"] == 1
    html = response.content.decode()
    # Rendered through the zh-hans catalogue (its texts come from scripts/fill_zh_hans.py's glossary
    # when the catalogue is regenerated; until then gettext falls back to the English source).
    with translation.override("zh-hans"):
        said = escape(_(
            "This strands %(n)s GPUs: each worker's %(what)s is more than its GPUs' share (%(per)s per GPU "
            "of %(f)s), so it takes GPUs it does not use and nobody else can use them either."
        ) % {"n": "1", "what": _("memory"), "per": _("%(n)s GiB") % {"n": 96}, "f": "F"})
        cores = _("%(n)s cores") % {"n": 12}
        default = escape(
            _("Empty: %(value)s (%(raw)s) — %(units)s × %(per)s, the share of one %(f)s GPU.")
            % {"value": cores, "raw": 12000, "units": "1", "f": "F", "per": cores}
        )
    assert 'data-stranded="1"' in html and said in html
    assert default in _feedback(html, "cpu_millicores")


def test_an_impossible_request_is_an_error_on_its_field_and_writes_nothing(page_client, world, prio):
    client = page_client("pa1_member")
    response = _live(client, _body(world, prio, workers="1", gpus_per_worker="1", memory_mib="786433"))
    assert response.context["form"].errors["memory_mib"] == [
        "More than any node of F can give one worker: at most 768 GiB (its biggest node, n0, has 8 units at "
        "96 GiB each)."
    ]
    response = client.post("/jobs/new/", _body(world, prio, cpu_millicores="-5", min_cuda_version="12"))
    errors = response.context["form"].errors
    assert set(errors) == {"cpu_millicores"}  # the form's own bounds first
    response = client.post("/jobs/new/", _body(world, prio, min_cuda_version="12"))
    assert response.context["form"].errors["min_cuda_version"] == ["A CUDA version such as 12.4."]
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_the_form_submits_the_request(page_client, world, prio):
    client = page_client("pa1_member")
    body = _body(world, prio, workers="1", gpus_per_worker="2", cpu_millicores="30000", memory_mib="",
                 min_cuda_version="12.4")
    client.post("/jobs/new/", body, follow=True)
    job = Job.objects.get()
    assert (job.cpu_millicores, job.memory_mib, job.min_cuda_version) == (30_000, None, "12.4")
    assert job.unit_share == {"cpu_millicores": 12_000, "memory_mib": 98_304, "local_disk_gib": 437}
    # A copy of the job fills the form with its request.
    form = client.get(f"/jobs/new/?copy={job.pk}").context["form"]
    assert (form.initial["cpu_millicores"], form.initial["min_cuda_version"]) == (30_000, "12.4")


def test_every_new_text_has_its_chinese_in_the_glossary():
    """The catalogue is regenerated from scripts/fill_zh_hans.py: each text of the requests is there."""
    spec = importlib.util.spec_from_file_location("fill_zh_hans", Path("scripts/fill_zh_hans.py"))
    glossary = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(glossary)
    texts = [
        "CPU per worker (millicores)", "Memory per worker (MiB)", "Local disk per worker (GiB)",
        "Minimum CUDA version", "e.g. 12.4: nodes with an older CUDA are never chosen. Empty: any.",
        "Empty: the share of the worker's GPUs on the flavor's nodes (choose a flavor to see it).",
        "Empty: the cluster's default (the nodes of %(f)s do not report it).",
        "Empty: %(value)s (%(raw)s) — %(units)s × %(per)s, the share of one %(f)s GPU.",
        "CPU", "memory", "local disk", "%(n)s cores", "%(n)s MiB", "%(n)s GiB",
        "A CUDA version such as 12.4.", "A whole number.",
        "At least 1: leave it empty for the default share.",
        "At most %(n)s.", "A shared worker may ask at most one %(f)s unit's share: %(most)s.",
        "More than any node of %(f)s can give one worker: at most %(most)s (its biggest node, %(node)s, has "
        "%(units)d units at %(share)s each).",
        "Asks %(times)s× a card's share of %(what)s per card (%(share)s); more than %(max)s× needs approval "
        "in %(where)s.",
        "This strands %(n)s GPUs: each worker's %(what)s is more than its GPUs' share (%(per)s per GPU of "
        "%(f)s), so it takes GPUs it does not use and nobody else can use them either.",
        "A whole number, e.g. 16384 (no quotes, no decimals).", "Per worker", "the GPUs' share",
    ]
    assert [t for t in texts if t not in glossary.GLOSSARY] == []


def test_the_summary_announces_the_approval_a_request_above_the_ratio_needs(page_client, world, prio):
    ApprovalPolicy.objects.create(department=world.A, max_request_ratio=Decimal("2"))
    client = page_client("pa1_member")
    body = _body(world, prio, workers="1", gpus_per_worker="1", memory_mib="196609")
    html = _live(client, body).content.decode()
    said = escape(
        "Asks 2.01× a card's share of memory per card (96 GiB); more than 2× needs approval in Dept A."
    )
    assert "Needs approval" in html and said in html
    html = _live(client, _body(world, prio, workers="1", gpus_per_worker="1", memory_mib="196608")).content
    assert b"No approval needed." in html


def test_a_shared_worker_strands_thousandths(page_client, world, prio):
    world.F.shareable = True
    world.F.save()
    client = page_client("pa1_member")
    # 250‰ of a GPU asking 6 cores: half a GPU's share, so 250‰ of a GPU stranded.
    body = _body(world, prio, workers="1", gpus_per_worker="1", gpu_milli="250", cpu_millicores="6000")
    response = _live(client, body)
    assert response.context["summary"]["stranded"]["count"] == Decimal("0.25")
    assert "This strands 0.25 GPUs" in response.content.decode()


def test_the_job_page_says_what_each_worker_asks(page_client, world, prio):
    client = page_client("pa1_member")
    body = _body(world, prio, workers="1", gpus_per_worker="2", cpu_millicores="30000",
                 min_cuda_version="12.4")
    response = client.post("/jobs/new/", body, follow=True)
    html = response.content.decode()
    start = html.index('class="job-asks"')
    asks = html[start:html.index("</dd>", start)]
    # Its own CPU; memory and disk its 2 GPUs' share at submission.
    assert "CPU 30 cores ·" in asks and "memory 192 GiB <small" in asks and "local disk 874 GiB" in asks
    assert asks.count("(the GPUs' share)") == 2
    assert "12.4" in html
