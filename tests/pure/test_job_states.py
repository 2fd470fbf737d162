"""The one transition table (DESIGN §4)."""

import pytest

from jobs.states import HOLDING, TERMINAL, TRANSITIONS, JobState, can_transition


def test_terminal_states_are_terminal():
    assert {s.value for s in TERMINAL} == {"succeeded", "failed", "cancelled", "rejected", "expired"}
    for state in TERMINAL:
        assert not any(can_transition(state, target) for target in JobState)


def test_every_state_is_reachable_from_submission():
    seen, frontier = (
        {JobState.PENDING_APPROVAL, JobState.QUEUED},
        [JobState.PENDING_APPROVAL, JobState.QUEUED],
    )
    while frontier:
        for nxt in TRANSITIONS[frontier.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    assert seen == set(JobState)


@pytest.mark.parametrize(
    ("source", "target", "allowed"),
    [
        ("queued", "admitted", True),
        ("queued", "running", False),  # only through admission
        ("running", "preempted", True),
        ("preempted", "queued", True),  # requeue after preemption
        ("lost", "queued", True),
        ("succeeded", "cancelled", False),
        ("cancelled", "queued", False),
        ("pending_approval", "rejected", True),
        ("running", "rejected", False),
    ],
)
def test_transition_table(source, target, allowed):
    assert can_transition(source, target) is allowed


def test_only_admitted_and_running_jobs_hold_gpus():
    assert {s.value for s in HOLDING} == {"admitted", "running"}
