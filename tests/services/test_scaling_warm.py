"""The warm engine decides exactly as a cold one when elastic jobs run, grow, are scaled by
their owners (down: a rebuild; up: a retarget) and finish between cycles — the elastic
counterpart of tests/services/test_warm_engine.py."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from jobs.models import Job
from jobs.scheduler.scheduler import schedule
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.snapshot import build_snapshot
from jobs.scheduling.warm import warm_engine
from jobs.services import job_cancel, job_scale, job_submit, job_transition
from jobs.states import JobState
from quotas.models import Cluster
from tests import factories as fx

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _decisions(result):
    return (
        sorted((a.job_id, a.workers, a.placement, a.in_quota) for a in result.admissions),
        sorted((p.victim_id, p.reason, p.for_job_id, p.worker or -1) for p in result.preemptions),
        sorted((r.job_id, r.nodes, r.earliest_start) for r in result.reservations),
        sorted((g.job_id, g.workers, g.added) for g in result.growths),
        sorted(result.on_loan.items()),
    )


def _world():
    f = fx.flavor()
    fx.nodes(f, 4, per_leaf=2)
    tenants = []
    for d in range(2):
        dept = fx.department(f"d{d}")
        fx.quota(f, dept, 16, lend=4 if d else None)
        for p in range(2):
            proj = fx.project(f"d{d}p{p}", dept)
            fx.quota(f, proj, 8)
            tenants.append(proj)
    return f, tenants, [fx.priority("low", 10), fx.priority("mid", 100)]


def _submit(rng, f, tenants, prios):
    project, prio = rng.choice(tenants), rng.choice(prios)
    if rng.random() < 0.5:
        workers = rng.choice([4, 6, 8])
        job_submit(
            actor=fx.platform_admin(),
            project=project,
            name=f"s{rng.randint(0, 10**6)}",
            kind="inference",
            flavor=f,
            priority_class=prio,
            image="vllm",
            workers=workers,
            min_workers=rng.randint(1, 2),
            gpus_per_worker=rng.choice([1, 2]),
        )
    else:
        fx.submit(project, f, gpus=rng.choice([1, 2, 4, 8]), prio=prio, name=f"j{rng.randint(0, 10**6)}")


def _start(job, now):
    """The backend started an admitted job (at once: started_at = admitted_at)."""
    cluster = Cluster.objects.get(name="sim")
    Job.objects.filter(pk=job.pk).update(dispatched_at=now, cluster=cluster)
    job.refresh_from_db()
    job_transition(job, JobState.RUNNING, reason="started", started_at=job.admitted_at)


def _step(rng, f, tenants, prios, now):
    live = list(Job.objects.filter(state__in=["queued", "admitted", "running"]).order_by("pk"))
    action = rng.random()
    if action < 0.4 or not live:
        for _ in range(rng.randint(1, 3)):
            _submit(rng, f, tenants, prios)
    elif action < 0.5:
        job_cancel(actor=fx.platform_admin(), job=rng.choice(live))
    elif action < 0.7:
        scalable = [
            j
            for j in live
            if j.state == "running"
            and j.kind == "inference"
            and j.min_workers
            and not j.terminating_since
            and not j.cancel_requested_at
        ]
        if scalable:
            job = rng.choice(scalable)
            job_scale(actor=fx.platform_admin(), job=job, replicas=rng.randint(job.min_workers, job.workers))
    for job in live:
        job.refresh_from_db()
        if job.state == "admitted" and not job.terminating_since:
            _start(job, now)
        elif job.state in ("admitted", "running") and (job.terminating_since or rng.random() < 0.2):
            target = JobState.PREEMPTED if job.terminating_since else JobState.SUCCEEDED
            job_transition(job, target, reason="exited", finished_at=now)
            if target == JobState.PREEMPTED:
                job.refresh_from_db()
                job_transition(job, JobState.QUEUED, reason="requeued", placement=[], terminating_since=None)


def _run(seed: int) -> int:
    """20 random steps; warm == cold at every cycle; returns how many growths applied."""
    rng = random.Random(seed)
    f, tenants, prios = _world()
    now = T0
    grew = 0
    for _ in range(20):
        _step(rng, f, tenants, prios, now)
        now += timedelta(seconds=rng.randint(1, 600))
        cold = schedule(build_snapshot(now))
        engine = warm_engine()
        warm = engine.cycle(now)
        engine.invalidate()  # the comparison cycle was not applied; let schedule_once decide again
        assert _decisions(warm) == _decisions(cold)
        grew += schedule_once(now).grown
    return grew


@pytest.mark.parametrize("seed", range(6))
def test_warm_engine_with_growing_and_scaled_jobs_decides_like_a_cold_one(seed):
    _run(seed)


def test_the_random_world_does_grow_jobs():
    assert _run(3) > 0
