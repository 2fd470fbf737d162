"""Issue 35 item 3 on the pages: the form's "Retries after a failure" (kept, or refused with the
centre's maximum and nothing written), and the job page's retries line."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job, JobEvent
from jobs.retries import retry_policy

pytestmark = pytest.mark.django_db


def _body(world, prio, **changes):
    return {
        "name": "flaky", "project": world.pa1.pk, "kind": "training", "flavor": world.F.pk,
        "priority_class": prio.pk, "workers": "1", "gpus_per_worker": "1", "image": "pytorch:2.3",
        "command": "python train.py", "max_runtime_seconds": "7200", **changes,
    }


def test_the_form_submits_max_retries_and_the_job_page_shows_them(page_client, world, prio):
    client = page_client("pa1_member")
    response = client.post("/jobs/new/", _body(world, prio, max_retries="3"), follow=True)
    job = Job.objects.get()
    assert job.max_retries == 3
    page = response.content.decode()
    assert "Retries" in page and "0 of 3 used" in page


def test_more_than_the_centres_maximum_is_a_form_error_and_writes_nothing(page_client, world, prio):
    limit = retry_policy().max_retries_limit
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, max_retries=str(limit + 1)))
    assert response.status_code == 200
    assert f"Between 0 and {limit} (the centre&#x27;s maximum)." in response.content.decode()
    assert not Job.objects.exists() and not JobEvent.objects.exists()


def test_an_empty_field_means_no_retries(page_client, world, prio):
    page_client("pa1_member").post("/jobs/new/", _body(world, prio, max_retries=""))
    assert Job.objects.get().max_retries == 0


def test_a_job_in_its_backoff_says_so_on_the_queue_and_its_page(page_client, world, prio):
    client = page_client("pa1_member")
    client.post("/jobs/new/", _body(world, prio, max_retries="2"))
    job = Job.objects.get()
    # As after a first failed run (tests/services/test_retries.py makes one on the simulator).
    Job.objects.filter(pk=job.pk).update(retries=1, not_before=timezone.now() + timedelta(minutes=2))
    queue = client.get("/jobs/queue/").content.decode()
    assert "Waits out its backoff before it runs again" in queue
    assert "Retry 1 of 2 after backoff until " in queue
    assert "Retry 1 of 2 after backoff until " in client.get(f"/jobs/{job.pk}/").content.decode()
