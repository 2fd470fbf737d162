"""Jobs really run on the simulated cluster and flow back: dispatch, status sync, preemption
with its grace period and requeue, user cancel, node failure. The simulator is a real server
process (tests/simserver.py); the portal talks to it only through the backend interface."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.clusters import dispatch
from jobs.models import Job, JobEvent, backend_name
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_cancel
from quotas.models import Node
from tests import factories as fx
from tests.waiting import settle

pytestmark = pytest.mark.django_db


def _sim_jobs(sim) -> dict:
    import json
    import urllib.request

    with urllib.request.urlopen(sim.url + "/jobs") as response:
        return json.load(response)["jobs"]


def _transitions(job):
    return list(job.events.filter(kind="transition").values_list("to_state", flat=True))


def test_a_job_runs_on_the_simulator_and_its_states_and_times_flow_back(sim_pool):
    f, cluster, pa, _, sim = sim_pool
    job = fx.submit(pa, f, gpus=4, workers=2, sim_duration_seconds=50)
    schedule_once()
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    assert dispatch.dispatch_job(job.pk) == "not claimable"  # a retry never submits twice
    assert len(sim.backend().status([backend_name(job.pk)])) == 1
    settle(cluster, job, {"succeeded"})
    assert _transitions(job) == ["queued", "admitted", "running", "succeeded"]
    assert job.started_at < job.finished_at and job.exit_code == 0


def test_a_dispatch_retried_after_a_crash_finds_the_job_it_created(sim_pool):
    f, _cluster, pa, _, sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=5000)
    schedule_once()
    dispatch.dispatch_job(job.pk)
    # The worker "died" after submitting but before recording: forget the record, age the claim.
    Job.objects.filter(pk=job.pk).update(
        dispatched_at=None, dispatch_claimed_at=job.submitted_at - timedelta(hours=1)
    )
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    listed = [name for name in sim.backend().status([backend_name(job.pk)])]
    assert listed == [backend_name(job.pk)]
    assert len(_sim_jobs(sim)) == 1  # exactly one backend job for the portal job


def _a1_reclaims_a_running_job(sim_pool, **b2):
    """pb runs b1 and b2 (8 GPUs each, the second on loan) on the cluster; pa's a1 (in quota)
    reclaims one of them. Returns (a1, the victim)."""
    f, cluster, pa, pb, _sim = sim_pool
    b1 = fx.submit(pb, f, gpus=8, sim_duration_seconds=100000, name="b1")
    b2 = fx.submit(pb, f, gpus=8, sim_duration_seconds=100000, name="b2", **b2)
    schedule_once()
    for job in (b1, b2):
        dispatch.dispatch_job(job.pk)
        settle(cluster, job, {"running"})
    a1 = fx.submit(pa, f, gpus=8, sim_duration_seconds=50, name="a1")
    assert schedule_once().preempted == 1
    return a1, Job.objects.get(pk__in=[b1.pk, b2.pk], terminating_since__isnull=False)


def test_reclaim_stops_the_on_loan_job_after_its_grace_and_requeues_it(sim_pool):
    cluster = sim_pool[1]
    a1, victim = _a1_reclaims_a_running_job(sim_pool, checkpointing=True)
    assert dispatch.dispatch_job(a1.pk) == "waiting for victims"
    assert dispatch.stop_job(victim.pk) == "stopping"
    assert dispatch.stop_job(victim.pk) == "not claimable"
    settle(cluster, victim, {"queued"})
    assert _transitions(victim)[-3:] == ["running", "preempted", "queued"]
    assert victim.requeue_count == 1 and victim.placement == []
    assert dispatch.dispatch_job(a1.pk) == "dispatched"
    settle(cluster, a1, {"succeeded"})


def test_a_job_preempted_before_it_was_dispatched_is_requeued_without_starting(sim_pool):
    f, _cluster, pa, pb, sim = sim_pool
    b1 = fx.submit(pb, f, gpus=8, sim_duration_seconds=100000, name="b1")
    b2 = fx.submit(pb, f, gpus=8, sim_duration_seconds=100000, name="b2")
    schedule_once()  # both admitted (one on loan), neither dispatched yet
    a1 = fx.submit(pa, f, gpus=8, sim_duration_seconds=50, name="a1")
    assert schedule_once().preempted == 1
    victim = Job.objects.get(pk__in=[b1.pk, b2.pk], terminating_since__isnull=False)
    assert victim.dispatched_at is None
    assert dispatch.dispatch_job(victim.pk) == "requeued: preempted before it started"
    victim.refresh_from_db()
    assert victim.state == "queued" and victim.dispatched_at is None and victim.placement == []
    assert _transitions(victim)[-3:] == ["admitted", "preempted", "queued"]
    assert dispatch.dispatch_job(a1.pk) == "dispatched"  # its victim never ran
    assert backend_name(victim.pk) not in _sim_jobs(sim)


def test_a_victim_admitted_again_later_does_not_hold_back_its_preemptor(sim_pool):
    cluster = sim_pool[1]
    a1, victim = _a1_reclaims_a_running_job(sim_pool)
    assert dispatch.dispatch_job(a1.pk) == "waiting for victims"
    dispatch.stop_job(victim.pk)
    settle(cluster, victim, {"queued"})
    # Before a1 is dispatched, a later cycle admits the victim again, elsewhere (its own new
    # run, placed around a1): written as that cycle would, a conditional update and its event.
    later = timezone.now() + timedelta(seconds=1)
    assert Job.objects.filter(pk=victim.pk, state="queued").update(state="admitted", admitted_at=later)
    JobEvent.objects.create(job=victim, kind="transition", from_state="queued", to_state="admitted",
                            reason="admitted by the scheduler", occurred_at=later, data={"preempts": []})
    assert dispatch.dispatch_job(a1.pk) == "dispatched"


def test_the_preemptor_of_an_unstarted_preemptor_waits_for_the_first_victim(sim_pool):
    """a1 reclaims b2's GPUs, and before a1 starts, a2 (higher priority, same project) takes
    them from a1. a1 never ran and is requeued at once, so a2's recorded victim is gone — but
    b2 still runs there in its grace period. Found by the 50-client concurrency run."""
    f, cluster, pa, _pb, sim = sim_pool
    a1, victim = _a1_reclaims_a_running_job(sim_pool)
    a2 = fx.submit(pa, f, gpus=8, sim_duration_seconds=50, name="a2", prio=fx.priority("high", 500))
    assert schedule_once().preempted == 1
    a1.refresh_from_db()
    a2.refresh_from_db()
    assert a1.terminating_since is not None and a2.state == "admitted"
    assert a2.placement == a1.placement == victim.placement  # all on the first victim's node
    assert dispatch.dispatch_job(a1.pk) == "requeued: preempted before it started"
    assert dispatch.dispatch_job(a2.pk) == "waiting for its GPUs"
    assert backend_name(a2.pk) not in _sim_jobs(sim)
    dispatch.stop_job(victim.pk)
    settle(cluster, victim, {"queued"})
    assert dispatch.dispatch_job(a2.pk) == "dispatched"


def test_cancelling_a_running_job_stops_it_before_releasing_its_gpus(sim_pool):
    f, cluster, pa, _, _ = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=100000)
    schedule_once()
    dispatch.dispatch_job(job.pk)
    settle(cluster, job, {"running"})
    job_cancel(actor=fx.platform_admin(), job=job)
    job.refresh_from_db()
    assert job.state == "running" and job.cancel_requested_at is not None  # still holds its GPUs
    dispatch.stop_job(job.pk)
    settle(cluster, job, {"cancelled"})
    assert _transitions(job)[-1] == "cancelled"


def test_node_failure_requeues_every_job_on_the_node(sim_pool):
    f, cluster, pa, pb, sim = sim_pool
    plain = fx.submit(pa, f, gpus=8, sim_duration_seconds=100000, name="plain")
    ckpt = fx.submit(pb, f, gpus=8, sim_duration_seconds=100000, name="ckpt", checkpointing=True)
    schedule_once()
    for job in (plain, ckpt):
        dispatch.dispatch_job(job.pk)
        settle(cluster, job, {"running"})
    for node in Node.objects.filter(cluster=cluster):
        sim.backend().set_node_state(node.name, "down")
    settle(cluster, plain, {"queued"})  # not its fault: started again, not failed (DESIGN §17)
    settle(cluster, ckpt, {"queued"})
    assert _transitions(ckpt)[-2:] == _transitions(plain)[-2:] == ["lost", "queued"]
    assert not Job.objects.filter(state__in=["admitted", "running"]).exists()  # quota usage released


def test_a_dev_job_past_its_lifetime_is_stopped_and_expires(sim_pool):
    from jobs.services import job_submit

    f, cluster, pa, _, _ = sim_pool
    dev = job_submit(
        actor=fx.platform_admin(),
        project=pa,
        name="notebook",
        kind="dev",
        flavor=f,
        priority_class=fx.priority(),
        image="jupyter",
        sim_duration_seconds=10**6,
    )
    assert dev.max_runtime_seconds == 86400  # DESIGN §4: 24 h by default
    schedule_once()
    dispatch.dispatch_job(dev.pk)
    settle(cluster, dev, {"running"})
    assert dispatch.expire_overdue(dev.started_at + timedelta(hours=23)) == []
    assert dispatch.expire_overdue(dev.started_at + timedelta(hours=24)) == [dev.pk]
    assert dispatch.expire_overdue(dev.started_at + timedelta(hours=25)) == []  # claimed once
    assert dispatch.stop_job(dev.pk) == "stopping"
    settle(cluster, dev, {"expired"})
    assert _transitions(dev)[-1] == "expired"


def test_a_training_job_past_max_runtime_fails(sim_pool):
    f, cluster, pa, _, _ = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=10**6)  # max_runtime_seconds=3600
    schedule_once()
    dispatch.dispatch_job(job.pk)
    settle(cluster, job, {"running"})
    dispatch.expire_overdue(job.started_at + timedelta(seconds=3600))
    dispatch.stop_job(job.pk)
    settle(cluster, job, {"failed"})
    assert job.events.filter(to_state="failed").get().reason == "max runtime exceeded"


def test_each_user_has_a_limit_of_live_dev_jobs(sim_pool):
    from django.core.exceptions import ValidationError

    from jobs.services import job_submit

    f, _, pa, _, _ = sim_pool
    user = fx.platform_admin()
    for i in range(2):
        job_submit(
            actor=user,
            project=pa,
            name=f"nb{i}",
            kind="dev",
            flavor=f,
            priority_class=fx.priority(),
            image="jupyter",
        )
    with pytest.raises(ValidationError) as refused:
        job_submit(
            actor=user,
            project=pa,
            name="nb2",
            kind="dev",
            flavor=f,
            priority_class=fx.priority(),
            image="jupyter",
        )
    assert "kind" in refused.value.message_dict
