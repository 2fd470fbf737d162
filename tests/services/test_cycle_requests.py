"""Whole-machine requests through ``schedule_once`` on PostgreSQL (DESIGN §15): the snapshot hands
the engine each node's CPU, memory and disk and each job's request; memory decides where GPUs
alone would not, and explain says so in the reader's language."""

import pytest
from django.urls import reverse
from django.utils import translation
from rest_framework.test import APIClient

from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from tests import factories as fx

pytestmark = pytest.mark.django_db

HALF_TIB = 524_288


@pytest.fixture
def one_big_node():
    """One node: 8 GPUs, 96 cores, 1 TiB; department D and project p with every GPU in quota."""
    f, proj = fx.single_project_pool(1, 8)
    node = f.nodes.get()
    node.cpu_millicores, node.memory_mib, node.local_disk_gib = 96_000, 1_048_576, 3_500
    node.save()
    return f, proj


def _explain(job, language="en"):
    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    response = client.get(reverse("api:job-explain", args=[job.pk]), HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    return response.json()


def _state(job):
    job.refresh_from_db()
    return job.state


def test_two_jobs_asking_half_the_memory_share_the_node_and_a_third_waits_for_memory(one_big_node):
    f, proj = one_big_node
    jobs = [fx.submit(proj, f, gpus=1, name=f"half{i}", memory_mib=HALF_TIB) for i in range(3)]
    schedule_once()
    assert [_state(j) for j in jobs] == [JobState.ADMITTED, JobState.ADMITTED, JobState.QUEUED]
    explain = _explain(jobs[2])
    assert explain["reason"] == "resources" and explain["resource"] == "memory"
    assert "waits for memory" in explain["text"] and "6 node" not in explain["text"]
    with translation.override("zh-hans"):
        zh = _explain(jobs[2], "zh-hans")["text"]
    assert "内存" in zh and "等待" in zh


def test_a_job_asking_nothing_takes_its_share_and_the_rest_stay_usable(one_big_node):
    f, proj = one_big_node
    big = fx.submit(proj, f, gpus=1, name="big", cpu_millicores=48_000)
    small = [fx.submit(proj, f, gpus=1, name=f"d{i}") for i in range(5)]
    schedule_once()
    # 48 cores for one GPU leave 48: four more GPUs at 12 cores each, the fifth waits for CPU
    # although three GPUs are free.
    assert _state(big) == JobState.ADMITTED
    assert [_state(j) for j in small] == [JobState.ADMITTED] * 4 + [JobState.QUEUED]
    assert _explain(small[4])["resource"] == "CPU"


def test_a_job_requiring_a_newer_cuda_waits_and_says_which(one_big_node):
    f, proj = one_big_node
    f.nodes.update(cuda_version="12.2")
    job = fx.submit(proj, f, gpus=1, name="new-cuda", min_cuda_version="12.4")
    other = fx.submit(proj, f, gpus=1, name="any-cuda")
    schedule_once()
    assert (_state(job), _state(other)) == (JobState.QUEUED, JobState.ADMITTED)
    explain = _explain(job)
    assert explain["reason"] == "cuda" and explain["resource"] == "12.4"
    assert "CUDA 12.4" in explain["text"]
    f.nodes.update(cuda_version="12.4")
    schedule_once()
    assert _state(job) == JobState.ADMITTED
