"""Import the jobs users submit to a Slurm cluster directly (``sbatch`` on a login node; DESIGN §11).

One import (:func:`import_slurm`, from beat every ``NATIVE_IMPORT_INTERVAL_SECONDS``) reads:

* ``squeue``: every live job — pending ones with Slurm's reason, running ones with their start —
  and ``scontrol -d -o show job`` for the GPU indices each running job holds on each node, so
  the engine places around them in its next cycle;
* ``sacct -X`` over the window since the cluster's cursor (``ExternalCursor`` kind "sacct"),
  reaching back ``OVERLAP`` before it: a job that ended at the boundary, or reached accounting
  late, is read twice rather than never (recording is idempotent, so the overlap costs nothing);
* ``sacct -j`` for the external jobs still open in the portal that ``squeue`` no longer lists
  and the window did not bring (ended while the importer was down, or long ago).

Jobs the portal submitted itself are left out (:func:`_not_the_portals`). The rest become
``ExternalRecord``s handed to :func:`jobs.native.external.record_external` (source: the Slurm account).
"""

from __future__ import annotations

import logging
import os
import pwd
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from jobs.clusters.backends.base import PENDING, RUNNING
from jobs.clusters.backends.registry import backend_for, is_simulated
from jobs.clusters.backends.slurm import SlurmBackend
from jobs.models import Job, JobKind
from jobs.native.backends.external import ENDED, ExternalRecord
from jobs.native.backends.slurm_native import (
    SCONTROL_ARGS,
    SQUEUE_ARGS,
    NativeJob,
    parse_sacct,
    parse_scontrol_gpus,
    parse_squeue,
    portal_job_id,
    sacct_args,
    to_record,
)
from jobs.native.external import Outcome, open_backend_ids, record_external
from jobs.native.models import ExternalCursor
from quotas.models import Cluster

log = logging.getLogger(__name__)

SOURCE_KIND = "slurm_account"
CURSOR = "sacct"
OVERLAP = timedelta(minutes=10)
FIRST_WINDOW = timedelta(days=1)  # a cluster's first import; older history: import_native --since
IDS_PER_CALL = 200  # sacct -j takes a comma list: keep command lines short
LOOKUP_CHUNK = 5000  # ids per query (PostgreSQL binds at most 65,535 parameters)


def importable_clusters() -> list[Cluster]:
    return [c for c in Cluster.objects.filter(active=True, kind="slurm").order_by("name")
            if not is_simulated(c.kind, c.config or {})]


def import_slurm(cluster: Cluster, now: datetime | None = None, *, since: datetime | None = None) -> dict:
    """Read the cluster's live and recently finished jobs and record the external ones."""
    if cluster.kind != "slurm" or is_simulated(cluster.kind, cluster.config or {}):
        raise ValueError(f"{cluster} is not a real Slurm cluster")
    now = now or timezone.now()
    backend = _backend(cluster)
    # squeue also shows jobs that ended in the last MinJobAge seconds, without all their times
    # (a cancelled pending job gets a StartTime): accounting is asked about those.
    live = [j for j in parse_squeue(backend._run(SQUEUE_ARGS)) if j.phase in (PENDING, RUNNING)]
    held = parse_scontrol_gpus(backend._run(SCONTROL_ARGS)) if any(j.started for j in live) else {}
    start = since or _window_start(cluster, now)
    finished = parse_sacct(backend._run(sacct_args(since=start, until=now)))
    seen = {j.job_id for j in live} | {j.job_id for j in finished}
    lost = [i for i in open_backend_ids(cluster) if i not in seen]
    for chunk in _chunks(lost, IDS_PER_CALL):
        finished += parse_sacct(backend._run(sacct_args(job_ids=chunk)))
    out = import_jobs(cluster, live, finished, held, now=now)
    _advance_cursor(cluster, now)
    return {**out.as_dict(), "window_start": start.isoformat(), "looked_up": len(lost)}


