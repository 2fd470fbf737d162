"""What dispatch tells the backend a worker asks of its node besides GPUs (DESIGN §15): the
effective request of ``jobs.requests`` — the job's own figures, the rest its units' share — so the
backend reserves what the engine placed."""

from __future__ import annotations

from jobs.clusters.dispatch import job_spec
from jobs.models import Job
from quotas.models import Node
from tests import factories as fx


def _setup(sized: bool = True):
    flavor = fx.flavor("A100-req")
    nodes = fx.nodes(flavor, 2, 8)
    if sized:  # 96 cores, 992 GiB, 3840 GiB of local disk per 8-GPU node
        Node.objects.filter(pk__in=[n.pk for n in nodes]).update(
            cpu_millicores=96_000, memory_mib=1_015_808, local_disk_gib=3_840)
    dept = fx.department("DR")
    project = fx.project("dr1", dept)
    fx.quota(flavor, dept, 16)
    fx.quota(flavor, project, 16)
    return flavor, project


def test_a_job_that_asks_nothing_carries_its_gpus_share(db):
    flavor, project = _setup()
    job = fx.submit(project, flavor, workers=2, gpus=2, name="plain")
    spec = job_spec(job, {})
    assert (spec.cpu_millicores, spec.memory_mib, spec.local_disk_gib) == (24_000, 253_952, 960)


def test_a_shared_worker_carries_its_thousandths_share(db):
    flavor, project = _setup()
    job = fx.submit(project, flavor, workers=1, gpus=1, name="quarter")
    Job.objects.filter(pk=job.pk).update(gpu_milli=250)
    spec = job_spec(Job.objects.get(pk=job.pk), {})
    assert (spec.cpu_millicores, spec.memory_mib, spec.local_disk_gib) == (3_000, 31_744, 120)


def test_a_jobs_own_figures_win_and_the_rest_is_its_share(db):
    flavor, project = _setup()
    job = fx.submit(project, flavor, workers=1, gpus=1, name="asked")
    Job.objects.filter(pk=job.pk).update(cpu_millicores=40_000, memory_mib=None, local_disk_gib=10)
    spec = job_spec(Job.objects.get(pk=job.pk), {})
    assert (spec.cpu_millicores, spec.memory_mib, spec.local_disk_gib) == (40_000, 126_976, 10)


def test_the_share_it_was_submitted_with_stays(db):
    flavor, project = _setup()
    job = fx.submit(project, flavor, workers=1, gpus=1, name="kept")
    Job.objects.filter(pk=job.pk).update(unit_share={"cpu_millicores": 8_000, "memory_mib": 65_536})
    spec = job_spec(Job.objects.get(pk=job.pk), {})
    # What the job was submitted with, not the nodes' share now; disk: not in its share, none asked.
    assert (spec.cpu_millicores, spec.memory_mib, spec.local_disk_gib) == (8_000, 65_536, None)


def test_nodes_that_report_no_machine_ask_nothing(db):
    flavor, project = _setup(sized=False)
    job = fx.submit(project, flavor, workers=1, gpus=4, name="unknown")
    spec = job_spec(job, {})
    assert (spec.cpu_millicores, spec.memory_mib, spec.local_disk_gib) == (None, None, None)
