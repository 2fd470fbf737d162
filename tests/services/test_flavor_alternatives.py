"""Acceptable flavors and framework requirements (DESIGN §14) through the services: submission
checks, the cycle admitting onto the first flavor it can place (Job.flavor follows), explain per
flavor, and a warm engine deciding like a cold one with such jobs waiting."""

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import translation
from rest_framework.test import APIClient

from jobs.models import Job, JobEvent
from jobs.scheduler.scheduler import schedule
from jobs.scheduling.cycle import explain_job, schedule_once
from jobs.scheduling.snapshot import build_snapshot
from jobs.scheduling.warm import warm_engine
from jobs.services import job_cancel, job_transition
from jobs.states import JobState
from quotas.models import Node
from tests import factories as fx

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture
def mixed():
    """One A100-80G node and one Ascend-910B node (8 each); project p with q = 8 on both."""
    a, b = fx.flavor("A100-80G"), fx.flavor("Ascend-910B")
    a.operator_coverage = {"pytorch": {"coverage": "0.98", "source": "vendor", "date": "2026-06-01"}}
    b.operator_coverage = {"pytorch": {"coverage": "0.85", "source": "vendor", "date": "2026-06-01"}}
    a.save()
    b.save()
    fx.nodes(a, 1)
    fx.nodes(b, 1)
    dept = fx.department("D")
    proj = fx.project("p", dept)
    for f in (a, b):
        fx.quota(f, dept, 8)
        fx.quota(f, proj, 8)
    return a, b, proj


def test_a_list_keeps_its_order_and_the_first_is_the_jobs_flavor(mixed):
    a, b, proj = mixed
    job = fx.submit(proj, [b, a], gpus=2)
    assert (job.flavor, job.flavor_choices) == (b, [b.pk, a.pk])


def test_a_single_flavor_stores_no_choices(mixed):
    a, _, proj = mixed
    job = fx.submit(proj, a, gpus=2)
    assert (job.flavor, job.flavor_choices) == (a, [])


def test_a_framework_requirement_drops_flavors_below_the_minimum(mixed):
    a, b, proj = mixed
    job = fx.submit(proj, [b, a], gpus=2, framework="pytorch", min_operator_coverage=Decimal("0.9"))
    assert (job.flavor, job.flavor_choices, job.framework) == (a, [], "pytorch")
    assert job.min_operator_coverage == Decimal("0.9")


def test_no_flavor_meeting_the_framework_requirement_is_an_error(mixed):
    a, b, proj = mixed
    with pytest.raises(ValidationError) as exc:
        fx.submit(proj, [a, b], gpus=2, framework="pytorch", min_operator_coverage=Decimal("0.99"))
    message = exc.value.message_dict["framework"][0]
    assert "99 %" in message and "A100-80G 98 %" in message and "Ascend-910B 85 %" in message
    with translation.override("en"), pytest.raises(ValidationError) as exc:
        fx.submit(proj, [a, b], gpus=2, framework="mindspore")
    assert "not profiled" in exc.value.message_dict["framework"][0]
    with translation.override("zh-hans"), pytest.raises(ValidationError) as exc:
        fx.submit(proj, [a, b], gpus=2, framework="mindspore")
    assert "未登记" in exc.value.message_dict["framework"][0]
    assert not Job.objects.exists()


def test_every_listed_flavor_must_be_active_and_fit_the_shape(mixed):
    a, b, proj = mixed
    b.active = False
    b.save()
    with pytest.raises(ValidationError) as exc:
        fx.submit(proj, [a, b], gpus=2)
    assert "Ascend-910B" in exc.value.message_dict["flavor"][0]
    b.active = True
    b.save()
    shared = fx.flavor("A100-shared", shareable=True)
    fx.nodes(shared, 1)
    with pytest.raises(ValidationError) as exc:
        fx.submit(proj, [shared, b], gpus=1, gpu_milli=500)
    assert "gpu_milli" in exc.value.message_dict
    with pytest.raises(ValidationError):
        fx.submit(proj, [a, a], gpus=2)


