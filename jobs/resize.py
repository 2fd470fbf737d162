"""Elastic scaling writes shared by the owner's scale (``services.job_scale``) and the scheduling
cycle (the grow pass, reclaim of grown workers): which jobs may change size, the placement edit,
the ``scaled`` event and the resize outbox.

A job's ``placement`` lists its workers; the last ``len(grown_at)`` of them were added by the
grow pass (``grown_at`` holds their grow times, oldest first). Every size change writes one
``scaled`` event (``from_state = to_state``, ``data.workers`` = the new count, which the meter
reads) and sets ``resize_requested_at``: the claim the resize task clears once the backend has
the new size (an outbox, like dispatch).
"""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext as _

from jobs import reasons
from jobs.models import Job, JobEvent, JobKind
from jobs.reasons import event_reason
from jobs.states import JobState
from portal.enqueue import enqueue
from portal.texts import Message

# Backends that resize a running job (jobs/clusters/backends/*.resize). Slurm allocations keep their size.
RESIZABLE_CLUSTERS = frozenset({"kubernetes", "simulator"})


def why_not_scalable(job: Job) -> str | None:
    """Why ``job`` cannot change size now, or None. Mirrors the grow pass's eligibility
    (``jobs.scheduling.snapshot.GROW_TO_SQL``)."""
    if job.min_workers is None or job.min_workers >= job.workers or job.gpu_milli is not None:
        return _("This job has a fixed size: it was not submitted with fewer minimum workers.")
    if job.kind == JobKind.DEV or (job.kind == JobKind.TRAINING and not job.checkpointing):
        return _("Only inference jobs and checkpointing training jobs change size while they run.")
    if job.state != JobState.RUNNING or job.dispatched_at is None:
        return _("Only a running job can be scaled.")
    if job.terminating_since or job.cancel_requested_at or job.expire_requested_at:
        return _("This job is being stopped.")
    if job.cluster is None or job.cluster.kind not in RESIZABLE_CLUSTERS:
        return _("Jobs on Slurm clusters keep the size they started with.")
    return None


def drop_workers(job: Job, drop: set[int]) -> tuple[list, list]:
    """``job``'s placement and grow times without the workers at the indices ``drop``."""
    first_grown = len(job.placement) - len(job.grown_at)
    placement = [w for k, w in enumerate(job.placement) if k not in drop]
    grown = [at for k, at in enumerate(job.grown_at, first_grown) if k not in drop]
    return placement, grown


def record_scaled(
    job: Job, *, before: int, after: int, reason: Message, at: datetime, actor=None, **data
) -> None:
    JobEvent.objects.create(
        job_id=job.pk,
        kind="scaled",
        from_state=job.state,
        to_state=job.state,
        **event_reason(reason),
        actor=actor,
        occurred_at=at,
        data={"workers": after, "from": before, **data},
    )


def scale_down(job: Job, replicas: int, *, actor, at: datetime, by: str = reasons.SCALED_BY_OWNER) -> None:
    """The owner's (or the autoscaler's, ``by``) scale-down (``job`` locked): the newest workers
    go now, GPUs and quota with them; the backend follows through the outbox."""
    held = len(job.placement)
    placement, grown = drop_workers(job, set(range(replicas, held)))
    Job.objects.filter(pk=job.pk).update(
        target_workers=replicas,
        placement=placement,
        grown_at=grown,
        granted_workers=replicas,
        resize_requested_at=at,
    )
    record_scaled(
        job,
        before=held,
        after=replicas,
        reason=reasons.reason(by, before=held, after=replicas),
        at=at,
        actor=actor,
        target=replicas,
        placement=placement,
    )
    request_resize([job.pk])


def set_target(job: Job, replicas: int, *, actor, at: datetime, by: str = reasons.TARGET) -> None:
    """A new target at or above the current size: the grow pass works towards it."""
    before = job.target_workers or job.workers
    Job.objects.filter(pk=job.pk).update(target_workers=replicas)
    JobEvent.objects.create(
        job_id=job.pk,
        kind="scale_target",
        from_state=job.state,
        to_state=job.state,
        actor=actor,
        occurred_at=at,
        **event_reason(reasons.reason(by, before=before, after=replicas)),
        data={"target": replicas, "workers": len(job.placement)},
    )


def request_resize(job_ids: list[int]) -> None:
    """Tell the backends after this transaction commits (the claim is ``resize_requested_at``)."""
    for job_id in job_ids:
        enqueue("jobs.resize_job", job_id)
