"""The advisor's objective (jobs.whatif.advisor.objective): weights, ratios to today, and the three
feasibility rules — each computed by hand."""

import pytest

from jobs.whatif.advisor.objective import WEIGHTS, Rules, check_rules, evaluate


def run(depts, *, alloc=0.5, reuse=0.1, lost=0.0, gpu_hours=1000.0, never=0):
    """A run summary as jobs.whatif.advisor.scenario.summarise makes it (only what the objective reads)."""
    return {
        "window_gpu_allocation_rate": alloc, "window_idle_quota_reuse_ratio": reuse,
        "preempted_gpu_hours_lost": lost, "gpu_hours": gpu_hours, "never_started": never,
        "departments": {d: {"avg_queue_delay_s": avg, "p95_queue_delay_s": p95, "quota_gpus": quota}
                        for d, (avg, p95, quota) in depts.items()},
    }


TODAY = run({"a": (99.0, 299.0, {"G2": 10.0}), "b": (9.0, 59.0, {"G2": 6.0})})


def test_weights_sum_to_one_so_today_scores_exactly_one():
    assert sum(WEIGHTS.values()) == pytest.approx(1.0)
    v = evaluate(TODAY, TODAY)
    assert v.objective == pytest.approx(1.0)
    assert v.feasible and v.violations == ()
    assert all(t == pytest.approx(1.0) for t in v.terms.values())


def test_each_term_is_a_ratio_to_today_computed_by_hand():
    after = run({"a": (49.0, 149.0, {"G2": 10.0}), "b": (9.0, 59.0, {"G2": 6.0})},
                alloc=0.625, reuse=0.55, lost=10.0)
    v = evaluate(TODAY, after)
    assert v.terms["avg"] == pytest.approx((50 / 100 + 10 / 10) / 2)  # (avg + 1 s) / (avg0 + 1 s), mean
    assert v.terms["p95"] == pytest.approx((150 / 300 + 60 / 60) / 2)
    assert v.terms["alloc"] == pytest.approx(0.5 / 0.625)
    assert v.terms["reuse"] == pytest.approx(0.45 / 0.9)
    assert v.terms["lost"] == pytest.approx((10 + 10) / (0 + 10))  # H = 1 % of today's 1,000 GPU-hours
    expected = 0.35 * 0.75 + 0.15 * 0.75 + 0.15 * 0.8 + 0.25 * 0.5 + 0.10 * 2.0
    assert v.objective == pytest.approx(expected)
    assert v.feasible


def test_a_department_p95_over_bound_times_today_is_infeasible_however_good_the_rest():
    after = run({"a": (0.0, 448.0, {"G2": 10.0}), "b": (0.0, 0.0, {"G2": 6.0})}, alloc=0.9, reuse=0.9)
    ok = evaluate(TODAY, after, Rules(p95_bound=1.5))  # 448 ≤ 1.5 × 299 = 448.5
    assert ok.feasible and ok.worst_p95_ratio == pytest.approx(448 / 299)
    after["departments"]["a"]["p95_queue_delay_s"] = 449.0
    bad = evaluate(TODAY, after, Rules(p95_bound=1.5))
    assert not bad.feasible and bad.violations == ("fairness:a",)
    assert bad.objective < 1.0  # the mix alone would have taken it


def test_short_delays_under_the_floor_count_as_equal():
    # b's p95 today is 59 s < the 60 s floor: 90 s = 1.5 × 60 is allowed, 91 s is not.
    after = run({"a": (99.0, 299.0, {"G2": 10.0}), "b": (9.0, 90.0, {"G2": 6.0})})
    assert evaluate(TODAY, after, Rules(p95_bound=1.5, p95_floor_s=60)).feasible
    after["departments"]["b"]["p95_queue_delay_s"] = 91.0
    assert evaluate(TODAY, after, Rules(p95_bound=1.5, p95_floor_s=60)).violations == ("fairness:b",)


def test_a_department_whose_guaranteed_quota_shrinks_is_infeasible():
    after = run({"a": (99.0, 299.0, {"G2": 9.0}), "b": (9.0, 59.0, {"G2": 7.0})})
    v = evaluate(TODAY, after)
    assert v.violations == ("guarantee:a:G2",)
    grown = run({"a": (99.0, 299.0, {"G2": 12.0}), "b": (9.0, 59.0, {"G2": 6.0})})
    assert evaluate(TODAY, grown).feasible


def test_more_jobs_left_unstarted_than_today_is_infeasible():
    after = run({"a": (0.0, 0.0, {"G2": 10.0}), "b": (0.0, 0.0, {"G2": 6.0})}, never=1)
    assert evaluate(TODAY, after).violations == ("never_started",)


@pytest.mark.parametrize("bound, floor", [(0.9, 60), ("1.5", 60), (1.5, -1), (True, 60), (float("nan"), 60)])
def test_bad_rules_are_refused(bound, floor):
    with pytest.raises(ValueError):
        check_rules(bound, floor)


def test_reuse_is_judged_against_todays_quotas_not_the_candidates():
    """A candidate that only relabels the schedule (its own quotas lower, reuse of them higher)
    gains nothing on the reuse term; one that really shares more of today's quota does."""
    relabelled = run({"a": (99.0, 299.0, {"G2": 10.0}), "b": (9.0, 59.0, {"G2": 6.0})}, reuse=0.6)
    relabelled["window_idle_quota_reuse_ratio_today_quotas"] = 0.1  # today's figure
    assert evaluate(TODAY, relabelled).terms["reuse"] == pytest.approx(1.0)
    shared = dict(relabelled, window_idle_quota_reuse_ratio_today_quotas=0.55)
    assert evaluate(TODAY, shared).terms["reuse"] == pytest.approx(0.45 / 0.9)
