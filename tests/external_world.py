"""External jobs (DESIGN §11) in the persona world of tests/conftest.py, for the page, API and
browser tests: a Slurm cluster "hpc" whose account ``acct-pa1`` maps to project pa1, with one
pending, one running and one finished external job, and an unmapped account ``acct-stray`` seen
running two jobs (one finished: 2 GPUs × 2 h = 4 card-hours, one pending)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from jobs.models import Job
from jobs.native.backends.external import ExternalRecord
from jobs.native.external import record_external
from jobs.native.models import ExternalSource
from quotas.models import Cluster, Node


@dataclass
class External:
    cluster: Cluster
    pending: Job
    running: Job
    finished: Job
    mapped: ExternalSource
    stray: ExternalSource


def record(backend_id, phase, *, source="acct-pa1", user="alice", gpus=2, start=None, end=None, **kw):
    submitted = kw.pop("submitted", (start or timezone.now()) - timedelta(minutes=5))
    return ExternalRecord(
        backend_id=backend_id, name=f"ext {backend_id}", source=source, user=user, resource="gpu:f",
        devices=gpus, phase=phase, submitted_at=submitted, started_at=start, finished_at=end, **kw,
    )


def external_world(world) -> External:
    """Needs a priority class (external jobs are ranked by the lowest one)."""
    world.F.slurm_gres = "gpu:f"
    world.F.save(update_fields=["slurm_gres"])
    hpc = Cluster.objects.create(name="hpc", kind="slurm")
    Node.objects.create(cluster=hpc, name="h0", flavor=world.F, gpu_count=8, zone="z", spine="s", leaf="lh")
    mapped = ExternalSource.objects.create(
        cluster=hpc, kind="slurm_account", name="acct-pa1", project=world.pa1
    )
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(hours=3)
    records = [
        record("1234", "pending", reason="AssocGrpGRES"),
        record("1235", "running", start=now - timedelta(hours=1), slots=(("h0", 0), ("h0", 1)),
               user="pa1_member"),
        record("1236", "succeeded", start=start, end=start + timedelta(hours=1), gpus=4),
        record("2001", "succeeded", source="acct-stray", start=start, end=start + timedelta(hours=2)),
        record("2002", "pending", source="acct-stray", reason="Priority"),
    ]
    out = record_external(hpc, "slurm_account", records, time_source="slurm")
    assert out.counts["created"] == 3 and out.counts["observed"] == 2, out.as_dict()
    jobs = {j.backend_id: j for j in Job.objects.filter(cluster=hpc)}
    stray = ExternalSource.objects.get(cluster=hpc, name="acct-stray")
    return External(hpc, jobs["1234"], jobs["1235"], jobs["1236"], mapped, stray)
