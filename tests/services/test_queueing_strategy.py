"""Queueing strategies (issue 25 item 4) with the real scheduler on PostgreSQL: a project's big
job behind a steady stream of 1-GPU jobs of the same project that keeps it at its quota.

The pool: 2 nodes × 8 GPUs; department D (quota 16), project p with quota 8 and borrow limit 0
(its jobs wait for its own quota, never for capacity), project q idle. p runs eight 1-GPU jobs;
then an 8-GPU job of p arrives, and at every round one small job finishes and a new one is
submitted before the cycle runs.

* best effort: the freed GPU goes to the new small job at every round; the big job is reported
  as waiting (explain: p's borrow limit) for as long as the stream lasts;
* strict FIFO: the big job blocks the later small jobs; it starts once the 8 small jobs running
  when it arrived have finished — within 8 rounds (the stated bound); the small jobs behind it
  say why they wait (explain reason ``fifo``, naming the big job);
* best effort with an aging bound: once the big job has waited longer than the bound it blocks
  the same way (explain says how long it has waited) and starts within 8 more rounds.
"""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from jobs.transitions import job_transition
from portal.models import Queueing
from tests import factories as fx

pytestmark = pytest.mark.django_db
SMALL_RUNNING = 8  # the stated bound: rounds until the big job starts under strict FIFO / aging


@pytest.fixture
def stream_world():
    f = fx.flavor()
    fx.nodes(f, 2)
    d = fx.department("D")
    p, q = fx.project("p", d), fx.project("q", d)
    fx.quota(f, d, 16)
    fx.quota(f, p, 8, borrow=0)
    fx.quota(f, q, 8)
    return f, p


class Stream:
    """p's small jobs: started at first, then one finishes and one arrives per round."""

    def __init__(self, f, p):
        self.f, self.p, self.n = f, p, 0
        self.jobs = [self.submit() for _ in range(SMALL_RUNNING)]

    def submit(self) -> Job:
        self.n += 1
        return fx.submit(self.p, self.f, gpus=1, name=f"s{self.n}")

    def round(self, now=None):
        """The oldest small job still holding a GPU finishes, a new one arrives; one cycle."""
        running = Job.objects.filter(project=self.p, gpus_per_worker=1, state=JobState.ADMITTED)
        done = running.order_by("admitted_at", "id").first()
        assert job_transition(done, JobState.RUNNING, reason="started")
        done.refresh_from_db()
        assert job_transition(done, JobState.SUCCEEDED, reason="finished")
        self.jobs.append(self.submit())
        return schedule_once(now)


def _state(job) -> str:
    job.refresh_from_db()
    return job.state


def _explain(job) -> dict:
    client = APIClient(HTTP_ACCEPT_LANGUAGE="en")
    client.force_authenticate(fx.platform_admin())
    response = client.get(reverse("api:job-explain", args=[job.pk]))
    assert response.status_code == 200
    return response.json()


def _start(stream_world, **project):
    f, p = stream_world
    for name, value in project.items():
        setattr(p, name, value)
    p.save()
    stream = Stream(f, p)
    assert schedule_once().admitted == SMALL_RUNNING
    big = fx.submit(p, f, gpus=8, name="big")
    return stream, big


def test_best_effort_the_big_job_waits_behind_the_stream(stream_world):
    stream, big = _start(stream_world)
    for _ in range(3 * SMALL_RUNNING):
        assert stream.round().admitted == 1  # the new small job takes the freed GPU
        assert _state(big) == JobState.QUEUED
    answer = _explain(big)
    assert answer["reason"] == "borrow_limit" and answer["behind"] is None
    assert answer["waited_seconds"] is None  # no aging bound: it waits, and says why


def test_strict_fifo_starts_the_big_job_within_the_bound_and_explains_the_small_ones(stream_world):
    stream, big = _start(stream_world, queueing=Queueing.STRICT_FIFO)
    rounds = 0
    while _state(big) == JobState.QUEUED:
        rounds += 1
        assert rounds <= SMALL_RUNNING, "the big job did not start within the bound"
        stream.round()
        if _state(big) == JobState.QUEUED:
            answer = _explain(stream.jobs[-1])  # the small job that just arrived
            assert answer["reason"] == "fifo" and answer["behind"] == big.pk
            assert answer["behind_why"] == "strict_fifo"
            assert f"job #{big.pk} of its project" in answer["text"]
    assert rounds == SMALL_RUNNING  # it waited for every small job running when it arrived
    assert _state(big) == JobState.ADMITTED


def test_aging_bound_lets_the_big_job_start(stream_world):
    stream, big = _start(stream_world, aging_bound_seconds=600)
    for _ in range(2):
        assert stream.round().admitted == 1  # best effort while it is under the bound
    later = timezone.now() + timedelta(seconds=900)
    rounds = 0
    while _state(big) == JobState.QUEUED:
        rounds += 1
        assert rounds <= SMALL_RUNNING, "the big job did not start within the bound"
        stream.round(later)
        if rounds == 1:
            answer = _explain(big)
            assert answer["reason"] == "borrow_limit"
            assert answer["waited_seconds"] >= 900 and answer["aging_bound_seconds"] == 600
            assert "longer than the aging bound" in answer["text"]
            behind = _explain(stream.jobs[-1])
            assert (behind["reason"], behind["behind"], behind["behind_why"]) == ("fifo", big.pk, "aging")
        later += timedelta(seconds=1)
    assert _state(big) == JobState.ADMITTED


def test_only_who_sets_the_quota_sets_the_queueing_strategy(world, api):
    url = reverse("api:project-detail", args=[world.pa1.pk])
    response = api(world.users["pa1_admin"]).patch(url, {"queueing": "strict_fifo"}, format="json")
    assert response.status_code == 403
    response = api(world.users["pa1_admin"]).patch(url, {"description": "ours"}, format="json")
    assert response.status_code == 200  # the project's own fields stay the project admin's
    admin = api(world.users["a_admin"])
    for bad in ({"queueing": "lifo"}, {"aging_bound_seconds": 5}, {"aging_bound_seconds": "1h"}):
        response = admin.patch(url, bad, format="json")
        assert response.status_code == 400 and set(response.json()) == set(bad)
    world.pa1.refresh_from_db()
    assert (world.pa1.queueing, world.pa1.aging_bound_seconds) == (Queueing.BEST_EFFORT, None)
    response = admin.patch(url, {"queueing": "strict_fifo", "aging_bound_seconds": 7200}, format="json")
    assert response.status_code == 200
    assert (response.json()["queueing"], response.json()["aging_bound_seconds"]) == ("strict_fifo", 7200)
