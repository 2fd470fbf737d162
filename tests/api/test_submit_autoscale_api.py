"""An inference job's autoscaling given with its submission (issue 24 item 8): ``POST /api/v1/jobs/``
with an ``autoscale`` object sets it with the job, checked by the same service as ``PUT
…/autoscale/``; every bad field is a 400 naming it under ``autoscale`` and creates nothing; a
template carries the settings to the jobs submitted from it."""

from decimal import Decimal

import pytest
from django.urls import reverse

from jobs.models import Job, JobEvent, JobTemplate
from jobs.services import job_submit
from tests import factories as fx

pytestmark = pytest.mark.django_db

QUERY = 'avg(rps{job="{job}"})'


@pytest.fixture
def prio(db):
    return fx.priority("training", 100)


def _body(world, **changes):
    body = {
        "name": "llm-svc", "project": world.pa1.pk, "kind": "inference", "flavor": "F",
        "priority": "training", "image": "vllm:0.6", "workers": 4, "min_workers": 1, "gpus_per_worker": 1,
        "autoscale": {"query": QUERY, "target": "10", "cooldown_seconds": 120},
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def _post(api, world, body, user="pa1_member"):
    return api(world.users[user]).post("/api/v1/jobs/", body, format="json")


def test_a_submission_with_autoscale_sets_it_with_the_job(api, world, prio):
    response = _post(api, world, _body(world))
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        QUERY, Decimal(10), 120
    )
    shown = api(world.users["pa1_member"]).get(f"/api/v1/jobs/{job.pk}/autoscale/").json()
    assert shown["enabled"] and shown["filled_query"] == f'avg(rps{{job="gp-{job.pk}"}})'
    assert (shown["target"], shown["cooldown_seconds"], shown["status"]) == ("10.000", 120, None)


def test_the_cool_down_defaults_and_no_autoscale_is_off(api, world, prio):
    body = _body(world, name="svc-a", autoscale={"query": f"  {QUERY} ", "target": "2.5"})
    job = Job.objects.get(pk=_post(api, world, body).json()["id"])
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        QUERY, Decimal("2.5"), 300
    )
    for name, autoscale in (("svc-b", None), ("svc-c", "omitted")):
        body = _body(world, name=name)
        body["autoscale"] = autoscale
        if autoscale == "omitted":
            del body["autoscale"]
        response = _post(api, world, body)
        assert response.status_code == 201, response.content
        assert Job.objects.get(pk=response.json()["id"]).autoscale_query == ""


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"autoscale": {"query": QUERY, "target": "0"}}, "target"),
        ({"autoscale": {"query": QUERY, "target": "-1"}}, "target"),
        ({"autoscale": {"query": QUERY, "target": "abc"}}, "target"),
        ({"autoscale": {"query": QUERY, "target": "1.0001"}}, "target"),
        ({"autoscale": {"query": QUERY, "target": "nan"}}, "target"),
        ({"autoscale": {"query": QUERY}}, "target"),
        ({"autoscale": {"query": QUERY, "target": "1", "cooldown_seconds": 5}}, "cooldown_seconds"),
        ({"autoscale": {"query": QUERY, "target": "1", "cooldown_seconds": 86401}}, "cooldown_seconds"),
        ({"autoscale": {"query": QUERY, "target": "1", "cooldown_seconds": "soon"}}, "cooldown_seconds"),
        ({"autoscale": {"query": "sum(up)", "target": "1"}}, "query"),  # names no job
        ({"autoscale": {"query": "x{job}" * 100, "target": "1"}}, "query"),  # over 500 characters
        ({"autoscale": {"query": 'rate(x{job="{job}"}[1m])\nor vector(1)', "target": "1"}}, "query"),
        ({"autoscale": {"query": "", "target": "1"}}, "query"),
        ({"autoscale": {"target": "1"}}, "query"),
        ({"autoscale": "on"}, "non_field_errors"),
        ({"kind": "training", "autoscale": {"query": QUERY, "target": "1"}}, "query"),  # inference only
        ({"min_workers": None}, "query"),  # no room to move
        ({"min_workers": 4}, "query"),  # min = max: no room to move
    ],
)
def test_each_bad_autoscale_field_is_a_400_naming_it_and_creates_no_job(api, world, prio, changes, field):
    response = _post(api, world, _body(world, **changes))
    assert response.status_code == 400, response.content
    assert field in response.json()["autoscale"], response.json()
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


