"""The array page, cancel all from it, the submission form's array and dependency fields, and the
job page of a job waiting on a dependency (DESIGN §17), in English and 中文; another tenant's array
page is a 404."""

from __future__ import annotations

import pytest

from jobs.models import Job, JobArray, JobDependency
from jobs.scheduling.cycle import schedule_once

pytestmark = pytest.mark.django_db


def _body(world, prio, **changes):
    body = {"name": "sweep", "project": world.pa1.pk, "kind": "training", "flavor": world.F.pk,
            "priority_class": prio.pk, "workers": "1", "gpus_per_worker": "1", "image": "pytorch:2.3",
            "max_runtime_seconds": "7200"}
    return body | changes


def test_the_form_submits_an_array_and_shows_its_page(world, prio, page_client):
    client = page_client("pa1_member")
    response = client.post("/jobs/new/", _body(world, prio, array="0-5%2"))
    array = JobArray.objects.get()
    assert response.status_code == 302 and response.url == f"/arrays/{array.pk}/"
    schedule_once()
    page = client.get(response.url).content.decode()
    assert "sweep <code>[0-5%2]</code>" in page
    assert page.count('<tr data-index=') == 6
    assert "at most 2" in page and "Cancel all unfinished tasks" in page
    waiting = array.tasks.get(array_index=2)
    detail = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "array cap of 2 running tasks" in detail
    assert f'href="/arrays/{array.pk}/"' in detail and "task 2" in detail
    queue = client.get("/jobs/queue/").content.decode()  # the cycle cached why the held tasks wait
    assert queue.count("array cap of 2 running tasks") == 4, queue

    copy = client.get(f"/jobs/new/?copy={waiting.pk}").content.decode()
    assert 'name="array" value="0-5%2"' in copy  # a copy of a task is a copy of its array

    response = client.post(f"/arrays/{array.pk}/cancel/")
    assert response.status_code == 302
    assert set(array.tasks.values_list("state", flat=True)) == {"cancelled"}
    assert "Cancel all unfinished tasks" not in client.get(f"/arrays/{array.pk}/").content.decode()


def test_a_bad_spec_in_the_form_is_an_error_on_its_field_and_writes_nothing(world, prio, page_client):
    response = page_client("pa1_member").post("/jobs/new/", _body(world, prio, array="0-99%0"))
    assert response.status_code == 200
    assert "at least 1 task running at once" in response.content.decode()
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_a_job_waiting_on_a_dependency_says_so_in_both_languages(world, prio, page_client, pa1_job):
    client = page_client("pa1_member")
    body = _body(world, prio, name="then", dependencies=f"after_ok:{pa1_job.pk}")
    response = client.post("/jobs/new/", body)
    assert response.status_code == 302
    then = JobDependency.objects.get().job
    page = client.get(f"/jobs/{then.pk}/").content.decode()
    assert f"It waits for job #{pa1_job.pk} (after it succeeds)." in page
    assert f'<a href="/jobs/{pa1_job.pk}/">#{pa1_job.pk}</a>' in page
    schedule_once()
    assert f"It waits for job #{pa1_job.pk}" in client.get("/jobs/queue/").content.decode()
    zh = page_client("pa1_member", "zh-hans").get(f"/jobs/{then.pk}/").content.decode()
    assert f"#{pa1_job.pk}" in zh and 'lang="zh-hans"' in zh


def test_another_tenants_array_page_is_a_404(world, prio, page_client):
    page_client("pa1_member").post("/jobs/new/", _body(world, prio, array="0-1"))
    array = JobArray.objects.get()
    assert page_client("pb_member").get(f"/arrays/{array.pk}/").status_code == 404
    assert page_client("pb_member").post(f"/arrays/{array.pk}/cancel/").status_code == 404
    assert page_client("pa1_member").get(f"/arrays/{array.pk}/").status_code == 200
    assert set(array.tasks.values_list("state", flat=True)) == {"queued"}
