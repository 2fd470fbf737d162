"""Autoscaling from load end to end: the simulator's service emits its requests per second, a
real Prometheus scrapes it, the real pass (``autoscale_tick``, what the beat task runs) decides
and scales through the owner's paths — up to the cap as quota allows, down after the cool-down.
Time is driven by explicit ``now`` arguments; waits are only for Prometheus to hold a sample."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.test import override_settings
from django.utils import timezone, translation

from jobs.clusters import dispatch
from jobs.models import Job, JobEvent, backend_name
from jobs.reasons import reason_text
from jobs.scheduling.autoscale import (
    autoscale_tick,
    clean_settings,
    filled_query,
    job_autoscale_set,
    query_value,
)
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_scale, job_submit
from jobs.tasks import autoscale as autoscale_task
from portal.models import Membership, Role, User
from portal.texts import render_in
from quotas.models import QuotaNode
from tests import factories as fx
from tests.waiting import settle, wait_until

pytestmark = pytest.mark.django_db

QUERY = 'avg(gpupool_sim_requests_per_second{hpc_job="{job}"})'


def _gpupool(**over):
    from django.conf import settings

    return {**settings.GPUPOOL, **over}


def _inference(project, f, *, workers=6, min_workers=1, name="svc", env=None):
    return job_submit(
        actor=fx.platform_admin(), project=project, name=name, kind="inference", flavor=f,
        priority_class=fx.priority(), image="vllm:0.6", workers=workers, min_workers=min_workers,
        gpus_per_worker=1, sim_duration_seconds=10**6, env=env,
    )


def _running(cluster, *jobs):
    schedule_once()
    for job in jobs:
        job.refresh_from_db()
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        settle(cluster, job, {"running"})


def _per_replica(prom, job, expected: float, sim=None) -> None:
    """Prometheus has scraped the load the simulator serves now (per replica)."""
    def seen():
        result = prom.query(filled_query(job))
        return result and abs(float(result[0]["value"][1]) - expected) < 1e-6

    wait_until(
        seen, f"Prometheus to see {expected} per replica of job {job.pk}", interval=0.5, retry_on=OSError,
        about=lambda: f"Prometheus has {prom.query('gpupool_sim_requests_per_second')}",
    )


def _status(job):
    job.refresh_from_db()
    status = dict(job.autoscale_status)
    status["reason"] = render_in("en", status["reason"])
    return status


@pytest.mark.prometheus
def test_load_scales_a_service_up_to_its_cap_within_quota_and_down_after_the_cool_down(
    sim_pool, prometheus_for
):
    f, cluster, pa, _pb, sim = sim_pool
    QuotaNode.objects.filter(project=pa).update(borrow_limit=0)  # pa may hold 8 GPUs, no more
    filler = fx.submit(pa, f, gpus=5, name="filler", sim_duration_seconds=10**6)
    svc = _inference(pa, f, env=[{"name": "SIM_LOAD_RPS", "value": "60"}])
    _running(cluster, filler, svc)
    admin = fx.platform_admin()
    job_scale(actor=admin, job=svc, replicas=1)  # the owner starts it small
    assert dispatch.resize_job(svc.pk) == "resized"
    name = backend_name(svc.pk)
    svc = job_autoscale_set(actor=admin, job=svc, query=QUERY, target="10", cooldown_seconds=300)
    prom = prometheus_for([sim.url.removeprefix("http://")])
    prom.wait_for_scrapes(2)
    _per_replica(prom, svc, 60.0)
    settings = override_settings(GPUPOOL=_gpupool(PROMETHEUS_URL=prom.url))
    t0 = timezone.now()
    with settings:
        # 60 rps on one replica, 10 each wanted: 6 replicas; pa's quota has room for 2 more.
        assert autoscale_tick(t0) == 1
        status = _status(svc)
        assert (svc.target_workers, len(svc.placement)) == (3, 1)
        shown = (status["value"], status["target"], status["replicas"], status["desired"])
        assert shown == ("60", "10", 1, 3)
        assert status["reason"] == "60 per replica against the target 10 wants 6 replicas, the quota allows 3"
        assert svc.events.filter(kind="scale_target").last().reason == "target 1→3 by the autoscaler"
        assert autoscale_tick(t0) == 0  # the same pass again changes nothing (cool-down)
        assert schedule_once().grown == 1  # the grow pass brings it to its target
        svc.refresh_from_db()
        assert len(svc.placement) == 3
        assert svc.events.filter(kind="scaled").last().reason == "scaled 1→3 by the scheduler"
        assert dispatch.resize_job(svc.pk) == "resized"
        assert sim.backend().view(name)["workers"] == 3
        _per_replica(prom, svc, 20.0)  # the load spreads over three replicas now

        # Still too much (6 wanted), but quota is full: recorded, not made.
        t1 = t0 + timedelta(seconds=301)
        assert autoscale_tick(t1) == 0
        status = _status(svc)
        assert status["reason"] == (
            "20 per replica against the target 10 wants 6 replicas, but the quota allows no more: no change"
        )
        assert (svc.target_workers, status["desired"]) == (3, 3)

        # The filler ends and the load triples: up to the cap of 6 replicas.
        sim.backend().crash(backend_name(filler.pk))
        settle(cluster, filler, {"failed"})
        sim.backend().set_load(name, 150)
        _per_replica(prom, svc, 50.0)
        t2 = t1 + timedelta(seconds=1)
        assert autoscale_tick(t2) == 1
        status = _status(svc)
        assert (svc.target_workers, status["desired"]) == (6, 6)
        assert status["reason"] == "50 per replica is above the target 10: 3 → 6 replicas"
        assert schedule_once().grown == 1
        dispatch.resize_job(svc.pk)
        svc.refresh_from_db()
        assert len(svc.placement) == sim.backend().view(name)["workers"] == 6
        _per_replica(prom, svc, 25.0)
        assert autoscale_tick(t2 + timedelta(seconds=400)) == 0
        assert _status(svc)["reason"] == (
            "25 per replica is above the target 10, and the job is at its maximum of 6 replicas"
        )

        # The load drops: nothing within the cool-down, then down to what it needs.
        sim.backend().set_load(name, 12)
        _per_replica(prom, svc, 2.0)
        assert autoscale_tick(t2 + timedelta(seconds=299)) == 0
        status = _status(svc)
        assert len(svc.placement) == 6 and status["desired"] == 6
        assert status["reason"].startswith(
            "2 per replica against the target 10 wants 2 replicas: cool-down until"
        )
        t3 = t2 + timedelta(seconds=300)
        assert autoscale_tick(t3) == 1
        svc.refresh_from_db()
        assert (len(svc.placement), svc.target_workers, svc.autoscale_scaled_at) == (2, 2, t3)
        scaled = svc.events.filter(kind="scaled").last()
        assert (scaled.reason, scaled.data["workers"], scaled.actor) == (
            "scaled 6→2 by the autoscaler", 2, None
        )
        with translation.override("zh-hans"):
            assert reason_text(scaled.reason, scaled.reason_message) == "自动伸缩将规模从 6 调整为 2"
            assert "目标" in render_in("zh-hans", svc.autoscale_status["reason"])
        assert autoscale_tick(t3) == 0  # idempotent
        dispatch.resize_job(svc.pk)
        assert sim.backend().view(name)["workers"] == 2
        # The beat task runs the same pass on the real clock, which is before t3: cool-down.
        assert autoscale_task() == 0
        # An empty answer changes nothing and says so.
        Job.objects.filter(pk=svc.pk).update(autoscale_query='sum(no_such_metric{hpc_job="{job}"})')
        before = JobEvent.objects.filter(job=svc).count()
        assert autoscale_tick(t3 + timedelta(hours=1)) == 0
        assert _status(svc)["reason"] == "the query returned no value: no change"
        assert JobEvent.objects.filter(job=svc).count() == before


def test_prometheus_down_changes_nothing_and_says_so(sim_pool):
    f, cluster, pa, _pb, _sim = sim_pool
    svc = _inference(pa, f, workers=4)
    _running(cluster, svc)
    job_autoscale_set(actor=fx.platform_admin(), job=svc, query=QUERY, target="10")
    with override_settings(GPUPOOL=_gpupool(PROMETHEUS_URL="http://127.0.0.1:1")):
        assert autoscale_tick(timezone.now()) == 0
    status = _status(svc)
    assert status["reason"] == "Prometheus did not answer: no change"
    assert status["value"] is None and status["replicas"] == 4
    assert not svc.events.filter(kind__in=["scaled", "scale_target"]).exists()


def test_autoscale_settings_are_checked(sim_pool, settings):
    settings.LANGUAGE_CODE = "en"
    f, _cluster, pa, _pb, _sim = sim_pool
    admin = fx.platform_admin()
    svc = _inference(pa, f, workers=4)
    fixed = _inference(pa, f, workers=2, min_workers=2, name="fixed")
    training = fx.submit(pa, f, gpus=1, workers=2, min_workers=1, name="train")

    def refused(job, field, **kw):
        args = {"query": QUERY, "target": "10"} | kw
        with pytest.raises(ValidationError) as err:
            job_autoscale_set(actor=admin, job=job, **args)
        assert field in err.value.message_dict, err.value.message_dict

    refused(training, "autoscale_query")
    refused(fixed, "autoscale_query")
    refused(svc, "autoscale_query", query="up")  # names no job
    refused(svc, "autoscale_query", query="x{job}" * 200)  # too long
    refused(svc, "autoscale_query", query='rate(x{job="{job}"}[1m])\nor vector(1)')
    refused(svc, "autoscale_query", query="x{job=\"{job}\"} # 负载")
    for target in ("0", "-1", "abc", "1.0001", "nan", "inf", None, True):
        refused(svc, "autoscale_target", target=target)
    for cooldown in (0, 29, 86401, "300", 1.5):
        refused(svc, "autoscale_cooldown_seconds", cooldown_seconds=cooldown)
    assert Job.objects.get(pk=svc.pk).autoscale_query == ""  # nothing was stored
    teammate = User.objects.create(username="teammate")
    Membership.objects.create(user=teammate, role=Role.MEMBER, project=pa)
    with pytest.raises(PermissionDenied):  # neither its owner nor an admin of its project
        job_autoscale_set(actor=teammate, job=svc, query=QUERY, target="10")
    job = job_autoscale_set(actor=admin, job=svc, query=f"  {QUERY} ", target="2.5", cooldown_seconds=60)
    assert (job.autoscale_query, job.autoscale_target, job.autoscale_cooldown_seconds) == (
        QUERY, Decimal("2.5"), 60
    )
    assert filled_query(job) == f'avg(gpupool_sim_requests_per_second{{hpc_job="gp-{job.pk}"}})'
    off = job_autoscale_set(actor=admin, job=svc, query="")
    assert (off.autoscale_query, off.autoscale_target, off.autoscale_status) == ("", None, {})


# Issue 32 item 18: queries that named the job only where it selects nothing — in a comment, in
# an `or`/`unless` branch beside another metric, in a function's string argument, as a number any
# label may equal, in a regex that matches every value — and read other tenants' series.
BYPASSES = [
    "secret_metric # {job}",
    'secret_metric # hpc_job="{job}"',
    'avg(gpupool_sim_requests_per_second{hpc_job="{job}"}) or secret_metric',
    'secret_metric unless gpupool_sim_requests_per_second{hpc_job="{job}"}',
    'x{hpc_job="{job}"} + on() group_left sum(secret_metric)',
    'max_over_time(x{hpc_job="{job}"}[5m]) or max_over_time(secret_metric[30m:1m])',
    'label_replace(secret_metric, "a", "{job}", "", "")',
    'sum(http_requests_total{code="{job_id}"})',  # job 200 reads every tenant's 200s
    'x{hpc_job=~"{job}|.*"}',
    'x{hpc_job=~".*{job}"}',
    'x{hpc_job!="{job}"}',
    'x{pod=~"{job}.*"}',  # gp-4.* matches gp-42's pods
    'x{tenant="{job}"}',  # not a label that carries the job
    'x{hpc_job="{job}"',  # not PromQL
    "vector({job_id})",
]
SCOPED = [
    QUERY,
    'sum(rate(http_requests_total{pod=~"{job}-.*"}[2m])) / count(up{pod=~"{job}-.*"})',
    'avg(x{job_id="{job_id}"}) or vector(0)',
    'avg(x{hpc_job="{job}", route!="/healthz"}) # per replica',
    'sum by (replica) (rate(x{job="{job}"}[1m] offset 1m)) > bool 0',
]


@pytest.mark.parametrize("query", BYPASSES)
def test_item18_a_query_that_may_read_other_series_is_refused(english, query):
    with pytest.raises(ValidationError) as err:
        clean_settings(kind="inference", min_workers=1, workers=4, query=query, target="10",
                       cooldown_seconds=None)
    (message,) = err.value.message_dict["autoscale_query"]
    assert message.startswith(("Every series the query reads must be the job's own",
                               "Not a PromQL query the portal can read", "Name the job with {job}")), message


@pytest.mark.parametrize("query", SCOPED)
def test_item18_queries_scoped_to_the_job_are_accepted(query):
    assert clean_settings(kind="inference", min_workers=1, workers=4, query=query, target="10",
                          cooldown_seconds=None)[0] == query


def test_item18_a_stored_query_that_reads_other_series_is_never_sent(sim_pool, settings):
    """A query stored before the check (or around it) is checked again as sent, with the job's
    own name: the pass records why and asks Prometheus nothing (here: one that is down, which
    would otherwise be the reason)."""
    f, _cluster, pa, _pb, _sim = sim_pool
    svc = _inference(pa, f, workers=4)
    settings.GPUPOOL = _gpupool(PROMETHEUS_URL="http://127.0.0.1:1")
    for stored in ("secret_metric # {job}", 'x{hpc_job="gp-999999"}'):
        Job.objects.filter(pk=svc.pk).update(autoscale_query=stored, autoscale_target=Decimal(10))
        svc.refresh_from_db()
        value, why_not = query_value(svc)
        assert value is None
        assert render_in("en", why_not) == "the query reads series that are not the job's own: not asked"
    Job.objects.filter(pk=svc.pk).update(autoscale_query=QUERY)
    svc.refresh_from_db()
    assert render_in("en", query_value(svc)[1]) == "Prometheus did not answer: no change"
