"""A real Celery worker and beat run the scheduling cycle by themselves (DESIGN §5).

``admitted`` is a passing state: right after the cycle admits a job it asks for backend work,
which dispatches it (``running``), and a short job ends soon after. So the tests wait for the
durable fact, the ``admitted`` event row (the log is append-only), never for the job to *be*
admitted at the moment a poll looks (issue 18, item 19)."""

from contextlib import contextmanager

import pytest

from jobs.models import Job
from jobs.states import JobState
from tests import factories as fx
from tests.celery_procs import private_queue, start_beat, start_worker
from tests.waiting import wait_until

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


@contextmanager
def _worker_and_beat(tmp_path):
    """A worker and beat on a private queue, the cycle and backend work every second. Their
    output is printed when they stop: pytest shows it with a failure."""
    queue = private_queue()
    fast = {"SCHEDULE_INTERVAL_SECONDS": "1", "SYNC_INTERVAL_SECONDS": "1"}
    procs = [start_worker(queue, **fast), start_beat(queue, tmp_path / "beat", **fast)]
    try:
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            print(proc.communicate(timeout=60)[0].decode(errors="replace"))


def _about(job: Job):
    return lambda: f"job {job.pk}: " + str(list(job.events.values_list("kind", "to_state", "reason")))


def _admitted_events(job: Job) -> int:
    return job.events.filter(kind="transition", to_state=JobState.ADMITTED).count()


def _assert_admitted_once_then_moved_on_by_its_log(job: Job) -> None:
    """Exactly one admission, and the job's state is the one its own log leads to from there."""
    job.refresh_from_db()
    transitions = list(
        job.events.filter(kind="transition").order_by("occurred_at", "id").values_list("to_state", flat=True)
    )
    assert transitions[:2] == [JobState.QUEUED, JobState.ADMITTED], transitions
    assert transitions.count(JobState.ADMITTED) == 1, transitions
    assert job.state == transitions[-1], (job.state, transitions)


def test_beat_and_worker_admit_a_submitted_job(sim_pool, tmp_path):
    f, _cluster, pa, _pb, _sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=10**6)
    with _worker_and_beat(tmp_path):
        wait_until(lambda: _admitted_events(job), "the cycle to admit the job", about=_about(job))
    _assert_admitted_once_then_moved_on_by_its_log(job)


def test_item19_a_job_that_ends_at_once_was_still_admitted_exactly_once(sim_pool, tmp_path):
    """The job lasts one simulated second (10 ms): it is admitted, dispatched and finished
    between two looks of any poll. Polling for ``state == "admitted"`` misses it (it did, on a
    loaded machine); the event row is there for good."""
    f, _cluster, pa, _pb, _sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=1)
    with _worker_and_beat(tmp_path):
        wait_until(lambda: _admitted_events(job), "the cycle to admit the job", about=_about(job))
        wait_until(
            lambda: Job.objects.get(pk=job.pk).state == JobState.SUCCEEDED,
            "the job to end",
            about=_about(job),
        )
    _assert_admitted_once_then_moved_on_by_its_log(job)
    assert job.state == JobState.SUCCEEDED
