"""Issue 35 item 3 through the API: ``max_retries`` is stored and shown with the job's retry
state; more than the centre's maximum, a retry for an inference job, a negative or non-integer
value is a 400 on the field that creates nothing; a template keeps it and its submission checks it."""

import pytest
from django.urls import reverse

from jobs.models import Job, JobTemplate
from jobs.retries import retry_policy
from jobs.retry_models import RetryPolicy
from tests import factories as fx
from tests.job_posts import post_job as _post
from tests.job_posts import refused as _refused

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _classes(world):
    fx.priority("training", 100)
    fx.priority("inference-online", 1000)


def test_a_job_keeps_its_max_retries_and_shows_its_retry_state(world, api):
    response = _post(api, world, max_retries=3)
    assert response.status_code == 201, response.content
    body = response.json()
    state = (body["max_retries"], body["retries"], body["start_timeouts"], body["not_before"])
    assert state == (3, 0, 0, None)
    assert Job.objects.get().max_retries == 3


def test_without_max_retries_a_job_is_not_retried(world, api):
    assert _post(api, world).json()["max_retries"] == 0


def test_more_than_the_centres_maximum_is_a_400_naming_it(world, api):
    RetryPolicy.objects.filter(pk=retry_policy().pk).update(max_retries_limit=2)
    message = _refused(_post(api, world, max_retries=3), "max_retries")
    assert message == "Between 0 and 2 (the centre's maximum)."


def test_an_inference_job_is_not_retried(world, api):
    message = _refused(_post(api, world, kind="inference", priority="inference-online", max_retries=1),
                       "max_retries")
    assert message == "Only training jobs are retried."


@pytest.mark.parametrize("value", [-1, 1.5, "2", True, None, 21])
def test_a_value_that_is_not_a_count_is_a_400(world, api, value):
    _refused(_post(api, world, max_retries=value), "max_retries")


def test_a_template_keeps_max_retries_and_checks_it(world, api):
    client = api(world.users["pa1_member"])
    values = {"kind": "training", "flavor": "F", "priority": "training", "image": "pytorch:2.3",
              "max_runtime_seconds": 3600, "max_retries": 2}
    body = {"name": "retried", "project": world.pa1.pk, "values": values}
    created = client.post(reverse("api:jobtemplate-list"), body, format="json")
    assert created.status_code == 201, created.content
    submit = reverse("api:jobtemplate-submit", args=[created.json()["id"]])
    job = client.post(submit, {"name": "r"}, format="json")
    assert job.status_code == 201, job.content
    assert job.json()["max_retries"] == 2
    too_many = {**body, "values": {**values, "max_retries": 6}}
    refused = client.post(reverse("api:jobtemplate-list"), too_many, format="json")
    assert refused.status_code == 400
    # The template API names a refused value under "values".
    assert refused.json() == {"values": {"max_retries": ["Between 0 and 5 (the centre's maximum)."]}}
    assert JobTemplate.objects.count() == 1
