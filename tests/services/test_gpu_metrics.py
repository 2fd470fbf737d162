"""GPU utilisation flows from the simulator's DCGM exporter through a real Prometheus into the
portal (the mean and the busiest card); the idle policy warns an idle job; a Prometheus outage
leaves gaps, not zeros."""

from datetime import timedelta

import pytest
import requests
from django.test import override_settings
from django.utils import timezone

from jobs.clusters import dispatch
from jobs.clusters.metrics import poll_gpu_metrics, portal_metrics
from jobs.idle_service import run_idle_policy
from jobs.models import IdlePolicy, JobGpuSample
from jobs.scheduling.cycle import schedule_once
from tests import factories as fx
from tests.waiting import settle

pytestmark = pytest.mark.django_db


def _running(cluster, *jobs):
    schedule_once()
    for job in jobs:
        dispatch.dispatch_job(job.pk)
    for job in jobs:  # each lasts 10⁶ simulated seconds: "running" is where it stays
        settle(cluster, job, {"running"})


@pytest.mark.prometheus
def test_utilisation_of_running_jobs_reaches_the_portal(sim_pool, prometheus_for):
    f, cluster, pa, pb, sim = sim_pool
    busy = fx.submit(pa, f, gpus=4, sim_duration_seconds=10**6, name="busy", command="python train.py")
    idle = fx.submit(pb, f, gpus=2, sim_duration_seconds=10**6, name="idle", command="sleep infinity # idle")
    _running(cluster, busy, idle)
    prom = prometheus_for([sim.url.removeprefix("http://")])
    prom.wait_for_scrapes(3)
    with override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": prom.url}):
        now = timezone.now()
        assert poll_gpu_metrics(now) == 2
        assert poll_gpu_metrics(now) == 2  # the same minute again overwrites, never duplicates
        for minute in (1, 2, 3, 4):  # four more minutes of samples make a full idle window of 5
            poll_gpu_metrics(now - timedelta(minutes=minute))
        samples = {
            s.job_id: s for s in JobGpuSample.objects.filter(minute=now.replace(second=0, microsecond=0))
        }
        assert samples[busy.pk].gpus == 4 and samples[busy.pk].gpu_util_pct > 20
        assert samples[idle.pk].gpus == 2 and samples[idle.pk].gpu_util_pct < 5
        assert samples[idle.pk].gpu_util_max_pct < 5  # every card of it, not only their mean
        assert samples[busy.pk].gpu_util_max_pct >= samples[busy.pk].gpu_util_pct > 20
        assert JobGpuSample.objects.filter(job=busy).count() == 5
        type(busy).objects.filter(pk__in=[busy.pk, idle.pk]).update(started_at=now - timedelta(hours=1))
        # update_or_create: a transactional test before this one flushed the migration's row
        IdlePolicy.objects.update_or_create(priority_class=None, defaults={"idle_minutes": 5})
        assert run_idle_policy(now)["warn"] == 1
        assert run_idle_policy(now)["warn"] == 0  # warned once
    text = portal_metrics()
    assert "gpupool_idle_jobs 1" in text
    # 16 ready devices, 4 + 2 held, the 2 of the idle job idle while allocated.
    for line in (
        'gpupool_gpus_capacity{flavor="A100"} 16.0',
        'gpupool_gpus_unallocated{flavor="A100"} 10.0',
        'gpupool_gpus_idle_allocated{flavor="A100"} 2.0',
    ):
        assert line in text, line
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    shown = client.get(f"/api/v1/jobs/{busy.pk}/utilisation/").json()
    assert len(shown["samples"]) == 5 and shown["samples"][-1]["gpu_util_pct"] > 20
    assert shown["idle_since"] is None
    assert client.get(f"/api/v1/jobs/{idle.pk}/utilisation/").json()["idle_since"] is not None


def test_a_prometheus_outage_leaves_a_gap_not_zeros(sim_pool):
    f, cluster, pa, _, _ = sim_pool
    job = fx.submit(pa, f, gpus=1, sim_duration_seconds=10**6)
    _running(cluster, job)
    down = override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": "http://127.0.0.1:1"})
    with down, pytest.raises(requests.exceptions.ConnectionError):
        poll_gpu_metrics()
    assert not JobGpuSample.objects.filter(job=job).exists()


def _gpupool():
    from django.conf import settings

    return dict(settings.GPUPOOL)


def test_portal_metrics_endpoint_and_its_token(client, sim_pool):
    f, _, pa, _, _ = sim_pool
    fx.submit(pa, f, gpus=2)
    schedule_once()
    response = client.get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    for expected in (
        'gpupool_jobs{state="admitted"} 1',
        'gpupool_gpus_in_use{department="A",flavor="A100"} 2.0',
        'gpupool_quota{department="A",flavor="A100"} 8.0',
        "gpupool_cycle_seconds",
        "gpupool_admissions_total 1",
    ):
        assert expected in text, expected
    with override_settings(GPUPOOL={**_gpupool(), "METRICS_TOKEN": "s3cret"}):
        assert client.get("/metrics").status_code == 403
        assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
