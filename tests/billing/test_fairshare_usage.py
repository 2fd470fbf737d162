"""The fair share's usage provider (billing/fairshare.py, DESIGN §16) on PostgreSQL, against values
computed by hand: decayed normalised card-seconds per project, counted from admission."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from math import log

import pytest

from billing.fairshare import decayed_series, fair_usage, project_usage
from quotas.models import Flavor

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
H = 3600  # a one-hour half-life keeps the hand computations short
HOUR = timedelta(hours=1)


def _full_hour(ended_half_lives_ago: float = 0) -> float:
    """One card over one half-life, ending ``ended_half_lives_ago`` half-lives before NOW."""
    return H / log(2) * (0.5 ** ended_half_lives_ago - 0.5 ** (ended_half_lives_ago + 1))


def _run(history, project, flavor, admitted, ended, **kw):
    job = history.job(project, flavor, submitted=admitted - HOUR, **kw)
    history.admit(job, admitted)
    history.start(job, admitted + timedelta(minutes=5))  # counted from admission, not from the start
    if ended is not None:
        history.end(job, ended)
    return job


def test_an_allocation_ended_a_half_life_ago_counts_half_of_one_ended_now(world, history):
    _run(history, world.pa1, world.F, NOW - 2 * HOUR, NOW - HOUR, gpus=8)
    _run(history, world.pb, world.F, NOW - HOUR, NOW, gpus=8)
    usage = project_usage(NOW, H)
    assert usage[world.pb.pk].decayed_card_seconds == pytest.approx(8 * H / log(2) * 0.5, rel=1e-9)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(
        usage[world.pb.pk].decayed_card_seconds / 2, rel=1e-9)
    # the raw figure: card-seconds over the last half-life, undecayed
    assert usage[world.pb.pk].window_card_seconds == pytest.approx(8 * H)
    assert usage[world.pa1.pk].window_card_seconds == pytest.approx(0)
    assert fair_usage(NOW, H) == {f"p{world.pa1.pk}": usage[world.pa1.pk].decayed_card_seconds,
                                  f"p{world.pb.pk}": usage[world.pb.pk].decayed_card_seconds}


def test_a_running_job_counts_up_to_now_and_events_after_now_are_not_seen(world, history):
    _run(history, world.pa1, world.F, NOW - HOUR, None)
    _run(history, world.pb, world.F, NOW - HOUR, NOW + HOUR)  # ends after NOW: running at NOW
    usage = project_usage(NOW, H)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(_full_hour(), rel=1e-9)
    assert usage[world.pb.pk].decayed_card_seconds == pytest.approx(_full_hour(), rel=1e-9)
    # at an earlier instant, half an hour of each: h/ln2 × (1 − 0.5^0.5)
    earlier = project_usage(NOW - HOUR / 2, H)
    assert earlier[world.pb.pk].decayed_card_seconds == pytest.approx(H / log(2) * (1 - 0.5 ** 0.5), rel=1e-9)
    assert world.pa1.pk in earlier


def test_intervals_are_half_open(world, history):
    _run(history, world.pa1, world.F, NOW, None)  # admitted exactly at NOW: nothing yet
    _run(history, world.pb, world.F, NOW - HOUR, NOW)  # ended exactly at NOW: as running until NOW
    usage = project_usage(NOW, H)
    assert world.pa1.pk not in usage or usage[world.pa1.pk].decayed_card_seconds == 0
    assert usage[world.pb.pk].decayed_card_seconds == pytest.approx(_full_hour(), rel=1e-9)


def test_shared_gpus_count_their_milli_and_flavors_their_normalisation(world, history):
    shared = Flavor.objects.create(name="T4s", vendor="nvidia", model="T4", memory_mib=15360, shareable=True,
                                   k8s_resource_name="nvidia.com/gpu")
    fast = Flavor.objects.create(name="H800", vendor="nvidia", model="H800", memory_mib=81920,
                                 k8s_resource_name="nvidia.com/gpu", relative_throughput=Decimal("2.5"))
    half = Flavor.objects.create(name="A100-half", vendor="nvidia", model="MIG", memory_mib=40000,
                                 fraction_numerator=1, fraction_denominator=2,
                                 k8s_resource_name="nvidia.com/mig-3g", relative_throughput=Decimal(3))
    _run(history, world.pa1, shared, NOW - HOUR, NOW, gpus=1, milli=250)
    _run(history, world.pb, fast, NOW - HOUR, NOW, gpus=2, workers=3)
    _run(history, world.pa, half, NOW - HOUR, NOW, gpus=4)
    usage = project_usage(NOW, H)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(0.25 * _full_hour(), rel=1e-9)
    assert usage[world.pb.pk].decayed_card_seconds == pytest.approx(3 * 2 * 2.5 * _full_hour(), rel=1e-9)
    assert usage[world.pa.pk].decayed_card_seconds == pytest.approx(4 * 0.5 * 3 * _full_hour(), rel=1e-9)


def test_each_run_counts_on_its_own_flavor_and_worker_count(world, history):
    fast = Flavor.objects.create(name="H800", vendor="nvidia", model="H800", memory_mib=81920,
                                 k8s_resource_name="nvidia.com/gpu", relative_throughput=Decimal(2))
    job = history.job(world.pa1, world.F, workers=4, gpus=1, submitted=NOW - 5 * HOUR)
    history.admit(job, NOW - 2 * HOUR, workers=2, flavor=world.F)  # the first run: 2 workers on F
    history.start(job, NOW - 2 * HOUR)
    history.end(job, NOW - HOUR, state="preempted")  # requeued
    history.admit(job, NOW - HOUR, flavor=fast)  # the second: 4 workers on H800, still running
    history.start(job, NOW - HOUR)
    usage = project_usage(NOW, H)
    expected = 2 * _full_hour(1) + 4 * 2 * _full_hour(0)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(expected, rel=1e-9)


def test_splitting_a_run_changes_nothing(world, history):
    _run(history, world.pa1, world.F, NOW - 3 * HOUR, NOW - HOUR, gpus=8)
    for _ in range(4):  # the same eight cards as four jobs of two over the same time
        _run(history, world.pb, world.F, NOW - 3 * HOUR, NOW - HOUR, gpus=2)
    usage = project_usage(NOW, H)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(usage[world.pb.pk].decayed_card_seconds)


def test_only_runs_ended_within_ten_half_lives_are_read(world, history):
    _run(history, world.pa1, world.F, NOW - 12 * HOUR, NOW - 11 * HOUR)
    _run(history, world.pb, world.F, NOW - 10 * HOUR, NOW - 9 * HOUR)
    usage = project_usage(NOW, H)
    assert world.pa1.pk not in usage
    assert usage[world.pb.pk].decayed_card_seconds == pytest.approx(_full_hour(9), rel=1e-9)


def test_a_long_running_job_admitted_before_the_horizon_still_counts(world, history):
    _run(history, world.pa1, world.F, NOW - 20 * HOUR, None)
    usage = project_usage(NOW, H)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(H / log(2) * (1 - 0.5 ** 20), rel=1e-9)


def test_the_scheduling_config_reads_it_through_the_hook_billing_fills(world, history):
    from jobs.scheduling.config import fair_usage as config_fair_usage

    _run(history, world.pb, world.F, NOW - HOUR, NOW)
    assert config_fair_usage(NOW, H) == {f"p{world.pb.pk}": pytest.approx(_full_hour(), rel=1e-9)}


def test_with_the_default_half_life_a_run_ended_seven_days_ago_counts_half(world, history):
    week = timedelta(days=7)
    _run(history, world.pa1, world.F, NOW - week - HOUR, NOW - week, gpus=4)
    _run(history, world.pb, world.F, NOW - HOUR, NOW, gpus=4)
    usage = project_usage(NOW, 7 * 86400)
    assert usage[world.pa1.pk].decayed_card_seconds == pytest.approx(
        usage[world.pb.pk].decayed_card_seconds / 2, rel=1e-9)
    # close to undecayed for an hour of a week's half-life: 4 cards × 3600 s × (1 − ε)
    assert usage[world.pb.pk].decayed_card_seconds == pytest.approx(4 * 3600, rel=3e-3)


def test_as_of_an_earlier_instant_a_job_running_now_counts_only_its_run_open_then(world, history):
    job = history.job(world.pa1, world.F, submitted=NOW - 5 * HOUR)
    history.admit(job, NOW - 4 * HOUR, flavor=world.F)  # run 1: [−4 h, −3 h)
    history.start(job, NOW - 4 * HOUR)
    history.end(job, NOW - 3 * HOUR, state="preempted")
    history.admit(job, NOW - HOUR, flavor=world.F)  # run 2: [−1 h, …), still running
    history.start(job, NOW - HOUR)
    at = NOW - 2 * HOUR  # between the runs: only run 1, ended a half-life before
    assert project_usage(at, H)[world.pa1.pk].decayed_card_seconds == pytest.approx(_full_hour(1), rel=1e-9)
    assert project_usage(NOW, H)[world.pa1.pk].decayed_card_seconds == pytest.approx(
        _full_hour(3) + _full_hour(0), rel=1e-9)


def test_a_series_of_instants_is_each_instant_on_its_own(world, history):
    job = history.job(world.pa1, world.F, submitted=NOW - 9 * HOUR)
    history.admit(job, NOW - 8 * HOUR, flavor=world.F)
    history.start(job, NOW - 8 * HOUR)
    history.end(job, NOW - 5 * HOUR, state="preempted")
    history.admit(job, NOW - 2 * HOUR, flavor=world.F)
    history.start(job, NOW - 2 * HOUR)
    _run(history, world.pb, world.F, NOW - 14 * HOUR, NOW - 13 * HOUR, gpus=2)
    _run(history, world.pa, world.F, NOW - 3 * HOUR, NOW + HOUR, gpus=3, milli=None)
    _run(history, world.pa, world.F, NOW - 7 * HOUR, NOW - 6 * HOUR, gpus=5)
    instants = [NOW - k * HOUR / 2 for k in (25, 24, 12, 7, 6, 3, 1, 0)]
    series = decayed_series(instants, H)
    assert list(series) == instants
    for at in instants:
        each = {pk: u.decayed_card_seconds for pk, u in project_usage(at, H).items()}
        assert series[at] == pytest.approx(each, rel=1e-9), at
    assert world.pb.pk in series[NOW - 12 * HOUR] and world.pb.pk not in series[NOW]  # past its horizon
