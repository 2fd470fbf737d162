"""The start timeout (DESIGN §17; docs/operator-guide.md "Retries and start timeout"), like Kueue's
``waitForPodsReady``: a job the portal dispatched that its backend has not started within the
timeout (an image that does not pull, a pod nobody schedules, a Slurm job held by the
controller) gives its GPUs back and is requeued with backoff, with the reason its backend gave —
Slurm's pending reason, the pod's waiting reason (``ImagePullBackOff``) or its scheduling
condition (``Unschedulable``). After the centre's ``max_start_timeouts`` it fails instead: an image
that never pulls must not cycle for ever.

The clock starts at the dispatch, not at the admission: a job admitted by preemption waits for
its victims' grace period before it is dispatched, which is no fault of its backend.

Safe to run twice or concurrently: the requeue is a conditional transition from the run the sweep
looked at (``admitted`` and the same ``dispatched_at``) under a row lock, so the status sync
(which moves the job to ``running`` with a conditional UPDATE too) and a second sweep cannot both
win; the backend call comes after that commit, never inside a transaction. A job that started
between the look and the lock was already moved by the sync and is left alone; one that starts
between the requeue and the cancel is stopped by the cancel — it started after its timeout.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from jobs.clusters.backends import base
from jobs.clusters.dispatch import RELEASED, backend_of
from jobs.models import Job, backend_name
from jobs.reasons import START_TIMEOUT, START_TIMEOUTS_EXHAUSTED, reason
from jobs.retries import backoff, retry_policy, start_timeout
from jobs.states import JobState
from jobs.transitions import job_transition
from quotas.models import Cluster

log = logging.getLogger(__name__)


def requeue_unstarted(now: datetime | None = None) -> dict[str, int]:
    """Requeue (or fail) every dispatched job its backend has not started within the timeout.
    Returns how many of each outcome."""
    now = now or timezone.now()
    policy = retry_policy()
    counts: dict[str, int] = {}
    waiting = Job.objects.filter(
        state=JobState.ADMITTED, dispatched_at__isnull=False, cluster__isnull=False,
        terminating_since__isnull=True, cancel_requested_at__isnull=True, resize_requested_at__isnull=True,
    ).exclude(kind="external")
    for cluster in Cluster.objects.filter(pk__in=waiting.values("cluster_id")):
        limit = start_timeout(cluster, policy)
        overdue = [j for j in waiting.filter(cluster=cluster) if j.dispatched_at + limit <= now]
        if not overdue:
            continue
        backend = backend_of(cluster)
        statuses = backend.status([backend_name(j.pk) for j in overdue])
        for job in overdue:
            st = statuses.get(backend_name(job.pk))
            if st is not None and st.phase != base.PENDING:
                continue  # started or ended meanwhile: the status sync records it
            outcome = _give_back(job, st, limit.total_seconds(), policy.max_start_timeouts, now)
            if outcome:
                _cancel(backend, job)
                counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def _why(st: base.JobStatus | None) -> str:
    return (st.message if st is not None else "") or "no reason given by the backend"


def _give_back(job: Job, st: base.JobStatus | None, timeout: float, most: int, now: datetime) -> str:
    """Requeue with backoff, or fail after ``most`` start timeouts; '' when the job was moved
    meanwhile (the sync saw it start, a cancel, a preemption, another sweep)."""
    why, count = _why(st)[:200], job.start_timeouts + 1
    with transaction.atomic():
        locked = (Job.objects.select_for_update()
                  .filter(pk=job.pk, state=JobState.ADMITTED, dispatched_at=job.dispatched_at,
                          terminating_since__isnull=True, cancel_requested_at__isnull=True).first())
        if locked is None:
            return ""
        data = {"start_timeout": count, "why": why, "timeout_seconds": int(timeout)}
        if count >= most:
            moved = job_transition(locked, JobState.FAILED, data=data, finished_at=now, message=why,
                                   reason=reason(START_TIMEOUTS_EXHAUSTED, count=count, why=why),
                                   start_timeouts=count)
            return "failed" if moved else ""
        not_before = now + backoff(count)
        data["not_before"] = not_before.isoformat()
        moved = job_transition(
            locked, JobState.QUEUED, data=data, message=why, **RELEASED, start_timeouts=count,
            not_before=not_before, reason=reason(START_TIMEOUT, timeout=int(timeout), why=why),
        )
        return "requeued" if moved else ""


def _cancel(backend: base.Backend, job: Job) -> None:
    """Take the never-started job off its cluster. A backend that cannot be reached now keeps the
    object: the next dispatch finds it by name (``submit`` looks before it creates)."""
    try:
        backend.cancel(backend_name(job.pk))
    except base.BackendError:
        name = backend_name(job.pk)
        log.warning("start timeout: could not remove %s from its cluster", name, exc_info=True)
