"""The one way a job changes state (DESIGN §4), below every other job service.

Every state change is a conditional UPDATE from the state the job was loaded in, allowed by the
transition table (``jobs.states``), plus its event row in the same transaction; the caller
proceeds only if its update changed the row, so two workers (or a cycle and a cancel) can never
both move one job. Submission, dispatch, the scheduler and approvals all come here, and this
module imports none of them.

Two clocks (DESIGN §7 "Facts and corrections"): a transition the backend reported carries the
backend's instant (``occurred_at``, e.g. Slurm's Start/End) and its ``time_source``; the event
row's ``recorded_at`` is always the database's clock. The meter bills by ``occurred_at``. A
backend instant that cannot be true is never clamped: the portal's clock is used instead and the
event's data says why (``time_rejected``) — see docs/backend-times.md.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from jobs.models import Job, JobEvent, TimeSource
from jobs.reasons import event_reason
from jobs.states import TERMINAL, JobState, can_transition
from portal.enqueue import enqueue
from portal.models import User
from portal.texts import Message

# Another host's clock may run a little ahead of the portal's: a backend instant up to this far
# in the future is believed; further ahead it is nonsense (a wrong zone, a broken clock).
MAX_CLOCK_SKEW = timedelta(seconds=5)
# The job field a backend instant sets, by target state (any other target: an end).
_STAMPED = {JobState.ADMITTED: "admitted_at", JobState.RUNNING: "started_at"}


def job_transition(
    job: Job,
    target: JobState,
    *,
    reason: str | Message,
    actor: User | None = None,
    data: dict | None = None,
    occurred_at: datetime | None = None,
    time_source: str = TimeSource.PORTAL,
    **fields,
) -> bool:
    """Move ``job`` from the state it was loaded in to ``target``, if the transition table
    allows it and nobody moved the job since (``UPDATE … WHERE state = <loaded state>``).
    Returns False, writing nothing, when the transition is not allowed or another worker won.
    ``reason``: English text, or a message of ``jobs.reasons`` when it has parameters.

    ``occurred_at``/``time_source``: the backend's own instant of this change (its start, its
    end). It becomes the event's ``occurred_at`` and the job's ``admitted_at`` (into admitted: a
    job that started outside the portal), ``started_at`` (into running) or ``finished_at`` (any
    other target) — unless it is impossible (``backend_time_problem``),
    when the portal's clock stands in and ``data["time_rejected"]`` records the refused instant.
    Without it the event is at the portal's clock (source portal)."""
    expected = JobState(job.state)
    if not can_transition(expected, target):
        return False
    now = timezone.now()
    data = dict(data or {})
    at, source = now, TimeSource.PORTAL
    if occurred_at is not None:
        at, source, rejected = _backend_time(job, expected, target, occurred_at, TimeSource(time_source), now)
        if rejected:
            data["time_rejected"] = rejected
        fields[_STAMPED.get(target, "finished_at")] = at
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
            occurred_at=at,
            time_source=source,
            data=data,
        )
    job.refresh_from_db()
    if target in TERMINAL or target in (JobState.PREEMPTED, JobState.QUEUED):
        request_cycle()  # GPUs were freed or a job joined the queue
    return True


def _backend_time(
    job: Job, expected: JobState, target: JobState, at: datetime, source: TimeSource, now: datetime
) -> tuple[datetime, TimeSource, dict | None]:
    """(instant, source, rejection) for a backend's ``at``: itself, or the portal's ``now`` with
    the reason it was refused."""
    problem = backend_time_problem(job, expected, target, at, now)
    if problem is None:
        return at, source, None
    why, bound = problem
    refused = {"at": at.isoformat(), "source": str(source), "why": why}
    if bound is not None:
        refused["bound"] = bound.isoformat()
    return now, TimeSource.PORTAL, refused


def backend_time_problem(
    job: Job, expected: JobState, target: JobState, at: datetime, now: datetime
) -> tuple[str, datetime | None] | None:
    """Why a backend's instant for this transition cannot be true — (code, the bound it broke) —
    or None. Each would bill time that never was, or bill it twice:

    * ``no_zone``: a naive time (its zone would be a guess);
    * ``future``: later than the portal's clock by more than ``MAX_CLOCK_SKEW``;
    * ``before_admission``: before the portal admitted the job (it cannot run before it was
      given GPUs, and metering would start before the admission that opens the allocation);
    * ``before_start``: an end before the job's recorded start."""
    if timezone.is_naive(at):
        return "no_zone", None
    if at > now + MAX_CLOCK_SKEW:
        return "future", now
    if job.admitted_at is not None and at < job.admitted_at:
        return "before_admission", job.admitted_at
    ends_run = expected == JobState.RUNNING and target != JobState.RUNNING
    if ends_run and job.started_at is not None and at < job.started_at:
        return "before_start", job.started_at
    return None


def request_cycle() -> None:
    """Run a scheduling cycle soon after this transaction commits (DESIGN §5: on submit/finish).
    ``expires``: a cycle that could not start within 30 s is superseded by beat's next one."""
    enqueue("jobs.schedule_cycle", expires=30)