def test_shape_and_autoscale_errors_are_reported_together(api, world, prio):
    response = _post(api, world, _body(world, min_workers=9, autoscale={"query": QUERY, "target": "0"}))
    assert response.status_code == 400
    errors = response.json()
    assert "min_workers" in errors and "target" in errors["autoscale"] and "query" in errors["autoscale"]
    assert Job.objects.count() == 0


def test_a_template_carries_autoscale_to_the_jobs_submitted_from_it(api, world, prio):
    client = api(world.users["pa1_member"])
    values = {k: v for k, v in _body(world).items() if k != "project"}
    body = {"name": "svc", "project": world.pa1.pk, "values": values}
    created = client.post(reverse("api:jobtemplate-list"), body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["values"]["autoscale"] == {"query": QUERY, "target": "10", "cooldown_seconds": 120}
    submit = reverse("api:jobtemplate-submit", args=[created.json()["id"]])
    response = client.post(submit, {"name": "from-template"}, format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        QUERY, Decimal(10), 120
    )
    # An override is checked as a submission: under autoscale, nothing written.
    bad = {"name": "bad", "autoscale": {"query": QUERY, "target": "0"}}
    refused = client.post(submit, bad, format="json")
    assert refused.status_code == 400 and "target" in refused.json()["autoscale"], refused.json()
    assert Job.objects.count() == 1


def test_a_template_with_bad_autoscale_is_refused_under_values(api, world, prio):
    values = {k: v for k, v in _body(world).items() if k != "project"}
    values["autoscale"] = {"query": "sum(up)", "target": "1"}
    client = api(world.users["pa1_member"])
    body = {"name": "svc", "project": world.pa1.pk, "values": values}
    response = client.post(reverse("api:jobtemplate-list"), body, format="json")
    assert response.status_code == 400
    assert "{job}" in response.json()["values"]["autoscale"]["query"][0]
    values = {**values, "kind": "training", "autoscale": {"query": QUERY, "target": "1"}}
    body = {"name": "svc", "project": world.pa1.pk, "values": values}
    response = client.post(reverse("api:jobtemplate-list"), body, format="json")
    assert response.status_code == 400 and "query" in response.json()["values"]["autoscale"]
    assert JobTemplate.objects.count() == 0


def test_a_job_saved_as_template_keeps_its_autoscale(world, prio):
    from jobs.templates_service import job_values, template_save, template_submit

    svc = job_submit(
        actor=world.users["pa1_member"], project=world.pa1, name="svc", kind="inference", flavor=world.F,
        priority_class=prio, image="vllm:0.6", workers=4, min_workers=1,
        autoscale={"query": QUERY, "target": "12.5", "cooldown_seconds": 60},
    )
    values, _left_out = job_values(svc)
    assert values["autoscale"] == {"query": QUERY, "target": "12.5", "cooldown_seconds": 60}
    template = template_save(actor=world.users["pa1_member"], project=world.pa1, name="svc", values=values)
    again = template_submit(actor=world.users["pa1_member"], template=template, overrides={"name": "svc-2"})
    assert (again.autoscale_query, again.autoscale_target, again.autoscale_cooldown_seconds) == (
        QUERY, Decimal("12.5"), 60
    )


@pytest.mark.parametrize("query", ["other_tenant_rps # {job}", 'avg(rps{job="{job}"}) or other_tenant_rps'])
def test_item18_a_query_naming_the_job_only_in_a_comment_or_a_branch_is_a_400(api, world, prio, query):
    before = (Job.objects.count(), JobEvent.objects.count())
    response = _post(api, world, _body(world, autoscale={"query": query, "target": "10"}))
    assert response.status_code == 400, response.content
    assert "the job's own" in response.json()["autoscale"]["query"][0]
    job = job_submit(actor=world.users["pa1_member"], **{
        "project": world.pa1, "name": "svc", "kind": "inference", "flavor": world.F,
        "priority_class": prio, "image": "vllm:0.6", "workers": 4, "min_workers": 1, "gpus_per_worker": 1})
    put = api(world.users["pa1_member"]).put(f"/api/v1/jobs/{job.pk}/autoscale/",
                                             {"query": query, "target": "10"}, format="json")
    assert put.status_code == 400 and "the job's own" in put.json()["autoscale_query"][0], put.content
    assert Job.objects.get(pk=job.pk).autoscale_query == ""
    assert Job.objects.count() == before[0] + 1
