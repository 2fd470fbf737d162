"""JobOut copies plain columns itself (speed, see its to_representation); its output must stay
exactly what DRF's generic ModelSerializer walk gives, for jobs in every shape."""

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework import serializers

from jobs.api import JobOut
from jobs.approvals import with_approval_request
from jobs.models import Job
from jobs.scheduling import schedule_once
from tests import factories as fx

pytestmark = pytest.mark.django_db


def test_job_out_equals_the_generic_serializer_for_jobs_in_every_shape():
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
    jobs = list(with_approval_request(Job.objects.all()).order_by("id"))
    assert {j.state for j in jobs} == {"admitted", "queued"} and any(j.placement for j in jobs)
    serializer = JobOut(jobs, many=True).child
    for job in jobs:
        generic = serializers.ModelSerializer.to_representation(serializer, job)
        fast = serializer.to_representation(job)
        assert fast == generic and list(fast) == list(generic)
        assert type(fast["submitted_at"]) is str and fast["finished_at"] is None
