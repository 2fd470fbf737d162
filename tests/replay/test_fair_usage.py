"""The replay's incremental fair-share usage equals the sum of decayed_card_seconds over its
allocations (jobs/whatif/replay/fair.py), whatever the half-life and however long the run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduler.fairshare import decayed_card_seconds
from jobs.whatif.replay import limits
from jobs.whatif.replay.fair import DecayedUsage
from jobs.whatif.replay.sim import Options, simulate
from jobs.whatif.replay.trace import TraceJob, TraceNode

T0 = 1_672_531_200.0


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([0.0, 60.0, 3600.0, 604800.0]),
       st.lists(st.tuples(st.sampled_from("ab"), st.integers(1, 8), st.floats(0, 5e6), st.floats(0, 5e5),
                          st.booleans()), min_size=1, max_size=12),
       st.floats(0, 1e6))
def test_the_meter_equals_the_sum_over_allocations(h, allocs, after):
    meter = DecayedUsage(h, T0)
    events = []
    for k, (_, _, start, length, ends) in enumerate(allocs):
        events.append((T0 + start, 0, k))
        if ends:
            events.append((T0 + start + length, 1, k))
    for t, kind, k in sorted(events):
        if kind == 0:
            meter.start(str(k), allocs[k][0], allocs[k][1], t)
        else:
            meter.end(str(k), t)
    now = max(t for t, _, _ in events) + after
    got = meter.at(now)
    for project in "ab":
        want = sum(decayed_card_seconds(u, T0 + s, T0 + s + n if e else None, now, h)
                   for p, u, s, n, e in allocs if p == project)
        assert got.get(project, 0.0) == pytest.approx(want, rel=1e-6, abs=1e-3)


F = "F"
NODE = [TraceNode("n0", 8, F)]
# a ran the whole node for a day; then a and b submit an 8-GPU job each, a's first.
JOBS = [TraceJob("past", 0, 86400, 8, tenant="d/a"),
        TraceJob("a2", 90000, 3600, 8, tenant="d/a"), TraceJob("b2", 90000, 3600, 8, tenant="d/b")]
SPEC = {"nodes": [{"flavor": F, "count": 1, "gpus_per_node": 8}],
        "quotas": {"d": {F: 8}, "d/a": {F: 4}, "d/b": {F: 4}}}


def replay(data, jobs=JOBS, **options):
    world = limits.world(data, {j.tenant for j in jobs}, 200000)
    return simulate(jobs, NODE, None, Options(detail=True, **options), world=world)


def test_with_shares_the_replay_orders_by_its_own_usage():
    fair = replay({**SPEC, "shares": {"d": 8, "d/a": 4, "d/b": 4}})
    assert fair["fair_share"] is True and fair["fair_half_life_s"] == 604800.0
    assert fair["job_queue_delay_s"]["b2"] == 0 and fair["job_queue_delay_s"]["a2"] > 0


def test_without_shares_in_the_input_the_replay_runs_without_fair_share():
    plain = replay(SPEC)
    assert plain["fair_share"] is False
    assert plain["job_queue_delay_s"]["a2"] == 0 and plain["job_queue_delay_s"]["b2"] > 0
    off = replay({**SPEC, "shares": {"d": 8, "d/a": 4, "d/b": 4}}, fair_share=False)
    assert off["job_queue_delay_s"] == plain["job_queue_delay_s"]


def test_the_half_life_is_the_replays_own_parameter():
    # a ran 2 h long ago, b 1 h recently. With 7 days' half-life a used more: b goes first; with
    # 1 h, a's run has decayed away (2^-22) and b's has not: a goes first.
    jobs = [TraceJob("pa", 0, 7200, 8, tenant="d/a"), TraceJob("pb", 80000, 3600, 8, tenant="d/b"),
            TraceJob("a2", 90000, 3600, 8, tenant="d/a"), TraceJob("b2", 90000, 3600, 8, tenant="d/b")]
    data = {**SPEC, "shares": {"d": 8, "d/a": 4, "d/b": 4}}
    week = replay(data, jobs)["job_queue_delay_s"]
    hour = replay(data, jobs, fair_half_life_s=3600.0)["job_queue_delay_s"]
    assert week["b2"] == 0 and week["a2"] > 0
    assert hour["a2"] == 0 and hour["b2"] > 0


@pytest.mark.parametrize("bad", [{"x/y": 1}, {"d/a": -1}, {"d/a": "many"}, ["d/a"]])
def test_bad_shares_are_refused_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="shares"):
        limits.world({**SPEC, "shares": bad}, {j.tenant for j in JOBS}, 1000)


@pytest.mark.parametrize("flag", ["--half-life", "--fair-entry"])
def test_replay_command_refuses_a_negative_fair_share_time(tmp_path, flag):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--half-life and --fair-entry"):
        call_command("replay", str(tmp_path / "t.csv"), flag, "-1")


def test_replay_command_passes_the_half_life_and_can_switch_fair_share_off(tmp_path):
    import json

    from django.core.management import call_command

    trace = tmp_path / "t.csv"
    rows = [f"{j.job_id},{j.submit_time},{j.duration},{j.num_gpus},{j.tenant}" for j in JOBS]
    trace.write_text("\n".join(["job_id,submit_time,duration,num_gpus,tenant", *rows]) + "\n")
    cluster = tmp_path / "c.json"
    cluster.write_text(json.dumps({**SPEC, "shares": {"d": 8, "d/a": 4, "d/b": 4}}))
    out = tmp_path / "r.json"
    call_command("replay", str(trace), "--cluster", str(cluster), "--quiet", "--half-life", "3600",
                 "--out", str(out))
    fair = json.loads(out.read_text())
    assert fair["fair_half_life_s"] == 3600.0 and fair["jobs"] == 3
    call_command("replay", str(trace), "--cluster", str(cluster), "--quiet", "--no-fair-share",
                 "--out", str(out))
    assert json.loads(out.read_text())["fair_share"] is False


def test_shares_from_quotas_turn_fair_share_on_for_a_spec_without_shares():
    # bench/replay.py --fair-share: each node's quota as its shares (d/a 4, d/b 4 cards).
    fair = replay(SPEC, fair_shares_from_quotas=True)
    assert fair["fair_share"] is True
    assert fair["job_queue_delay_s"]["b2"] == 0 and fair["job_queue_delay_s"]["a2"] > 0
