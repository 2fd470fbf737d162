"""Prometheus stopped while jobs run, then started again. Utilisation polling fails while it is
down and the minutes it missed stay a gap (no rows, never zeros: the outage with an unreachable
URL is tests/services/test_gpu_metrics.py); metering, which is allocation-based, goes on — a job
that ran entirely inside the outage has no utilisation at all and is billed to the microsecond.
After the restart polling resumes on its own."""

import subprocess
import time
from datetime import timedelta

import pytest
import requests
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from billing import tasks as billing_tasks
from jobs.clusters import dispatch
from jobs.clusters.metrics import poll_gpu_metrics
from jobs.models import Job, JobGpuSample
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_cancel
from portal.models import Project
from tests import factories as fx
from tests.faults.checks import assert_agrees_with_simulator, assert_ledger_exact
from tests.faults.procs import wait_until
from tests.faults.seed import seed_pool

pytestmark = [pytest.mark.faults, pytest.mark.prometheus, pytest.mark.django_db(transaction=True)]


def _settle(cluster_id, job, state):
    def reached():
        dispatch.sync_cluster(cluster_id)
        return Job.objects.get(pk=job.pk).state == state

    wait_until(reached, f"{job} to be {state}", interval=0.05)


def _run(cluster_id, job, until="running"):
    schedule_once()
    dispatch.dispatch_job(job.pk)
    _settle(cluster_id, job, until)


def _restart(prom) -> None:
    """The same Prometheus again: same address, same data directory."""
    prom.proc = subprocess.Popen(prom.proc.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_a_prometheus_outage_leaves_a_utilisation_gap_while_metering_goes_on(simserver, prometheus_for):
    from django.conf import settings

    seed = seed_pool(simserver.url)
    cluster, project, flavor = seed["cluster"], Project.objects.get(pk=seed["project"]), fx.flavor()
    steady = fx.submit(project, flavor, gpus=4, name="steady", sim_duration_seconds=10**6)
    _run(cluster, steady)
    prom = prometheus_for([simserver.url.removeprefix("http://")])
    prom.wait_for_scrapes(2)
    now = timezone.now().replace(second=0, microsecond=0)
    minutes = [now + timedelta(minutes=i) for i in range(3)]  # before, during, after the outage
    with override_settings(GPUPOOL={**settings.GPUPOOL, "PROMETHEUS_URL": prom.url}):
        assert poll_gpu_metrics(minutes[0]) == 1
        prom.stop()
        stopped = time.monotonic()
        inside = fx.submit(project, flavor, gpus=2, name="inside", sim_duration_seconds=100)
        _run(cluster, inside, until="succeeded")  # starts and ends while Prometheus is down
        with pytest.raises(requests.exceptions.ConnectionError):  # refused: the poll fails, writes nothing
            poll_gpu_metrics(minutes[1])
        assert billing_tasks.meter.apply().successful()  # the meter's beat task does not need it
        _restart(prom)
        restarted, restarted_at = time.monotonic(), time.time()
        # Fresh data, not the samples from before the outage its storage still holds.
        wait_until(lambda: float(prom.query('timestamp(up{job="dcgm"})')[0]["value"][1]) > restarted_at,
                   "a scrape after the restart")
        assert poll_gpu_metrics(minutes[2]) == 1
        resumed = time.monotonic() - restarted
    job_cancel(actor=fx.platform_admin(), job=Job.objects.get(pk=steady.pk))
    dispatch.stop_job(steady.pk)
    _settle(cluster, steady, "cancelled")
    samples = JobGpuSample.objects.filter(job=steady).order_by("minute")
    assert [s.minute for s in samples] == [minutes[0], minutes[2]]  # a gap, not a zero
    assert all(s.gpu_util_pct > 20 and s.gpus == 4 for s in samples)
    assert not JobGpuSample.objects.filter(job=inside).exists()
    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    shown = client.get(f"/api/v1/jobs/{steady.pk}/utilisation/").json()["samples"]
    assert len(shown) == 2 and min(s["gpu_util_pct"] for s in shown) > 20
    ids = [steady.pk, inside.pk]
    assert_agrees_with_simulator(simserver.backend(), ids)
    rows = assert_ledger_exact(ids)  # both billed exactly, the outage included
    print(f"prometheus down {restarted - stopped:.1f} s: polls failed, {rows} ledger rows exact; "
          f"polling resumed {resumed:.1f} s after the restart")
