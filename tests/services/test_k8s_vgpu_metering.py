"""A vGPU share on Kubernetes, end to end (issue 23, "metering of one vGPU job equals its
fraction"): submitted, scheduled and dispatched through the portal's services to the stand-in API
server over the official client, it asks HAMi for a quarter card's memory and cores; its
container times come back through the status sync; the meter bills 0.25 card-seconds per second
of them."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.clusters import dispatch
from jobs.clusters.backends.k8s_sharing import HAMI_CORES, HAMI_MEMORY
from jobs.models import backend_name
from jobs.scheduling.cycle import schedule_once
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.backends import k8s_standin

pytestmark = [pytest.mark.django_db, pytest.mark.kubernetes]

k8s_api = k8s_standin.k8s_api


def test_one_vgpu_job_is_metered_at_its_fraction(k8s_api):
    f = fx.flavor("A100-vgpu", shareable=True)
    f.sharing_mode = "vgpu"
    f.save()
    cluster = Cluster.objects.create(
        name="k8s-vgpu", kind="kubernetes",
        config={"host": k8s_api.url, "namespace": "gpupool-jobs", "token": "t"},
    )
    Node.objects.create(cluster=cluster, name="gpu-a", flavor=f, gpu_count=1, zone="z", spine="s", leaf="l")
    dept = fx.department("V")
    project = fx.project("v1", dept)
    fx.quota(f, dept, 1)
    fx.quota(f, project, 1)
    job = fx.submit(project, f, gpus=1, gpu_milli=250)
    # The cycle admits it two minutes ago, so a 40-second run can have ended by now (a backend
    # time in the future would be refused).
    assert schedule_once(timezone.now() - timedelta(minutes=2)).admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    job.refresh_from_db()
    name = backend_name(job.pk)
    [container] = k8s_api.get("jobs", name)["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1", HAMI_MEMORY: "20480", HAMI_CORES: "25"}
    # The API server stamps whole seconds: the first whole second after the admission; 40 s run.
    start = job.admitted_at.replace(microsecond=0) + timedelta(seconds=1)
    end = start + timedelta(seconds=40)
    k8s_api.set_status("jobs", name, {"active": 1, "startTime": start.strftime("%Y-%m-%dT%H:%M:%SZ")})
    k8s_api.pod_running(f"{name}-0-abcde", name, "gpu-a", start)
    dispatch.sync_cluster(cluster.pk)
    k8s_api.pod_terminated(f"{name}-0-abcde", name, "gpu-a", start, end)
    k8s_api.job_succeeded(name)
    dispatch.sync_cluster(cluster.pk)
    job.refresh_from_db()
    assert (job.state, job.started_at, job.finished_at) == ("succeeded", start, end)
    usage_meter(now=timezone.now() + timedelta(days=1))  # past every watermark
    billed = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    assert billed == Decimal("0.25") * 40  # a quarter card for 40 seconds
