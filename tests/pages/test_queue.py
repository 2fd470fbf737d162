"""The queue page: positions and reasons from the scheduling cycle, filters, the htmx table
refresh, and a query count that does not grow with the queue."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_submit

pytestmark = pytest.mark.django_db


def _submit(world, prio, project, user, n, *, gpus=8, prefix="q"):
    return [
        job_submit(
            actor=world.users[user],
            project=project,
            name=f"{prefix}-{k}",
            kind="training",
            flavor=world.F,
            priority_class=prio,
            image="img",
            gpus_per_worker=gpus,
            max_runtime_seconds=3600,
        )
        for k in range(n)
    ]


def test_queue_shows_positions_and_why_jobs_wait(page_client, world, prio):
    jobs = _submit(world, prio, world.pb, "pb_member", 4)  # C = 16: two run, two wait
    schedule_once()
    page = page_client("pb_member").get("/jobs/queue/")
    rows = page.context["rows"]
    states = [r["job"].state for r in rows]
    assert states == ["queued", "queued", "admitted", "admitted"]  # the waiting ones first
    assert [r["position"] for r in rows[:2]] == [1, 2]
    assert all(r["explain"]["reason"] for r in rows[:2])  # from the cycle's explain cache
    html = page.content.decode()
    assert "Not enough healthy capacity" in html or "borrow" in html.lower()
    assert all(j.name in html for j in jobs)
    assert page.context["positions_at"] is not None


def test_queue_is_scoped_and_filtered(page_client, world, prio):
    _submit(world, prio, world.pb, "pb_member", 1, prefix="b")
    _submit(world, prio, world.pa1, "pa1_member", 1, prefix="a")
    assert "b-0" not in page_client("pa1_member").get("/jobs/queue/").content.decode()
    admin = page_client("platform")
    assert "b-0" in admin.get("/jobs/queue/").content.decode()
    only_a = admin.get("/jobs/queue/?project=pa1").content.decode()
    assert "a-0" in only_a and "b-0" not in only_a
    assert "a-0" not in admin.get("/jobs/queue/?mine=on").content.decode()
    assert "a-0" not in admin.get("/jobs/queue/?state=running").content.decode()
    assert "a-0" in admin.get("/jobs/queue/?flavor=F&state=queued").content.decode()
    outsider = page_client("outsider").get("/jobs/queue/")
    assert outsider.status_code == 200 and outsider.context["rows"] == []


def test_finished_jobs_are_not_in_the_queue(page_client, world, prio):
    (job,) = _submit(world, prio, world.pa1, "pa1_member", 1)
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    assert "q-0" not in page_client("pa1_member").get("/jobs/queue/").content.decode()


def test_the_table_refreshes_itself_with_htmx(page_client, world, prio):
    _submit(world, prio, world.pa1, "pa1_member", 1)
    client = page_client("pa1_member")
    page = client.get("/jobs/queue/?flavor=F").content.decode()
    assert 'hx-get="/jobs/queue/table/?flavor=F"' in page and 'data-refresh-every="5"' in page
    assert 'hx-trigger="refresh"' in page and "/static/js/refresh.js" in page  # no filter to eval
    partial = client.get("/jobs/queue/table/?flavor=F", HTTP_HX_REQUEST="true")
    html = partial.content.decode()
    assert partial.status_code == 200 and "<html" not in html
    assert html.lstrip().startswith('<div id="queue-table"') and "q-0" in html
    assert 'hx-get="/jobs/queue/table/?flavor=F"' in html  # keeps polling with the same filters
    assert 'data-refresh-every="5"' in html


def test_queue_pages_through_long_queues(page_client, world, prio):
    _submit(world, prio, world.pa1, "pa1_member", 55, gpus=1)
    client = page_client("pa1_member")
    first = client.get("/jobs/queue/")
    assert len(first.context["rows"]) == 50 and "Page 1 of 2" in first.content.decode()
    second = client.get("/jobs/queue/table/?page=2")
    assert len(second.context["rows"]) == 5


def _queries(client, path):
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(path).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("path", ["/jobs/queue/", "/jobs/queue/table/", "/jobs/", "/"])
def test_query_count_does_not_grow_with_the_number_of_jobs(page_client, world, prio, path):
    client = page_client("a_admin")
    _submit(world, prio, world.pa1, "pa1_member", 3, gpus=1, prefix="few")
    schedule_once()
    few = _queries(client, path)
    _submit(world, prio, world.pa1, "pa1_member", 80, gpus=1, prefix="many")
    _submit(world, prio, world.pa, "a_admin", 20, gpus=8, prefix="big")
    schedule_once()
    many = _queries(client, path)
    if path.startswith("/jobs/queue/"):
        # A fixed set whatever the length: the admin's visible project ids, the waiting jobs
        # counted, then one batch of the cycle's ranking checked (94 waiting here), or, with 3
        # jobs and none waiting, the admitted and running ones read with their own LIMIT.
        assert few <= 12 and many <= 12, f"{path}: {few} queries with 3 jobs, {many} with 103"
    else:
        assert many == few, f"{path}: {few} queries with 3 jobs, {many} with 103"
