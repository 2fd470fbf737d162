"""The submission form's autoscaling fields (issue 24 item 8): shown for inference jobs only, set
with the job, refused on the field that is wrong (nothing written), carried by templates and
copies, and checked live."""

import re
from decimal import Decimal

import pytest

from jobs.models import Job, JobTemplate
from jobs.services import job_submit
from tests.pages.submit_refusals import assert_refused_on

pytestmark = pytest.mark.django_db

QUERY = 'avg(rps{job="{job}"})'


def _body(world, prio, **changes):
    body = {
        "name": "llm-svc", "project": world.pa1.pk, "kind": "inference", "flavor": world.F.pk,
        "priority_class": prio.pk, "workers": "4", "gpus_per_worker": "1", "min_workers": "1",
        "gpu_milli": "", "image": "vllm:0.6", "command": "", "max_runtime_seconds": "",
        "autoscale_query": QUERY, "autoscale_target": "10", "autoscale_cooldown_seconds": "120",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def _fieldset(html: str) -> str:
    found = re.search(r'<fieldset class="fields autoscale-fields"[^>]*>', html)
    assert found, "no autoscaling fieldset"
    return found.group(0)


def test_the_fields_are_shown_for_inference_jobs_only(page_client, world, prio):
    client = page_client("pa1_member")
    page = client.get("/jobs/new/").content.decode()  # training is preselected
    assert "hidden disabled" in _fieldset(page) and 'name="autoscale_query"' in page
    response = client.post("/jobs/new/", _body(world, prio, name="Bad Name!"))  # redisplayed
    html = response.content.decode()
    assert "hidden" not in _fieldset(html) and "Autoscaling from load" in html
    zh = page_client("pa1_member", "zh-hans").get("/jobs/new/").content.decode()
    assert "根据负载自动伸缩" in zh


def test_submitting_an_inference_job_with_autoscaling_sets_it(page_client, world, prio):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio), follow=True)
    job = Job.objects.get()
    assert response.redirect_chain[-1][0] == f"/jobs/{job.pk}/"
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        QUERY, Decimal(10), 120
    )
    assert f'avg(rps{{job=&quot;gp-{job.pk}&quot;}})' in response.content.decode()  # the job page shows it


def test_empty_fields_submit_a_job_without_autoscaling(page_client, world, prio):
    body = _body(world, prio, autoscale_query="", autoscale_target="", autoscale_cooldown_seconds="")
    assert page_client("pa1_member").post("/jobs/new/", body).status_code == 302
    job = Job.objects.get()
    assert (job.autoscale_query, job.autoscale_target) == ("", None)


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"autoscale_target": "0"}, "autoscale_target"),
        ({"autoscale_target": ""}, "autoscale_target"),
        ({"autoscale_target": "ten"}, "autoscale_target"),
        ({"autoscale_cooldown_seconds": "5"}, "autoscale_cooldown_seconds"),
        ({"autoscale_cooldown_seconds": "soon"}, "autoscale_cooldown_seconds"),
        ({"autoscale_query": "sum(up)"}, "autoscale_query"),
        ({"autoscale_query": ""}, "autoscale_query"),  # a target without a query
        ({"min_workers": ""}, "autoscale_query"),  # no room to move
        ({"kind": "training"}, "autoscale_query"),  # sent without the page's script: refused, not dropped
    ],
)
def test_bad_autoscaling_is_an_error_on_its_field_and_writes_nothing(
    page_client, world, prio, changes, field
):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, **changes))
    assert_refused_on(response, field)


def test_live_validation_checks_autoscaling_without_writing(page_client, world, prio):
    response = page_client("pa1_member").post(
        "/jobs/new/validate/", _body(world, prio, autoscale_query="sum(up)"), HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert "autoscale_query" in response.context["form"].errors
    assert 'data-for="id_autoscale_query" data-invalid="true" hx-swap-oob="true"' in html and "{job}" in html
    assert Job.objects.count() == 0


def test_save_as_template_keeps_autoscaling_and_the_template_fills_the_form(page_client, world, prio):
    client = page_client("pa1_member")
    body = _body(world, prio, template_name="svc", save_template="1")
    response = client.post("/jobs/new/", body)
    template = JobTemplate.objects.get()
    assert response.status_code == 302 and Job.objects.count() == 0
    assert template.values["autoscale"] == {"query": QUERY, "target": "10", "cooldown_seconds": 120}
    form = client.get(f"/jobs/new/?template={template.pk}").context["form"]
    assert (form.initial["autoscale_query"], form.initial["autoscale_target"]) == (QUERY, "10")
    assert form.initial["autoscale_cooldown_seconds"] == 120 and form.shows_autoscale()


def test_a_copy_of_a_job_carries_its_autoscaling(page_client, world, prio):
    svc = job_submit(
        actor=world.users["pa1_member"], project=world.pa1, name="svc", kind="inference", flavor=world.F,
        priority_class=prio, image="vllm:0.6", workers=4, min_workers=1,
        autoscale={"query": QUERY, "target": "2.5"},
    )
    page = page_client("pa1_member").get(f"/jobs/new/?copy={svc.pk}")
    form = page.context["form"]
    assert (form.initial["autoscale_query"], form.initial["autoscale_target"]) == (QUERY, "2.5")
    assert form.initial["autoscale_cooldown_seconds"] == 300
    assert "hidden" not in _fieldset(page.content.decode())
