"""The idle policy's pure decision (jobs.idle_policy): idle only over an unbroken run of samples whose
busiest card is under the threshold; warned after T, acted on after T + grace and at least the grace
after the warning; exemptions, a finished action and kinds left off change nothing."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from jobs.idle_policy import Action, JobFacts, Policy, Sample, Step, decide, idle_run_minutes

NOW = datetime(2026, 12, 7, 12, 0, 30, tzinfo=UTC)
MIN = timedelta(minutes=1)
POLICY = Policy(threshold_pct=5, idle_minutes=120, grace_minutes=60,
                actions={"dev": Action.STOP, "training": Action.PREEMPTIBLE, "inference": Action.WARN})


def _samples(values, end=NOW):
    """``values`` oldest first, the last one at ``end``'s minute."""
    last = end.replace(second=0, microsecond=0)
    return tuple(Sample(last - (len(values) - 1 - k) * MIN, v) for k, v in enumerate(values))


def _job(kind="dev", values=(), warned_at=None, exempt=False, acted=False, started_at=None):
    return JobFacts(kind=kind, started_at=started_at, warned_at=warned_at, acted=acted, exempt=exempt,
                    samples=_samples(values))


def test_warned_after_exactly_the_idle_minutes():
    assert decide(POLICY, _job(values=[1.0] * 119), NOW).step == Step.NONE
    assert decide(POLICY, _job(values=[1.0] * 120), NOW) == decide(POLICY, _job(values=[1.0] * 120), NOW)
    assert decide(POLICY, _job(values=[1.0] * 120), NOW).step == Step.WARN


def test_the_current_minute_may_not_be_polled_yet_but_an_older_end_is_stale():
    samples = _samples([1.0] * 130, end=NOW - MIN)
    assert idle_run_minutes(samples, 5, NOW) == 130
    samples = _samples([1.0] * 130, end=NOW - 2 * MIN)
    assert idle_run_minutes(samples, 5, NOW) == 0


def test_the_action_waits_for_the_grace_after_the_warning():
    idle = [1.0] * 200
    warned = NOW - timedelta(minutes=59)
    assert decide(POLICY, _job(values=idle, warned_at=warned), NOW).step == Step.NONE
    warned = NOW - timedelta(minutes=60)
    assert decide(POLICY, _job(values=idle, warned_at=warned), NOW).step == Step.STOP
    assert decide(POLICY, _job("training", idle, warned_at=warned), NOW).step == Step.PREEMPTIBLE
    assert decide(POLICY, _job("inference", idle, warned_at=warned), NOW).step == Step.NONE  # warn only


def test_left_alone_when_exempt_acted_on_or_off():
    idle = [0.0] * 300
    assert decide(POLICY, _job(values=idle, exempt=True), NOW).step == Step.NONE
    assert decide(POLICY, _job(values=idle, exempt=True, warned_at=NOW - 2 * MIN), NOW).step == Step.CLEAR
    assert decide(POLICY, _job(values=idle, acted=True, warned_at=NOW - 90 * MIN), NOW).step == Step.NONE
    assert decide(POLICY, _job("external", idle), NOW).step == Step.NONE  # a kind not named: off


def test_samples_of_an_earlier_run_do_not_count():
    job = _job(values=[0.0] * 200, started_at=NOW - timedelta(minutes=30))
    assert decide(POLICY, job, NOW).idle_minutes == 31  # the minute of the start and the 30 after it


@given(st.lists(st.one_of(st.none(), st.floats(0, 100)), min_size=0, max_size=300),
       st.integers(0, 299))
def test_a_busy_card_a_gap_or_an_unknown_card_ends_the_run(values, cut):
    """The run never reaches back past a minute that is missing, unknown or at/over the threshold,
    and is as long as the idle tail otherwise."""
    samples = list(_samples(values))
    if samples and cut < len(samples):
        del samples[cut]  # a gap
    run = idle_run_minutes(samples, 5, NOW)
    by_minute = {s.minute: s.busiest_pct for s in samples}
    end = NOW.replace(second=0)
    if end not in by_minute:
        end -= MIN
    expected = 0
    while by_minute.get(end) is not None and by_minute[end] < 5:
        expected += 1
        end -= MIN
    assert run == expected


@given(st.integers(0, 400), st.integers(0, 400), st.sampled_from(list(Action)))
def test_never_acts_before_the_warning_nor_warns_twice(idle, since_warning, action):
    policy = Policy(5, 120, 60, {"dev": action})
    fresh = decide(policy, _job(values=[1.0] * idle), NOW).step
    assert fresh in (Step.NONE, Step.WARN)
    assert (fresh == Step.WARN) == (idle >= 120 and action != Action.OFF)
    warned = decide(policy, _job(values=[1.0] * idle, warned_at=NOW - timedelta(minutes=since_warning)), NOW)
    assert warned.step != Step.WARN
    if warned.step in (Step.STOP, Step.PREEMPTIBLE):
        assert idle >= 180 and since_warning >= 60
