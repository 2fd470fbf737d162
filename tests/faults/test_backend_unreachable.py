"""A dispatch whose backend is unreachable gives its claim back, so the job is submitted as soon
as the backend answers again — not only once the claim expires (CLAIM_TIMEOUT). The full outage,
with a real Slurm controller down for a minute: test_slurm_controller_down.py."""

import pytest

from jobs.clusters import dispatch
from jobs.clusters.backends.base import BackendError
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from portal.models import Project
from quotas.models import Cluster
from tests import factories as fx
from tests.faults.procs import free_port
from tests.faults.seed import seed_pool

pytestmark = [pytest.mark.faults, pytest.mark.django_db(transaction=True)]


def test_a_failed_submit_gives_the_dispatch_claim_back(simserver):
    seed = seed_pool(simserver.url)
    job = fx.submit(Project.objects.get(pk=seed["project"]), fx.flavor(), gpus=8, sim_duration_seconds=10**6)
    assert schedule_once().admitted == 1
    cluster = Cluster.objects.get(pk=seed["cluster"])
    cluster.config = {"url": f"http://127.0.0.1:{free_port()}"}  # nobody listens there
    cluster.save()
    with pytest.raises(BackendError):
        dispatch.dispatch_job(job.pk)
    assert Job.objects.get(pk=job.pk).dispatch_claimed_at is None
    cluster.config = {"url": simserver.url}  # the backend is back
    cluster.save()
    assert dispatch.dispatch_job(job.pk) == "dispatched"  # at once, not after the claim timeout
    assert simserver.backend().status([f"gp-{job.pk}"])[f"gp-{job.pk}"].phase == "running"
