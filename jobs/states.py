"""Job states and the one table of allowed transitions (DESIGN §4). Pure.

Terminal states are terminal: they have no outgoing transitions, and every state change in
``jobs.services`` is a conditional UPDATE from an expected state, so two workers cannot both
move one job."""

from enum import StrEnum


class JobState(StrEnum):
    PENDING_APPROVAL = "pending_approval"
    QUEUED = "queued"
    ADMITTED = "admitted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    PREEMPTED = "preempted"
    EXPIRED = "expired"
    LOST = "lost"


S = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    S.PENDING_APPROVAL: frozenset({S.QUEUED, S.REJECTED, S.CANCELLED, S.EXPIRED}),
    S.QUEUED: frozenset({S.ADMITTED, S.CANCELLED, S.PENDING_APPROVAL}),
    # An admitted job may be preempted before its backend start (its victim set changed), and
    # goes back to the queue when it did not start within the start timeout (DESIGN §17).
    S.ADMITTED: frozenset({S.RUNNING, S.PREEMPTED, S.CANCELLED, S.FAILED, S.LOST, S.QUEUED}),
    # running → queued: a failed run with retries left is retried (DESIGN §17) — it never passes
    # through failed, which is terminal; the event's data says which retry it is.
    S.RUNNING: frozenset({S.SUCCEEDED, S.FAILED, S.CANCELLED, S.PREEMPTED, S.EXPIRED, S.LOST, S.QUEUED}),
    S.PREEMPTED: frozenset({S.QUEUED, S.CANCELLED}),
    S.LOST: frozenset({S.QUEUED, S.FAILED}),
    S.SUCCEEDED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
}
TERMINAL = frozenset(state for state, targets in TRANSITIONS.items() if not targets)
# States in which a job holds GPUs (quota usage and placement).
HOLDING = frozenset({S.ADMITTED, S.RUNNING})


def can_transition(source: JobState | str, target: JobState | str) -> bool:
    return JobState(target) in TRANSITIONS[JobState(source)]