def test_the_cycle_admits_onto_the_second_flavor_when_the_first_is_full(mixed):
    a, b, proj = mixed
    first = fx.submit(proj, a, gpus=8, name="fill")
    schedule_once()
    job = fx.submit(proj, [a, b], gpus=4, name="alt")
    schedule_once()
    job.refresh_from_db()
    first.refresh_from_db()
    assert (first.state, first.flavor) == (JobState.ADMITTED, a)
    assert (job.state, job.flavor, job.flavor_choices) == (JobState.ADMITTED, b, [a.pk, b.pk])
    event = JobEvent.objects.get(job=job, to_state=JobState.ADMITTED)
    assert event.data["flavor"] == "Ascend-910B"
    nodes = {n for worker in job.placement for n, _, _ in worker}
    assert set(Node.objects.filter(pk__in=nodes).values_list("flavor__name", flat=True)) == {"Ascend-910B"}


def test_explain_says_why_each_flavor_cannot_be_used(mixed):
    a, b, proj = mixed
    fx.submit(proj, a, gpus=8, name="fill-a")
    fx.submit(proj, b, gpus=8, name="fill-b")
    schedule_once()
    job = fx.submit(proj, [b, a], gpus=4, name="alt")
    schedule_once()
    out = explain_job(Job.objects.get(pk=job.pk))
    assert [x["flavor"] for x in out["alternatives"]] == ["Ascend-910B", "A100-80G"]
    assert all(x["reason"] for x in out["alternatives"])
    assert out["message"].startswith("Ascend-910B: ") and "; A100-80G: " in out["message"]
    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    body = client.get(reverse("api:job-explain", args=[job.pk])).json()
    assert [x["flavor"] for x in body["alternatives"]] == ["Ascend-910B", "A100-80G"]
    assert all(x["text"] for x in body["alternatives"])  # one sentence per flavor for people
    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(fx.platform_admin())
    html = page.get(f"/jobs/{job.pk}/").content.decode()
    listed = html.split('class="explain-alternatives"', 1)[1].split("</ul>", 1)[0]
    assert listed.index("Ascend-910B") < listed.index("A100-80G")


def test_a_requeued_job_starts_again_from_its_first_choice(mixed):
    a, b, proj = mixed
    fill = fx.submit(proj, a, gpus=8, name="fill")
    schedule_once()
    job = fx.submit(proj, [a, b], gpus=4, name="alt")
    schedule_once()
    job.refresh_from_db()
    assert job.flavor == b
    job_cancel(actor=fx.platform_admin(), job=fill)
    job_transition(job, JobState.PREEMPTED, reason="exited", placement=[])
    job.refresh_from_db()
    job_transition(job, JobState.QUEUED, reason="requeued", placement=[])
    (queued,) = [q for q in build_snapshot(T0).queued if q.id == str(job.pk)]
    assert (queued.flavor, queued.flavors) == ("A100-80G", ("A100-80G", "Ascend-910B"))


def test_a_flavor_deactivated_while_a_job_waits_is_no_longer_chosen_warm_or_cold(mixed):
    a, b, proj = mixed
    fx.submit(proj, a, gpus=8, name="fill-a")
    fill_b = fx.submit(proj, b, gpus=8, name="fill-b")
    schedule_once(T0)
    job = fx.submit(proj, [a, b], gpus=4, name="alt")
    warm_engine().cycle(T0 + timedelta(seconds=1))  # the warm engine now knows the job's two flavors
    warm_engine().invalidate()
    schedule_once(T0 + timedelta(seconds=1))
    b.active = False
    b.save()
    fill_b.refresh_from_db()
    assert job_transition(fill_b, JobState.RUNNING, reason="started")
    fill_b.refresh_from_db()
    assert job_transition(fill_b, JobState.SUCCEEDED, reason="finished")
    now = T0 + timedelta(seconds=2)
    cold = _decisions(schedule(build_snapshot(now)))
    warm = _decisions(warm_engine().cycle(now))
    warm_engine().invalidate()
    assert warm == cold and cold[0] == []  # room on the Ascend node, but it is no longer offered
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


