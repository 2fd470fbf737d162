"""JobOut copies plain columns itself (speed, see its to_representation); its output must stay
exactly what DRF's generic ModelSerializer walk gives, for jobs in every shape."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from jobs.api import JobOut
from jobs.approvals import with_approval_request
from jobs.models import ApprovalPolicy, Job
from jobs.scheduling.cycle import schedule_once
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def jobs_in_every_shape():
    """Admitted with a placement and a start, queued with a command and no runtime limit, a shared
    device, and one held for approval (its request id set)."""
    f = fx.flavor()
    shared = fx.flavor("T4", shareable=True)
    fx.nodes(f, 1)
    fx.nodes(shared, 1, gpus=4)
    d = fx.department("D")
    p = fx.project("p", d)
    for flavor in (f, shared):
        fx.quota(flavor, d, 8)
        fx.quota(flavor, p, 8)
    fx.submit(p, f, gpus=8, name="runs", checkpointing=True, sim_duration_seconds=60)
    fx.submit(p, f, gpus=8, name="waits", command="python train.py --lr 3e-4")
    fx.submit(p, shared, gpus=1, gpu_milli=500, name="shared")
    schedule_once()
    Job.objects.filter(name="runs").update(started_at=timezone.now() - timedelta(hours=1))
    Job.objects.filter(name="waits").update(min_workers=1, max_runtime_seconds=None)
    ApprovalPolicy.objects.create(department=d, max_gpus=2)
    fx.submit(p, f, gpus=4, name="held")
    jobs = with_approval_request(Job.objects.all()).order_by("id")
    assert [j.state for j in jobs] == ["admitted", "queued", "admitted", "pending_approval"]
    return jobs


def test_job_out_equals_the_generic_serializer_for_jobs_in_every_shape(jobs_in_every_shape):
    jobs = list(jobs_in_every_shape)
    assert any(j.placement for j in jobs) and jobs[-1].approval_request_pk is not None
    serializer = JobOut(jobs, many=True).child
    for job in jobs:
        generic = serializers.ModelSerializer.to_representation(serializer, job)
        fast = serializer.to_representation(job)
        assert fast == generic and list(fast) == list(generic)
        assert type(fast["submitted_at"]) is str and fast["finished_at"] is None


def test_job_rows_equal_the_generic_serializer_for_jobs_in_every_shape(jobs_in_every_shape):
    """The job lists serialise ``values()`` rows, not instances: same output, same key order."""
    out = JobOut(context={})
    rows = out.represent_rows(out.columns(jobs_in_every_shape)[:])
    generic = [serializers.ModelSerializer.to_representation(out, job) for job in jobs_in_every_shape]
    assert len(rows) == 4 and any(r["placement"] for r in rows) and any(r["started_at"] for r in rows)
    assert rows[-1]["approval_request"] is not None
    for row, expected in zip(rows, generic, strict=True):
        assert row == expected and list(row) == list(expected)
