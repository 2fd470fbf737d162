"""The idle policy's decision (DESIGN §16, docs/scheduling.md "Idle policy"): pure — no Django —
fed one job's facts, its policy and ``now``; ``jobs.idle_service`` reads the facts and applies the
answer.

A job is idle for the length of its *idle run*: the unbroken sequence of per-minute samples, ending
at the current or the previous minute, in which the busiest of its cards stayed under the threshold.
A minute without a sample ends the run (a metrics outage is never idleness), and so does a sample
whose busiest card is unknown. Warned after ``idle_minutes`` of such a run; after ``grace_minutes``
more (and at least that long after the warning) the action of its kind is taken, once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

MINUTE = timedelta(minutes=1)


class Action(StrEnum):
    """What the policy does to an idle job of a kind, after the warning."""

    OFF = "off"  # not even warned
    WARN = "warn"  # warned only
    STOP = "stop"  # cancelled
    PREEMPTIBLE = "preemptible"  # made preemptible (any job may then reclaim its GPUs)


class Step(StrEnum):
    NONE = "none"
    WARN = "warn"
    CLEAR = "clear"  # busy again (or no metrics) after a warning: the warning no longer stands
    STOP = "stop"
    PREEMPTIBLE = "preemptible"


@dataclass(frozen=True)
class Policy:
    threshold_pct: float
    idle_minutes: int
    grace_minutes: int
    actions: dict[str, Action]  # per job kind; a kind not named is left alone

    def action_for(self, kind: str) -> Action:
        return self.actions.get(kind, Action.OFF)


@dataclass(frozen=True)
class Sample:
    minute: datetime  # the sample's minute (seconds zero)
    busiest_pct: float | None  # the busiest card's utilisation; None: not known


@dataclass(frozen=True)
class JobFacts:
    kind: str
    started_at: datetime | None
    warned_at: datetime | None
    acted: bool
    exempt: bool  # an approved exemption covers ``now``
    samples: tuple[Sample, ...]  # any order; only the job's current run's minutes matter


@dataclass(frozen=True)
class Decision:
    step: Step
    idle_minutes: int  # the length of the idle run now


def idle_run_minutes(samples: Iterable[Sample], threshold_pct: float, now: datetime,
                     started_at: datetime | None = None) -> int:
    """Minutes in the unbroken run of idle samples ending at ``now``'s minute or the one before
    (the poll may not have written the current minute yet). Samples before ``started_at``'s
    minute belong to an earlier run of the job and are ignored."""
    floor = _minute(started_at) if started_at is not None else None
    by_minute = {_minute(s.minute): s.busiest_pct for s in samples
                 if floor is None or _minute(s.minute) >= floor}
    end = _minute(now)
    if end not in by_minute:
        end -= MINUTE
    count = 0
    while _idle(by_minute.get(end, _MISSING), threshold_pct):
        count += 1
        end -= MINUTE
    return count


_MISSING = object()


def _idle(value, threshold_pct: float) -> bool:
    return value is not _MISSING and value is not None and value < threshold_pct


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def decide(policy: Policy, job: JobFacts, now: datetime) -> Decision:
    """The one step to take for ``job`` now (``Step.NONE``: nothing)."""
    action = policy.action_for(job.kind)
    if job.acted or action == Action.OFF:
        return Decision(Step.NONE, 0)
    run = idle_run_minutes(job.samples, policy.threshold_pct, now, job.started_at)
    if job.exempt:
        # An exempted job is left alone; a warning given before the exemption is withdrawn.
        return Decision(Step.CLEAR if job.warned_at is not None else Step.NONE, run)
    if job.warned_at is None:
        return Decision(Step.WARN if run >= policy.idle_minutes else Step.NONE, run)
    if run < policy.idle_minutes:
        return Decision(Step.CLEAR, run)
    grace = timedelta(minutes=policy.grace_minutes)
    if action in (Action.STOP, Action.PREEMPTIBLE) and run >= policy.idle_minutes + policy.grace_minutes \
            and now - job.warned_at >= grace:
        return Decision(Step.STOP if action == Action.STOP else Step.PREEMPTIBLE, run)
    return Decision(Step.NONE, run)
