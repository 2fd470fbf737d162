"""The job resource carries its estimated start (issue 24 item 2): ``GET /api/v1/jobs/{id}/`` and
the job list give ``start_estimate`` — null unless the job waits — the same answer as
``/explain/``; the list reads every estimate of a page in one cache read, with no query per row."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.scheduling import start_estimates
from jobs.scheduling.start_estimates import start_estimates_refresh
from tests import factories as fx
from tests.start_estimate_scene import submit_training, two_running_two_waiting

pytestmark = pytest.mark.django_db


@pytest.fixture
def prio(db):
    return fx.priority("training", 100)


@pytest.fixture
def queue(world, prio):
    """16 GPUs: two 8-GPU jobs with a 1 h limit run from ``now``, two wait for them."""
    return two_running_two_waiting(world, prio)


def test_the_job_resource_gives_the_estimate_of_a_waiting_job_and_null_otherwise(api, world, queue):
    now, waiting, admitted = queue
    client = api(world.users["pb_member"])
    detail = client.get(f"/api/v1/jobs/{waiting[0].pk}/").json()
    expected = {"estimated_start": (now + timedelta(hours=1)).isoformat(), "unknown_reason": None,
                "unknown_text": "", "computed_at": now.isoformat()}
    assert detail["start_estimate"] == expected
    assert client.get(f"/api/v1/jobs/{waiting[0].pk}/explain/").json()["start_estimate"] == expected
    assert client.get(f"/api/v1/jobs/{admitted[0].pk}/").json()["start_estimate"] is None
    listed = {row["id"]: row["start_estimate"] for row in client.get("/api/v1/jobs/").json()["results"]}
    assert listed[waiting[0].pk] == listed[waiting[1].pk] == expected
    assert listed[admitted[0].pk] is None and listed[admitted[1].pk] is None


def test_unknown_estimates_say_why_in_the_readers_language(api, world, prio, queue):
    _now, waiting, _admitted = queue
    Job.objects.filter(pk=waiting[0].pk).update(state="pending_approval")
    (late,) = submit_training(world, prio, 1, first=10)  # submitted after the forecast
    client = api(world.users["pb_member"])
    rows = {r["id"]: r["start_estimate"] for r in client.get("/api/v1/jobs/").json()["results"]}
    assert rows[waiting[0].pk]["unknown_reason"] == "approval"
    assert rows[late.pk]["unknown_reason"] == "not_computed" and rows[late.pk]["estimated_start"] is None
    zh = client.get(f"/api/v1/jobs/{late.pk}/", HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    assert zh["start_estimate"]["unknown_text"] == "尚未估算"


class _CountingCache:
    """The real cache, counting the reads (what the list must do once per page)."""

    def __init__(self, real):
        self.real, self.reads = real, 0

    def get(self, *args, **kwargs):
        self.reads += 1
        return self.real.get(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_the_list_reads_every_estimate_at_once_with_no_query_per_row(api, world, prio, queue, monkeypatch):
    now, _waiting, _admitted = queue
    client = api(world.users["pb_member"])
    counting = _CountingCache(start_estimates.cache)
    monkeypatch.setattr(start_estimates, "cache", counting)

    def listing():
        client.get("/api/v1/jobs/")  # the session, the token: the first request's own queries
        counting.reads = 0
        with CaptureQueriesContext(connection) as queries:
            rows = client.get("/api/v1/jobs/").json()["results"]
        return rows, len(queries), counting.reads

    few, few_queries, few_reads = listing()
    submit_training(world, prio, 12, first=20)
    start_estimates_refresh(now)
    many, many_queries, many_reads = listing()
    assert len(many) == len(few) + 12 and sum(r["start_estimate"] is not None for r in many) == 14
    assert all(r["start_estimate"]["unknown_reason"] is None for r in many if r["state"] == "queued")
    assert many_queries == few_queries  # nothing per row
    assert few_reads == many_reads == 1  # one cache read per page
