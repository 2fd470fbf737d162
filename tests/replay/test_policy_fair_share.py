"""The replay's ``policy.fair_half_life_s`` / ``fair_entry_s`` (issue 34 item 6: the advisor may tune
fair share): validated naming the key, and honoured — a different half-life changes who goes first."""

import pytest

from jobs.whatif.replay import policy
from jobs.whatif.replay.sim import Options, simulate
from jobs.whatif.replay.trace import TraceJob, TraceNode


def _scene():
    # 4 GPUs, two projects with quota 2 each (equal shares). p00 ran all 4 GPUs long ago
    # (0–10,000 s), p01 all 4 recently (10,000–12,000 s). Both submit a 4-GPU job while p01's runs
    # (p00 first); at 12,000 s only one can start.
    nodes = [TraceNode("n0", 4, "G")]
    jobs = [TraceJob("a0", 0.0, 10_000.0, 4, tenant="d0/p00"),
            TraceJob("b0", 10_000.0, 2_000.0, 4, tenant="d0/p01"),
            TraceJob("a1", 11_000.0, 100.0, 4, tenant="d0/p00"),
            TraceJob("b1", 11_001.0, 100.0, 4, tenant="d0/p01")]
    return jobs, nodes, {"d0/p00": {"G": 2000}, "d0/p01": {"G": 2000}}


def _first(rules: dict) -> str:
    jobs, nodes, quotas = _scene()
    opts, world = policy.world(jobs, nodes, quotas, rules, Options(detail=True))
    delays = simulate(jobs, nodes, None, opts, world=world)["job_queue_delay_s"]
    return min(("a1", "b1"), key=lambda j: delays[j])


def test_the_half_life_decides_who_goes_first():
    assert _first({}) == "a1"  # no fair share: today's ordering, submit order
    # a 10-day half-life: p00's 40,000 card-seconds still outweigh p01's 8,000 — p01 goes first
    assert _first({"fair_half_life_s": 864_000, "fair_entry_s": 0}) == "b1"
    # a 10-minute half-life: p00's usage has all but decayed, p01's is fresh — p00 goes first
    assert _first({"fair_half_life_s": 600, "fair_entry_s": 0}) == "a1"


def test_the_policy_turns_fair_share_on_with_its_settings():
    opts = policy.engine_settings(policy.check({"fair_half_life_s": 86_400}), Options())
    assert (opts.fair_share, opts.fair_shares_from_quotas, opts.fair_from_spec) == (True, True, False)
    assert (opts.fair_half_life_s, opts.fair_entry_s) == (86_400.0, 3600.0)
    assert policy.engine_settings({}, Options()) == Options()  # absent keys change nothing


@pytest.mark.parametrize("bad", [-1, "7d", None, True, float("nan"), 10**12])
@pytest.mark.parametrize("key", ["fair_half_life_s", "fair_entry_s"])
def test_a_bad_fair_setting_is_refused_naming_the_key(key, bad):
    with pytest.raises(ValueError, match=rf"policy\.{key}"):
        policy.check({key: bad})
