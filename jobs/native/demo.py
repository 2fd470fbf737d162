"""Demo external work (DESIGN §11): a Slurm account of the demo's Slurm cluster that maps to no
project yet, with a few jobs users ran there directly (``sbatch``), kept as observations — so the
External sources page has something to map, and mapping it records them and back-fills their
metering. Created only when the account is missing: once mapped (or deleted) it is the admins'."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

ACCOUNT = "asr-lab"  # a lab's own Slurm account, never set up in the portal
CLUSTER = "slurm-sh"  # quotas/demo.py: the Slurm cluster with the Ascend 910B nodes
GRES = "npu:910b"  # the Ascend-910B flavor's Slurm GRES (quotas/demo.py FLAVORS)
# backend id, name, user, devices, phase, submitted hours ago, hours it ran
JOBS = [
    ("48211", "asr-pretrain", "alice", 8, "succeeded", 50, 6.0),
    ("48230", "asr-eval", "alice", 2, "failed", 30, 0.7),
    ("48257", "kws-train", "lab-intern", 4, "cancelled", 20, 2.0),
    ("48263", "kws-sweep", "lab-intern", 1, "succeeded", 8, 3.5),
]


def seed(stdout) -> None:
    from jobs.native.external import record_external
    from jobs.native.models import ExternalSource, ExternalSourceKind
    from quotas.models import Cluster

    cluster = Cluster.objects.filter(name=CLUSTER).first()
    if cluster is None or ExternalSource.objects.filter(cluster=cluster, name=ACCOUNT).exists():
        return
    now = timezone.now()
    outcome = record_external(
        cluster, ExternalSourceKind.SLURM_ACCOUNT, records(now), time_source="slurm", now=now
    )
    stdout.write(f"native: unmapped Slurm account {ACCOUNT} with {outcome.counts['observed']} jobs seen")


def records(now: datetime) -> list:
    from jobs.native.backends.external import ExternalRecord

    out = []
    for backend_id, name, user, devices, phase, ago, hours in JOBS:
        submitted = now - timedelta(hours=ago)
        started = submitted + timedelta(minutes=5)
        out.append(ExternalRecord(
            backend_id=backend_id, name=name, source=ACCOUNT, user=user, resource=GRES, devices=devices,
            phase=phase, submitted_at=submitted, started_at=started,
            finished_at=started + timedelta(hours=hours), exit_code=1 if phase == "failed" else 0,
        ))
    return out
