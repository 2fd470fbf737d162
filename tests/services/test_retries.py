"""Retries (DESIGN §17, issue 35 item 3) on the simulated cluster: a run that fails with exit code
1 goes back to the queue (running → queued, never through failed) and waits out its backoff; a
final exit code ends it; a node failure is not a retry. And the rules of a submission's
``max_retries``. (The retried run that succeeds, and its billing, run on real Slurm:
tests/backends/test_slurm_rendezvous.py.)"""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone, translation

from jobs.clusters import dispatch
from jobs.models import Job, backend_name
from jobs.retries import backoff, retry_policy
from jobs.scheduling.cycle import schedule_once
from quotas.models import Node
from tests import factories as fx
from tests.waiting import settle

pytestmark = pytest.mark.django_db


def test_the_backoff_doubles_from_a_minute_up_to_an_hour():
    assert [backoff(n).total_seconds() for n in range(1, 9)] == [60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert backoff(1000) == timedelta(hours=1)
    with pytest.raises(ValueError):
        backoff(0)


def _transitions(job) -> list[str]:
    return list(job.events.filter(kind="transition").order_by("occurred_at", "id")
                .values_list("to_state", flat=True))


def _running(sim_pool, **kw) -> Job:
    f, cluster, pa, _, _sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=10**6, **kw)
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    return settle(cluster, job, {"running"})


def test_exit_code_1_is_retried_and_a_final_exit_code_then_ends_it(sim_pool):
    _f, cluster, _pa, _, sim = sim_pool
    job = _running(sim_pool, max_retries=3)
    sim.backend().crash(backend_name(job.pk), exit_code=1)
    settle(cluster, job, {"queued", "failed"})
    assert job.state == "queued" and job.retries == 1 and job.exit_code == 1
    assert job.not_before is not None
    assert schedule_once().admitted == 0  # in its backoff
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))  # it passed
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(cluster, job, {"running"})
    # The second run ends with a code the centre marks final: no retry, whatever is left.
    assert 78 in retry_policy().final_exit_codes
    sim.backend().crash(backend_name(job.pk), exit_code=78)
    settle(cluster, job, {"queued", "failed"})
    assert job.state == "failed" and job.retries == 1 and job.exit_code == 78
    assert _transitions(job) == ["queued", "admitted", "running", "queued", "admitted", "running", "failed"]


def test_without_retries_left_a_failure_is_final(sim_pool):
    _f, cluster, _pa, _, sim = sim_pool
    job = _running(sim_pool)  # max_retries 0: the default
    sim.backend().crash(backend_name(job.pk), exit_code=1)
    settle(cluster, job, {"queued", "failed"})
    assert job.state == "failed" and job.retries == 0


def test_a_node_failure_is_not_a_retry(sim_pool):
    _f, cluster, _pa, _, sim = sim_pool
    job = _running(sim_pool, max_retries=2)
    node = job.placement[0][0][0]
    sim.backend().set_node_state(Node.objects.get(pk=node).name, "down")
    settle(cluster, job, {"queued", "failed"})
    assert job.retries == 0
    assert not job.events.filter(data__has_key="retry").exists()


def test_max_retries_is_checked_against_the_centres_limit_and_the_kind(sim_pool):
    f, _cluster, pa, _, _sim = sim_pool
    limit = retry_policy().max_retries_limit
    with translation.override("en"):  # the messages are read in English below
        with pytest.raises(ValidationError) as over:
            fx.submit(pa, f, gpus=1, max_retries=limit + 1)
        assert over.value.message_dict == {"max_retries": [f"Between 0 and {limit} (the centre's maximum)."]}
        with pytest.raises(ValidationError) as kind:
            fx.submit(pa, f, gpus=1, kind="inference", max_retries=1)
        assert kind.value.message_dict == {"max_retries": ["Only training jobs are retried."]}
    assert not Job.objects.exists()
    assert fx.submit(pa, f, gpus=1, max_retries=limit).max_retries == limit


def test_the_simulator_gives_every_worker_the_rendezvous_variables(sim_pool):
    f, cluster, pa, _, sim = sim_pool
    job = fx.submit(pa, f, gpus=8, workers=2, sim_duration_seconds=10**6)
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(cluster, job, {"running"})
    nodes = [Node.objects.get(pk=worker[0][0]).name for worker in job.placement]
    view = sim.backend().view(backend_name(job.pk))
    shared = {"MASTER_ADDR": nodes[0], "MASTER_PORT": "29500", "WORLD_SIZE": "2", "NNODES": "2"}
    assert view["rendezvous"] == [{**shared, "NODE_RANK": "0"}, {**shared, "NODE_RANK": "1"}]
    log = sim.backend().log_tail(backend_name(job.pk), max_bytes=100_000).text
    assert f"worker 1: MASTER_ADDR={nodes[0]} MASTER_PORT=29500 WORLD_SIZE=2 NNODES=2 NODE_RANK=1" in log
