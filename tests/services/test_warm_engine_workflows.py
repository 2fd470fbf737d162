"""Arrays and dependencies (DESIGN §17) leave the warm engine deciding exactly as a cold one: a
task released when another ends, or a job released when its dependency ends, reaches the warm
engine as newly submitted; one held back again leaves it. Random worlds with capped arrays and
chains of dependencies; after each cycle no array holds more GPUs than its cap allows."""

import random
from datetime import timedelta

import pytest

from jobs.models import Job, JobArray
from jobs.scheduler.scheduler import schedule
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.snapshot import build_snapshot
from jobs.scheduling.warm import warm_engine
from jobs.services import job_cancel
from tests import factories as fx
from tests.services.test_warm_engine import T0, _decisions, _step, _world

pytestmark = pytest.mark.django_db


def _workflow_step(rng, f, tenants, prios):
    live = list(Job.objects.filter(state__in=["queued", "admitted", "running"]))
    action = rng.random()
    if action < 0.3:
        cap = rng.choice([1, 2, 3])
        fx.submit(rng.choice(tenants), f, gpus=rng.choice([1, 2]), prio=rng.choice(prios), name="arr",
                  array=f"0-{rng.randint(2, 6)}%{cap}")
    elif action < 0.6 and live:
        parent = rng.choice(live)
        condition = rng.choice(["after_ok", "after_any", "after_not_ok"])
        fx.submit(rng.choice(tenants), f, gpus=rng.choice([1, 2, 4]), prio=rng.choice(prios), name="dep",
                  dependencies=[{"condition": condition, "job": parent.pk}])
    elif action < 0.7 and live:
        job_cancel(actor=fx.platform_admin(), job=rng.choice(live))


def _caps_hold() -> bool:
    for array in JobArray.objects.exclude(max_running=None):
        if array.tasks.filter(state__in=["admitted", "running"]).count() > array.max_running:
            return False
    return True


@pytest.mark.parametrize("seed", range(4))
def test_warm_engine_decides_like_a_cold_one_with_arrays_and_dependencies(seed):
    rng = random.Random(seed)
    f, tenants, prios = _world()
    now = T0
    for _ in range(20):
        _step(rng, f, tenants, prios, now)
        _workflow_step(rng, f, tenants, prios)
        now += timedelta(seconds=rng.randint(1, 600))
        cold = _decisions(schedule(build_snapshot(now)))
        engine = warm_engine()
        warm = _decisions(engine.cycle(now))
        engine.invalidate()  # the comparison cycle was not applied; let schedule_once decide again
        assert warm == cold
        schedule_once(now)
        assert _caps_hold()
    assert JobArray.objects.exists() and Job.objects.filter(dependencies__isnull=False).exists()
