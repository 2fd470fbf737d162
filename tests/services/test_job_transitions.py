"""State changes are conditional updates with one event each: two workers cannot both win."""

import threading

import pytest
from django.db import close_old_connections, connection

from jobs.models import Job, JobEvent
from jobs.services import job_transition
from jobs.states import JobState
from tests import factories as fx


@pytest.fixture
def queued_job(db):
    f = fx.flavor()
    fx.nodes(f, 1)
    d = fx.department("D")
    p = fx.project("p", d)
    fx.quota(f, d, 8)
    fx.quota(f, p, 8)
    return fx.submit(p, f, gpus=1)


def test_a_transition_writes_exactly_one_event(queued_job):
    assert job_transition(queued_job, JobState.CANCELLED, reason="test")
    assert queued_job.state == "cancelled"
    assert list(queued_job.events.values_list("from_state", "to_state")) == [
        ("", "queued"),
        ("queued", "cancelled"),
    ]


def test_terminal_states_refuse_every_transition(queued_job):
    job_transition(queued_job, JobState.CANCELLED, reason="test")
    for target in JobState:
        assert not job_transition(queued_job, target, reason="again")
    assert queued_job.events.count() == 2


def test_a_stale_copy_cannot_overwrite_a_newer_state(queued_job):
    stale = Job.objects.get(pk=queued_job.pk)
    assert job_transition(queued_job, JobState.CANCELLED, reason="first")
    assert not job_transition(stale, JobState.ADMITTED, reason="stale scheduler")
    queued_job.refresh_from_db()
    assert queued_job.state == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_on_one_job_give_one_winner(queued_job):
    barrier, wins = threading.Barrier(8), []

    def worker(target):
        copy = Job.objects.get(pk=queued_job.pk)
        barrier.wait(timeout=60)  # a hang guard
        try:
            wins.append(job_transition(copy, target, reason=f"race {target}"))
        finally:
            close_old_connections()
            connection.close()

    targets = [JobState.CANCELLED, JobState.ADMITTED] * 4
    threads = [threading.Thread(target=worker, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert wins.count(True) == 1
    assert JobEvent.objects.filter(job_id=queued_job.pk).exclude(from_state="").count() == 1