def import_jobs(
    cluster: Cluster, live: list[NativeJob], finished: list[NativeJob],
    held: dict[str, tuple[tuple[str, int], ...]] | None = None, *, now: datetime | None = None,
) -> Outcome:
    """Record parsed jobs. ``live`` (squeue) is the authority for jobs that have not ended;
    ``finished`` (sacct) only counts for jobs that have: accounting may still call a job running
    that the controller has ended, and it knows nothing of the GPUs a live job holds."""
    jobs = {j.job_id: j for j in finished if j.phase in ENDED}
    for job in live:
        # An ended record in accounting beats the controller's last look.
        if job.phase in (PENDING, RUNNING) and job.job_id not in jobs:
            jobs[job.job_id] = job
    kept = _not_the_portals(cluster, list(jobs.values()))
    records: list[ExternalRecord] = []
    for job in kept:
        record = to_record(job, (held or {}).get(job.job_id, ()))
        if record is not None:
            records.append(record)
    out = record_external(cluster, SOURCE_KIND, records, time_source="slurm", now=now)
    out.counts["portal_jobs"] += len(jobs) - len(kept)
    out.counts["not_gpu"] += len(kept) - len(records)
    return out


def _not_the_portals(cluster: Cluster, jobs: list[NativeJob]) -> list[NativeJob]:
    """Leave out the jobs the portal submitted: those whose Slurm id is a portal job's backend id
    on this cluster, and those named ``gp-<id>`` for a portal job *and* submitted by the portal's
    own Unix user (``config["submit_user"]``, default the user this process runs as: the worker
    that runs sbatch). The name alone decides nothing — anyone may call a job gp-5 — and the user
    check covers a portal job whose id the portal has not saved yet (sbatch returned, the row is
    being written) or no longer holds (requeued: a new Slurm job, the old id forgotten)."""
    if not jobs:
        return []
    own: set[str] = set()
    ids = [j.job_id for j in jobs]
    portal = Job.objects.filter(cluster=cluster).exclude(kind=JobKind.EXTERNAL)
    for chunk in _chunks(ids, LOOKUP_CHUNK):
        own.update(portal.filter(backend_id__in=chunk).values_list("backend_id", flat=True))
    submit_user = (cluster.config or {}).get("submit_user") or pwd.getpwuid(os.geteuid()).pw_name
    claimed = {portal_job_id(j.name) for j in jobs if j.user == submit_user} - {None}
    named: set[int] = set()
    for chunk in _chunks(sorted(claimed), LOOKUP_CHUNK):
        named.update(Job.objects.filter(pk__in=chunk).exclude(kind=JobKind.EXTERNAL)
                     .values_list("pk", flat=True))
    return [
        j for j in jobs
        if j.job_id not in own and not (j.user == submit_user and portal_job_id(j.name) in named)
    ]


def _backend(cluster: Cluster) -> SlurmBackend:
    backend = backend_for(cluster.kind, cluster.config or {})
    assert isinstance(backend, SlurmBackend)
    return backend


def _window_start(cluster: Cluster, now: datetime) -> datetime:
    cursor = ExternalCursor.objects.filter(cluster=cluster, kind=CURSOR)
    value = cursor.values_list("value", flat=True).first()
    if not value:
        return now - FIRST_WINDOW
    return datetime.fromisoformat(value) - OVERLAP


@transaction.atomic
def _advance_cursor(cluster: Cluster, now: datetime) -> None:
    """The window read ends at ``now``; the cursor never moves back (a back-fill with --since, or
    an import that started earlier and finished later, leaves a later cursor alone)."""
    cursor, created = ExternalCursor.objects.select_for_update().get_or_create(
        cluster=cluster, kind=CURSOR, defaults={"value": now.isoformat()})
    if not created and datetime.fromisoformat(cursor.value) < now:
        cursor.value = now.isoformat()
        cursor.save(update_fields=["value", "updated_at"])


def _chunks(items: list, size: int) -> Iterable[list]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
