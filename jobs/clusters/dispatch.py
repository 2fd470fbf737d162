"""Between the portal and the cluster backends: dispatch admitted jobs, stop preempted or
cancelled ones, and apply what the backend reports.

Every step first *claims* its job with a conditional UPDATE and calls the backend only after
that claim committed — never inside a transaction — so a task run twice (a retry, a worker killed
mid-call) neither submits nor stops a job twice: ``submit`` itself looks before it creates, under
the name derived from the job id.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from jobs import environment
from jobs.clusters.backends import base
from jobs.clusters.backends.registry import backend_for
from jobs.clusters.inventory import refresh_node_states
from jobs.models import Job, JobEvent, JobKind, backend_name
from jobs.reasons import RETRY, SECRET_UNDECLARED, SUBMITTED_TO, event_reason, reason
from jobs.requests import effective_request
from jobs.retries import backoff, retry_policy, retryable
from jobs.scheduling.snapshot import MILLI
from jobs.states import HOLDING, JobState
from jobs.transitions import job_transition
from portal.texts import Message
from quotas.models import Cluster, FlavorKind, Node

log = logging.getLogger(__name__)
CLAIM_TIMEOUT = timedelta(seconds=120)  # a claim older than this belongs to a dead worker
RESIZE_LOCK = 0x6770_7002  # "gp" + 2: session advisory locks (this, job id) serialise resizes


def backend_of(cluster: Cluster) -> base.Backend:
    return backend_for(cluster.kind, cluster.config or {})


def job_spec(job: Job, node_names: dict[int, str]) -> base.JobSpec:
    placement = tuple(tuple(base.Slot(node_names[n], g, m) for n, g, m in worker) for worker in job.placement)
    return base.JobSpec(
        job_id=job.pk,
        name=backend_name(job.pk),
        kind=job.kind,
        image=job.image,
        command=job.command,
        flavor=job.flavor.name,
        k8s_resource=job.flavor.k8s_resource_name,
        slurm_gres=job.flavor.slurm_gres,
        workers=job.granted_workers or job.workers,
        min_workers=min(job.min_workers or job.workers, job.granted_workers or job.workers),
        gpus_per_worker=job.gpus_per_worker,
        gpu_milli=job.gpu_milli,
        placement=placement,
        max_runtime_seconds=job.max_runtime_seconds,
        checkpointing=job.checkpointing,
        sim_duration_seconds=job.sim_duration_seconds,
        labels={
            "job": str(job.pk),
            "project": job.project.code,
            "department": job.project.department.code,
            "user": job.submitted_by.username,
        },
        sharing_mode=job.flavor.sharing_mode,
        gpu_memory_mib=job.flavor.memory_mib,
        cpu_only=job.flavor.kind == FlavorKind.CPU,
        array_index=job.array_index,
        **request_fields(job),
        **spec_fields(job),
    )


def request_fields(job) -> dict[str, int | None]:
    """What each worker asks of its node besides its GPUs: its own figures, the rest its share
    (``jobs.requests.effective_request``) — the same request the engine placed, so the backend
    reserves what the portal counted (a job that asked nothing still gets its GPUs' share, never
    the backend's small default nor the whole node)."""
    asked = effective_request(job)
    cpu = asked.cpu_millicores
    if job.flavor.kind == FlavorKind.CPU:
        # A cpu flavor's unit is one core: its job holds at least its units' cores, whatever the
        # share says (a node that reported no CPU figure leaves the share empty).
        cpu = max(cpu or 0, job.gpus_per_worker * 1000)
    return {
        "cpu_millicores": cpu,
        "memory_mib": asked.memory_mib,
        "local_disk_gib": asked.local_disk_gib,
    }


def _mount(data: dict[str, Any]) -> base.Mount:
    return base.Mount(**{field: data[field] for field in environment.MOUNT_FIELDS})


def spec_fields(job) -> dict[str, Any]:
    """The JobSpec fields of the job's working environment (checked and stored by
    ``jobs.environment`` at submission)."""
    checkpoint = None
    if job.checkpoint:
        checkpoint = base.Checkpoint(mount=_mount(job.checkpoint["mount"]), subdir=job.checkpoint["subdir"])
    return {
        "mounts": tuple(_mount(m) for m in job.mounts or ()),
        "env": tuple(base.EnvVar(**e) for e in job.env or ()),
        "checkpoint": checkpoint,
        "pull_secret": job.project.image_pull_secret,
        "expose_port": job.expose_port,
    }


def _undeclared_secret(job) -> str | None:
    """The first Secret the job's environment reads that its project does not declare now."""
    references = [e["secret"] for e in job.env or () if "secret" in e]
    if not references:
        return None
    declared = environment.declared_secrets(job.project)
    return next((name for name in references if name not in declared), None)


def _claim_dispatch(job_id: int, now: datetime) -> bool:
    stale = now - CLAIM_TIMEOUT
    return bool(
        Job.objects.filter(
            Q(dispatch_claimed_at__isnull=True) | Q(dispatch_claimed_at__lt=stale),
            pk=job_id,
            state=JobState.ADMITTED,
            dispatched_at__isnull=True,
            terminating_since__isnull=True,  # preempted meanwhile: requeued, never started
        )
        .exclude(kind="external")
        .update(dispatch_claimed_at=now)  # started by its backend already
    )


def _victims_gone(job: Job) -> bool:
    """A job admitted by preemption starts only once its victims have exited (grace period).

    Only the victims' runs that were preempted count: a victim requeued and admitted again by a
    later cycle was placed around this job, and waiting for that new run (an inference service
    may never end) would hold this job forever (seen in the 7-day soak)."""
    event = job.events.filter(to_state=JobState.ADMITTED).order_by("-occurred_at", "-id").first()
    if event is None:
        return True
    victims = [int(v) for v in (event.data.get("preempts") or [])]
    same_run = Q(admitted_at__isnull=True) | Q(admitted_at__lte=event.occurred_at)
    return not Job.objects.filter(same_run, pk__in=victims, state__in=list(HOLDING)).exists()


_DEVICE_USE_SQL = """
    SELECT (s->>0)::int, (s->>1)::int, sum((s->>2)::int)
    FROM jobs_job j, jsonb_array_elements(j.placement) w, jsonb_array_elements(w) s
    WHERE j.state = ANY(%s) AND j.id <> %s
      AND (j.dispatched_at IS NOT NULL OR j.dispatch_claimed_at IS NOT NULL)
      AND (s->>0)::int = ANY(%s)
    GROUP BY 1, 2
"""


def _devices_free(job: Job) -> bool:
    """Every GPU of ``job``'s placement has room next to the jobs on the cluster now.

    The scheduler places a preemptor on its victims' GPUs; ``_victims_gone`` waits for those.
    But a preemptor that is itself preempted before it starts hands those GPUs to *its*
    preemptor, whose only recorded victim (the unstarted one) leaves at once — while the first
    victims may still be in their grace period on the same GPUs. Found by the 50-client
    concurrency run (one GPU over capacity). So the last word is physical: the GPUs held by
    jobs dispatched (or being dispatched: a live claim) must leave room for this one."""
    slots = [(int(n), int(g), int(m)) for worker in job.placement for n, g, m in worker]
    if not slots:
        return True
    with connection.cursor() as cursor:
        nodes = sorted({n for n, _, _ in slots})
        cursor.execute(_DEVICE_USE_SQL, [[s.value for s in HOLDING], job.pk, nodes])
        used = {(n, g): m for n, g, m in cursor.fetchall()}
    return all(used.get((n, g), 0) + m <= MILLI for n, g, m in slots)


def _requeue_unstarted(job_id: int, now: datetime) -> bool:
    """A job preempted after its admission but before any worker dispatched it never started:
    it gives its GPUs back and waits again, with no backend call. Dispatching it would start it
    on GPUs the scheduler has already promised to its preemptor (the concurrency test caught
    such a job on the cluster next to its preemptor). Not while a live claim says a worker is
    submitting it right now: that one is dispatched, then stopped like any running victim."""
    stale = now - CLAIM_TIMEOUT
    with transaction.atomic():
        job = (
            Job.objects.select_for_update()
            .filter(
                Q(dispatch_claimed_at__isnull=True) | Q(dispatch_claimed_at__lt=stale),
                pk=job_id,
                state=JobState.ADMITTED,
                dispatched_at__isnull=True,
                terminating_since__isnull=False,
            )
            .first()
        )
        if job is None:
            return False
        job_transition(job, JobState.PREEMPTED, reason="preempted before it started", finished_at=now)
        _requeue(job, "requeued after preemption")
        return True


def dispatch_job(job_id: int) -> str:
    now = timezone.now()
    if _requeue_unstarted(job_id, now):
        return "requeued: preempted before it started"
    job = Job.objects.select_related("flavor", "project__department", "submitted_by").get(pk=job_id)
    if not _victims_gone(job):
        return "waiting for victims"
    if not _devices_free(job):
        return "waiting for its GPUs"
    if not _claim_dispatch(job_id, now):
        return "not claimable"
    node_ids = {n for worker in job.placement for n, _g, _m in worker}
    nodes = {n.pk: n for n in Node.objects.filter(pk__in=node_ids).select_related("cluster")}
    clusters = {n.cluster for n in nodes.values()}
    if len(clusters) != 1:
        job_transition(job, JobState.FAILED, reason="placement spans clusters", finished_at=now)
        return "failed"
    cluster = clusters.pop()
    undeclared = _undeclared_secret(job)
    if undeclared:
        # Checked at submission; a declaration an admin removed since (or a job submitted before
        # declarations existed, issue 32 item 17) must not reach the cluster.
        job_transition(job, JobState.FAILED, reason=reason(
            SECRET_UNDECLARED, secret=undeclared, project=job.project.code), finished_at=now)
        return "failed"
    backend = backend_of(cluster)
    try:
        backend_id = backend.submit(job_spec(job, {pk: n.name for pk, n in nodes.items()}))
    except base.BackendError:
        # The backend is unreachable or refused: give the claim back, so the retry (or beat's next
        # round) submits as soon as it is back rather than after CLAIM_TIMEOUT. Safe: submit looks
        # for the job by name before it creates one.
        Job.objects.filter(pk=job_id, dispatch_claimed_at=now, dispatched_at__isnull=True).update(
            dispatch_claimed_at=None
        )
        raise
    # Row and note in one transaction: a status sync seeing the job dispatched could otherwise
    # log "running" before this note, which still says "admitted".
    with transaction.atomic():
        recorded = Job.objects.filter(pk=job_id, state=JobState.ADMITTED).update(
            dispatched_at=timezone.now(), backend_id=backend_id, cluster=cluster
        )
        if recorded:
            JobEvent.objects.create(
                job=job,
                kind="dispatched",
                from_state=job.state,
                to_state=job.state,
                **event_reason(reason(SUBMITTED_TO, cluster=cluster.name)),
                occurred_at=timezone.now(),
                data={"backend_id": backend_id},
            )
    if not recorded:  # cancelled while we were submitting: take the backend job back
        backend.cancel(backend_name(job.pk))
        return "cancelled meanwhile"
    return "dispatched"


def stop_job(job_id: int) -> str:
    """Stop a dispatched job that was preempted or cancelled, once (claimed)."""
    now = timezone.now()
    claimed = Job.objects.filter(
        Q(terminating_since__isnull=False)
        | Q(cancel_requested_at__isnull=False)
        | Q(expire_requested_at__isnull=False),
        pk=job_id,
        state__in=list(HOLDING),
        dispatched_at__isnull=False,
        stop_requested_at__isnull=True,
    ).update(stop_requested_at=now)
    if not claimed:
        return "not claimable"
    job = Job.objects.select_related("cluster", "priority_class").get(pk=job_id)
    grace = job.priority_class.grace_seconds if job.checkpointing and job.terminating_since else 0
    backend_of(job.cluster).cancel(backend_name(job.pk), grace_seconds=grace)
    return "stopping"


def sync_cluster(cluster_id: int) -> dict[str, int]:
    """Apply the backend's view of every dispatched job of the cluster that holds GPUs."""
    cluster = Cluster.objects.get(pk=cluster_id)
    jobs = {
        backend_name(j.pk): j
        for j in Job.objects.filter(cluster=cluster, state__in=list(HOLDING), dispatched_at__isnull=False)
    }
    if not jobs:
        return {}
    statuses = backend_of(cluster).status(sorted(jobs))
    if any(st.node_failure for st in statuses.values()):
        refresh_node_states(cluster)  # before the requeues below: a lost node must not take them back
    counts: dict[str, int] = {}
    for name, job in jobs.items():
        outcome = apply_status(job, statuses.get(name) or base.JobStatus(name, base.LOST))
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def apply_status(job: Job, st: base.JobStatus) -> str:
    with transaction.atomic():
        if st.phase == base.PENDING:
            return "pending"
        if st.phase == base.LOST and job.resize_requested_at is not None:
            # A training job is deleted and created again to change size: between the two calls
            # the backend does not know it. The resize task settles it; never fail it for that.
            return "resizing"
        if st.phase == base.RUNNING:
            _start(job, st)
            return "running"
        if st.phase != base.LOST:
            _start(job, st)  # started and ended between two syncs: it still gets its running interval
        return _finish(job, st)


def _backend_clock(at, st: base.JobStatus) -> dict:
    """The backend's instant for a transition, when it reported one: metering bills by the
    backend's clock, never by when this sync happened to look (DESIGN §7)."""
    return {} if at is None else {"occurred_at": at, "time_source": st.time_source}


def _start(job: Job, st: base.JobStatus) -> None:
    if job.state == JobState.ADMITTED:
        when = _backend_clock(st.started_at, st) or {"started_at": timezone.now()}
        job_transition(job, JobState.RUNNING, reason="started", **when)


def _cancel_reason(job: Job) -> str | Message:
    """The reason its cancellation was asked with (the user's, the idle policy's), as written on
    the ``cancel_requested`` event."""
    row = (JobEvent.objects.filter(job=job, kind="cancel_requested").order_by("-id")
           .values_list("reason", "reason_message").first())
    if row is None:
        return "cancelled by user"
    return row[1] or row[0] or "cancelled by user"


def _finish(job: Job, st: base.JobStatus) -> str:
    end = _backend_clock(st.finished_at, st) or {"finished_at": timezone.now()}
    ended = {**end, "exit_code": st.exit_code, "message": st.message[:500]}
    if job.cancel_requested_at and st.phase in (base.CANCELLED, base.FAILED, base.LOST):
        job_transition(job, JobState.CANCELLED, reason=_cancel_reason(job), **ended)
        return "cancelled"
    if _overran(job, st):
        state = JobState.EXPIRED if job.kind == "dev" else JobState.FAILED
        job_transition(
            job, state, reason="lifetime ended" if job.kind == "dev" else "max runtime exceeded", **ended
        )
        return str(state)
    if job.terminating_since and st.phase in (base.CANCELLED, base.FAILED, base.LOST):
        job_transition(job, JobState.PREEMPTED, reason="preempted", **ended)
        _requeue(job, "requeued after preemption")
        return "preempted"
    if st.phase == base.SUCCEEDED:
        job_transition(job, JobState.SUCCEEDED, reason="completed", **ended)
        return "succeeded"
    if _requeued_when_lost(job, st):
        job_transition(job, JobState.LOST, reason=st.message or "node failure", **ended)
        _requeue(job, "requeued from its checkpoint" if job.checkpointing else "requeued after node failure")
        return "requeued"
    if not (st.node_failure or st.phase == base.LOST) and _retry(job, st, ended):
        return "retried"
    job_transition(job, JobState.FAILED, reason=st.message or st.phase, **ended)
    return "failed"


def _retry(job: Job, st: base.JobStatus, ended: dict) -> bool:
    """A failed run with retries left goes straight back to the queue (running → queued: it never
    passes through the terminal ``failed``) and is not admitted before its backoff has passed.
    The event carries which retry it is, the exit code and the backend's message."""
    if job.state != JobState.RUNNING or not retryable(job, st.exit_code, retry_policy()):
        return False
    attempt = job.retries + 1
    not_before = timezone.now() + backoff(attempt)
    code = "?" if st.exit_code is None else st.exit_code
    data = {"retry": attempt, "max_retries": job.max_retries, "exit_code": st.exit_code,
            "not_before": not_before.isoformat(), "backend_message": st.message[:300]}
    return job_transition(
        job, JobState.QUEUED, reason=reason(RETRY, retry=attempt, of=job.max_retries, exit_code=code),
        data=data, **ended, **RELEASED, retries=attempt, not_before=not_before,
    )


def _requeued_when_lost(job: Job, st: base.JobStatus) -> bool:
    """A job its node took down is not at fault (DESIGN §17): every one is requeued — a
    checkpointing job resumes from its checkpoint, the others start again, a service's replicas
    are placed again — and the requeue is no retry (it counts in ``requeue_count`` only). A job
    the backend merely no longer knows (no node failure reported) is requeued where that loses
    nothing: it checkpoints, or it is a service."""
    if st.node_failure:
        return True
    return st.phase == base.LOST and (job.checkpointing or job.kind == JobKind.INFERENCE)


def _overran(job: Job, st: base.JobStatus) -> bool:
    """Stopped by us at its deadline, or by the backend's own time limit."""
    if st.phase not in (base.CANCELLED, base.FAILED, base.LOST):
        return False
    return job.expire_requested_at is not None or "max runtime" in st.message.lower()


def resize_job(job_id: int) -> str:
    """Bring the backend to the size the job has in the portal (grown by the scheduler, scaled by
    its owner, or shrunk by a reclaim). Idempotent; one resize per job at a time (a session-level
    advisory lock held across the backend call, outside any transaction), and the claim
    ``resize_requested_at`` is cleared only if no newer resize was requested meanwhile."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s, %s)", [RESIZE_LOCK, job_id])
        if not cursor.fetchone()[0]:
            return "busy"  # another worker resizes it now; the beat safety net comes back
        try:
            return _resize(job_id)
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s, %s)", [RESIZE_LOCK, job_id])


def _resize(job_id: int) -> str:
    job = Job.objects.select_related("flavor", "project__department", "submitted_by", "cluster").get(
        pk=job_id
    )
    requested = job.resize_requested_at
    if requested is None:
        return "nothing to do"
    if job.state not in HOLDING or job.cluster is None or job.terminating_since or job.cancel_requested_at:
        Job.objects.filter(pk=job_id, resize_requested_at=requested).update(resize_requested_at=None)
        return "not running"  # stopping or gone: the stop, not a resize, is what the backend needs
    node_ids = {n for worker in job.placement for n, _g, _m in worker}
    names = dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "name"))
    backend_of(job.cluster).resize(job_spec(job, names))
    Job.objects.filter(pk=job_id, resize_requested_at=requested).update(resize_requested_at=None)
    return "resized"


def expire_overdue(now: datetime | None = None) -> list[int]:
    """Ask running jobs past ``max_runtime_seconds`` (a dev job's lifetime) to stop; the status
    sync then records ``expired`` (dev) or ``failed``. Claimed once per job."""
    now = now or timezone.now()
    overdue = [
        pk
        for pk, started, limit in Job.objects.filter(
            state=JobState.RUNNING,
            max_runtime_seconds__isnull=False,
            expire_requested_at__isnull=True,
            started_at__isnull=False,
        ).values_list("pk", "started_at", "max_runtime_seconds")
        if started + timedelta(seconds=limit) <= now
    ]
    claimed = []
    for pk in overdue:
        if Job.objects.filter(pk=pk, expire_requested_at__isnull=True).update(expire_requested_at=now):
            job = Job.objects.get(pk=pk)
            JobEvent.objects.create(
                job=job,
                kind="expire_requested",
                from_state=job.state,
                to_state=job.state,
                reason="max runtime reached",
                occurred_at=now,
            )
            claimed.append(pk)
    return claimed


# What a job gives back when it leaves its run for the queue: its GPUs and the backend claims.
RELEASED = {
    "placement": [],
    "granted_workers": None,
    "on_loan": None,
    "terminating_since": None,
    "dispatch_claimed_at": None,
    "dispatched_at": None,
    "backend_id": "",
    "stop_requested_at": None,
    "cancel_requested_at": None,
    "expire_requested_at": None,
    "admitted_at": None,
}


def _requeue(job: Job, reason: str) -> None:
    job_transition(job, JobState.QUEUED, reason=reason, **RELEASED, requeue_count=job.requeue_count + 1)
