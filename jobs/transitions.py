"""The one way a job changes state (DESIGN §4), below every other job service.

Every state change is a conditional UPDATE from the state the job was loaded in, allowed by the
transition table (``jobs.states``), plus its event row in the same transaction; the caller
proceeds only if its update changed the row, so two workers (or a cycle and a cancel) can never
both move one job. Submission, dispatch, the scheduler and approvals all come here, and this
module imports none of them.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.enqueue import enqueue
from portal.models import User
from portal.texts import Message

from .models import Job, JobEvent
from .reasons import event_reason
from .states import TERMINAL, JobState, can_transition


def job_transition(
    job: Job,
    target: JobState,
    *,
    reason: str | Message,
    actor: User | None = None,
    data: dict | None = None,
    **fields,
) -> bool:
    """Move ``job`` from the state it was loaded in to ``target``, if the transition table
    allows it and nobody moved the job since (``UPDATE … WHERE state = <loaded state>``).
    Returns False, writing nothing, when the transition is not allowed or another worker won.
    ``reason``: English text, or a message of ``jobs.reasons`` when it has parameters."""
    expected = JobState(job.state)
    if not can_transition(expected, target):
        return False
    now = timezone.now()
    # The state and its event row commit together even for a caller without a transaction
    # (the cancel API): otherwise a cycle could hand out the freed GPUs before the log says so,
    # and a crash between the two would leave a transition without its event.
    with transaction.atomic():
        changed = Job.objects.filter(pk=job.pk, state=expected.value).update(
            state=target.value, state_changed_at=now, **fields
        )
        if not changed:
            return False
        JobEvent.objects.create(
            job_id=job.pk,
            from_state=expected.value,
            to_state=target.value,
            **event_reason(reason),
            actor=actor,
            occurred_at=now,
            data=data or {},
        )
    job.refresh_from_db()
    if target in TERMINAL or target in (JobState.PREEMPTED, JobState.QUEUED):
        request_cycle()  # GPUs were freed or a job joined the queue
    return True


def request_cycle() -> None:
    """Run a scheduling cycle soon after this transaction commits (DESIGN §5: on submit/finish).
    ``expires``: a cycle that could not start within 30 s is superseded by beat's next one."""
    enqueue("jobs.schedule_cycle", expires=30)
