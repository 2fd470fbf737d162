"""Reasons of job events: the timeline of a job's page and ``GET /api/v1/jobs/{id}/events/``.

``JobEvent.reason`` keeps the English text, as programs read it ("started", "reclaim for job
12"). For people it is rendered in their language (``JobEvent.reason_text``):

- a reason without parameters is its own msgid, looked up in the catalogue under the context
  "job event" — rows written before this existed translate too;
- a reason with parameters is also stored as a message in ``reason_message``
  (``portal/texts.py``), whose parameters are filled in after the translation;
- a backend's own words (a Slurm or Kubernetes failure message) are shown as the backend wrote
  them.
"""

from __future__ import annotations

from django.utils import translation
from django.utils.translation import pgettext

from portal.texts import Message, is_message, message, pgettext_noop, render

CONTEXT = "job event"

# Every reason written without parameters (the raw SQL of jobs/scheduling.py writes some), so
# the catalogue has them; they need no stored message.
FIXED = (
    pgettext_noop("job event", "submitted"),
    pgettext_noop("job event", "approved"),
    pgettext_noop("job event", "approval rejected"),
    pgettext_noop("job event", "approval expired"),
    pgettext_noop("job event", "approval cancelled"),
    pgettext_noop("job event", "admitted by the scheduler"),
    pgettext_noop("job event", "started"),
    pgettext_noop("job event", "completed"),
    pgettext_noop("job event", "cancelled by user"),
    pgettext_noop("job event", "preempted"),
    pgettext_noop("job event", "preempted before it started"),
    pgettext_noop("job event", "requeued after preemption"),
    pgettext_noop("job event", "requeued from its checkpoint"),
    pgettext_noop("job event", "requeued after node failure"),
    pgettext_noop("job event", "lifetime ended"),
    pgettext_noop("job event", "max runtime exceeded"),
    pgettext_noop("job event", "max runtime reached"),
    pgettext_noop("job event", "node failure"),
    pgettext_noop("job event", "placement spans clusters"),
    pgettext_noop("job event", "head of its priority level"),
    pgettext_noop("job event", "in-quota / on-loan split recomputed"),
    pgettext_noop("job event", "over budget"),
    pgettext_noop("job event", "array cancelled by user"),
)

# The reasons with parameters (their English text is the msgid with the parameters filled in).
SUBMITTED_TO = pgettext_noop("job event", "submitted to %(cluster)s")
SECRET_UNDECLARED = pgettext_noop("job event", "secret %(secret)s is not declared for project %(project)s")
SCALED_BY_OWNER = pgettext_noop("job event", "scaled %(before)s→%(after)s by its owner")
SCALED_BY_SCHEDULER = pgettext_noop("job event", "scaled %(before)s→%(after)s by the scheduler")
SCALED_FOR = pgettext_noop("job event", "scaled %(before)s→%(after)s: %(why)s")
TARGET = pgettext_noop("job event", "target %(before)s→%(after)s")
SCALED_BY_AUTOSCALER = pgettext_noop("job event", "scaled %(before)s→%(after)s by the autoscaler")
TARGET_BY_AUTOSCALER = pgettext_noop("job event", "target %(before)s→%(after)s by the autoscaler")
RETRY = pgettext_noop("job event", "retry %(retry)s of %(of)s after exit code %(exit_code)s")
START_TIMEOUT = pgettext_noop("job event", "not running after the start timeout of %(timeout)s s: %(why)s")
START_TIMEOUTS_EXHAUSTED = pgettext_noop(
    "job event", "not running after %(count)s start timeouts: %(why)s")
# DESIGN §17: the dependency (after_ok, after_not_ok) that can no longer be met, and why.
DEPENDENCY_NEVER_MET = pgettext_noop(
    "job event", "dependency %(condition)s on job %(job)s can no longer be met: it is %(state)s"
)
NODE_DRAINED = pgettext_noop("job event", "requeued off node %(node)s (drained: %(reason)s)")
QUEUE_DRAINED = pgettext_noop("job event", "requeued: the queue of %(queue)s is draining (%(reason)s)")
NODE_UNHEALTHY = pgettext_noop("job event", "requeued off node %(node)s (unhealthy: %(reason)s)")
PREEMPTED_FOR = {
    "reclaim": pgettext_noop("job event", "reclaim for job %(job)s"),
    "priority": pgettext_noop("job event", "priority for job %(job)s"),
    # Borrowing within the cohort: a higher-priority borrower took this borrower's GPUs.
    "borrow": pgettext_noop("job event", "borrowed capacity for job %(job)s of a higher priority"),
    # Consolidation (issue 36): moved out of a fragmented gang's way; it resumes from its checkpoint.
    "consolidate": pgettext_noop("job event", "moved for consolidation, to make room for job %(job)s"),
}
IDLE = pgettext_noop("job event", "GPU utilisation below %(threshold)s%% for %(window)s")


def reason(msgid: str, **params) -> Message:
    """A reason with parameters, as ``job_transition`` and the other writers take it."""
    return message(msgid, context=CONTEXT, **params)


def preempted_for(kind: str, job_id) -> Message:
    """The reason of a preemption signal (``kind`` "reclaim" or "priority", from the engine)."""
    msgid = PREEMPTED_FOR.get(kind)
    if msgid is None:  # a kind the engine may add later: its English words
        return reason(f"{kind} for job %(job)s", job=job_id)
    return reason(msgid, job=job_id)


def stored(value: str | Message) -> tuple[str, Message | None]:
    """``(reason, reason_message)`` for a JobEvent row: the English text, and the message when
    the reason has parameters."""
    if not is_message(value):
        return str(value)[:300], None
    with translation.override("en"):
        return render(value)[:300], value


def event_reason(value: str | Message) -> dict:
    """The ``reason`` and ``reason_message`` fields of a new JobEvent."""
    text, stored_message = stored(value)
    return {"reason": text, "reason_message": stored_message}


def reason_text(reason_value: str, reason_message: Message | None) -> str:
    """A job event's reason in the active language."""
    if reason_message:
        return render(reason_message, fallback=reason_value)
    if not reason_value:
        return ""
    return pgettext(CONTEXT, reason_value)

# The idle policy (jobs.idle_service): ``minutes`` as written by ``jobs.idle_service.duration``.
IDLE_WARNED = pgettext_noop(
    "job event", "warned by the idle policy: GPU utilisation under %(threshold)s%% for %(minutes)s"
)
IDLE_STOPPED = pgettext_noop(
    "job event", "stopped by the idle policy: GPU utilisation under %(threshold)s%% for %(minutes)s"
)
IDLE_PREEMPTIBLE = pgettext_noop(
    "job event", "made preemptible by the idle policy: GPU utilisation under %(threshold)s%% for %(minutes)s"
)