# -- warm == cold with alternatives waiting -----------------------------------------------------
def _decisions(result):
    return (
        sorted((a.job_id, a.workers, a.placement, a.in_quota, a.flavor) for a in result.admissions),
        sorted((p.victim_id, p.reason, p.for_job_id) for p in result.preemptions),
        sorted((r.job_id, r.flavor, r.nodes, r.earliest_start) for r in result.reservations),
    )


def _world():
    a, b = fx.flavor("A100-80G"), fx.flavor("Ascend-910B")
    fx.nodes(a, 2, per_leaf=2)
    fx.nodes(b, 2, per_leaf=2)
    tenants = []
    for d in range(2):
        dept = fx.department(f"d{d}")
        for f in (a, b):
            fx.quota(f, dept, 16, lend=4 if d else None)
        for p in range(2):
            proj = fx.project(f"d{d}p{p}", dept)
            for f in (a, b):
                fx.quota(f, proj, 8)
            tenants.append(proj)
    prios = [fx.priority("low", 10), fx.priority("mid", 100), fx.priority("high", 500, preemptible=False)]
    return [[a], [b], [a, b], [b, a]], tenants, prios


def _step(rng, choices, tenants, prios):
    live = list(Job.objects.filter(state__in=["queued", "admitted"]))
    action = rng.random()
    if action < 0.55 or not live:
        for _ in range(rng.randint(1, 4)):
            fx.submit(
                rng.choice(tenants),
                rng.choice(choices),
                gpus=rng.choice([1, 2, 4, 8]),
                workers=rng.choice([1, 1, 2]),
                prio=rng.choice(prios),
                name=f"j{rng.randint(0, 10**6)}",
            )
    elif action < 0.7:
        job_cancel(actor=fx.platform_admin(), job=rng.choice(live))
    else:
        for job in rng.sample(live, k=min(3, len(live))):
            if job.state != "admitted":
                continue
            if job.terminating_since:  # a preempted victim exits and is requeued
                job_transition(job, JobState.PREEMPTED, reason="exited", placement=[])
                job.refresh_from_db()
                job_transition(job, JobState.QUEUED, reason="requeued", placement=[], terminating_since=None)
            else:  # it starts and finishes
                job_transition(job, JobState.RUNNING, reason="started")
                job.refresh_from_db()
                job_transition(job, JobState.SUCCEEDED, reason="finished")


def _run_world(seed: int) -> int:
    """20 steps of a random world; asserts warm == cold each cycle; returns how many admitted
    jobs ran on a flavor other than their first choice (summed over the cycles)."""
    rng = random.Random(seed)
    choices, tenants, prios = _world()
    now = T0
    second = 0
    for _ in range(20):
        _step(rng, choices, tenants, prios)
        now += timedelta(seconds=rng.randint(1, 600))
        cold = _decisions(schedule(build_snapshot(now)))
        engine = warm_engine()
        warm = _decisions(engine.cycle(now))
        engine.invalidate()  # the comparison cycle was not applied; let schedule_once decide again
        assert warm == cold
        schedule_once(now)
        alts = Job.objects.filter(state="admitted").exclude(flavor_choices=[])
        second += sum(j.flavor_id != j.flavor_choices[0] for j in alts)
    return second


@pytest.mark.parametrize("seed", range(6))
def test_warm_engine_with_alternative_flavors_decides_like_a_cold_one(seed):
    _run_world(seed)


def test_the_random_worlds_run_jobs_on_their_second_choice():
    assert _run_world(3) > 0
