"""The advisor's search space, its mapping onto the replay's ``policy`` key, the replay's policy
application (jobs.whatif.replay.policy) and the optimiser's reproducibility (jobs.whatif.advisor.study)."""

import pytest

from jobs.scheduler.scheduler import Limits
from jobs.whatif.advisor import space, study
from jobs.whatif.replay import policy
from jobs.whatif.replay.sim import EPOCH, Options, simulate
from jobs.whatif.replay.spec import tenant_tree
from jobs.whatif.replay.trace import TraceJob, TraceNode

PROJECTS = ["d0/p00", "d0/p01"]


def test_default_bounds_hold_today_and_map_onto_replay_inputs():
    b = space.check_bounds({})
    today = space.today(PROJECTS)
    assert space.replay_inputs(today, b) == {
        "policy": {"overcommit_ratio": 1.0, "grace_s": 0, "backfill": True, "packing": "fragmentation_aware"},
        "queueing": {}}
    params = {**today, "borrow_limit_ratio": 0.5, "night_lend_limit_ratio": 1.0,
              "queueing:d0/p01": "strict_fifo"}
    inputs = space.replay_inputs(params, b)
    assert inputs["policy"]["borrow_limit_ratio"] == 0.5
    assert inputs["policy"]["night"] == {"start_hour": 20, "end_hour": 8, "lend_limit_ratio": 1.0}
    assert inputs["queueing"] == {"d0/p01": "strict_fifo"}
    assert space.changes(params, PROJECTS) == {"borrow_limit_ratio": 0.5, "night_lend_limit_ratio": 1.0,
                                               "queueing:d0/p01": "strict_fifo"}
    policy.check(inputs["policy"])  # the replay accepts what the space produces


@pytest.mark.parametrize("bounds", [
    {"overcommit_ratio": [1.5, 1.0]}, {"overcommit_ratio": [0, 2]}, {"grace_s": [0, 1.5]},
    {"packing": ["first_fit"]}, {"backfill": []}, {"queueing": ["fifo"]}, {"lend_limit_ratio": [-1]},
    {"night_hours": [8, 8]}, {"night_hours": [25, 8]}, {"colour": [1]}, {"borrow_limit_ratio": [0.5, 0.5]},
])
def test_bad_bounds_are_refused_not_clamped(bounds):
    with pytest.raises(ValueError):
        space.check_bounds(bounds)


def test_a_pinned_dimension_is_not_searched():
    b = space.check_bounds({"packing": ["best_fit"], "overcommit_ratio": [1.2, 1.2]})
    dims = {d.name: d for d in space.dimensions(b, PROJECTS)}
    assert dims["packing"].fixed and dims["overcommit_ratio"].fixed and not dims["grace_s"].fixed
    p = study.next_params(7, 1, list(dims.values()), [])
    assert p["packing"] == "best_fit" and p["overcommit_ratio"] == 1.2


def test_same_seed_and_same_results_give_the_same_candidates():
    dims = space.dimensions(space.check_bounds({}), PROJECTS)

    def draw(seed):
        told = []
        for n in range(1, 14):
            p = study.next_params(seed, n, dims, told[:study.history_for(n, 2)])
            told.append(study.Told(n, p, p["overcommit_ratio"] + p["grace_s"] / 100, int(p["grace_s"] > 100)))
        return [t.params for t in told]

    first = draw(42)
    assert draw(42) == first
    assert draw(43) != first
    assert all(0.6 <= p["overcommit_ratio"] <= 1.5 and 0 <= p["grace_s"] <= 120 for p in first)


@pytest.mark.parametrize("bad", [
    {"overcommit_ratio": 0}, {"overcommit_ratio": "1"}, {"packing": "fgd"}, {"backfill": 1},
    {"night": {"start_hour": 20}}, {"night": {"start_hour": 20, "end_hour": 8, "x": 1}}, {"speed": 2},
])
def test_the_replay_refuses_a_bad_policy(bad):
    with pytest.raises(ValueError):
        policy.check(bad)


def test_overcommit_scales_projects_and_keeps_departments_and_ratios_set_limits():
    tree, base = tenant_tree(["d0/p00", "d0/p01"], {"d0/p00": {"G": 6000}, "d0/p01": {"G": 2000}})
    lim = policy.limits_for(tree, base, {
        "overcommit_ratio": 0.5, "borrow_limit_ratio": 1.0, "lend_limit_ratio": 0.5,
        "night": {"start_hour": 20, "end_hour": 8, "lend_limit_ratio": 1.0}})
    assert lim[("d0", "G")] == Limits(8000)  # the department's quota (its guarantee) is unchanged
    assert lim[("d0/p00", "G")] == Limits(3000, 3000, 1500)
    night = policy.limits_for(tree, base, {"lend_limit_ratio": 0.5, "night": {
        "start_hour": 20, "end_hour": 8, "lend_limit_ratio": 1.0}}, night=True)
    assert night[("d0/p01", "G")] == Limits(2000, None, 2000)
    assert policy.department_quotas(tree, lim) == {"d0": {"G": 8.0}}


def test_window_edges_follow_the_engine_clock_in_utc():
    night = {"start_hour": 20, "end_hour": 8}
    # EPOCH is midnight UTC: trace time 0 is 00:00, inside the window; it ends at 08:00, opens at 20:00.
    assert policy.in_night(EPOCH, night) and not policy.in_night(EPOCH + 9 * 3600, night)
    nodes = [TraceNode("n0", 8, "G")]
    quotas = {"d0/p00": {"G": 8000}}
    rules = {"night": {**night, "lend_limit_ratio": 0.5}}
    for t0, edges in ((0.0, [8 * 3600, 20 * 3600]), (8 * 3600, [20 * 3600, 32 * 3600])):
        jobs = [TraceJob("a", t0, 24 * 3600.0, 1, tenant="d0/p00")]  # the replay's horizon: t0 + 24 h
        _opts, world = policy.world(jobs, nodes, quotas, rules, Options())
        assert [t for t, _ in world.changes] == edges
        lend = [lim[("d0/p00", "G")].lend_limit for lim in (world.limits, *(lim for _, lim in world.changes))]
        assert lend == ([4000, None, 4000] if t0 == 0 else [None, 4000, None])  # inside, out, in again


def _pool():
    # Two projects of one department on one 8-GPU node; p00 is busy, p01 idle (its quota 4).
    nodes = [TraceNode("n0", 8, "G")]
    jobs = [TraceJob(f"a{i}", float(i), 3600.0, 4, tenant="d0/p00") for i in range(2)]
    jobs += [TraceJob("b0", 7200.0, 60.0, 4, tenant="d0/p01")]
    return jobs, nodes


def test_a_lend_limit_of_zero_stops_borrowing_in_the_replay():
    jobs, nodes = _pool()
    quotas = {"d0/p00": {"G": 4000}, "d0/p01": {"G": 4000}}
    opts, world = policy.world(jobs, nodes, quotas, {}, Options(detail=True))
    free = simulate(jobs, nodes, None, opts, world=world)
    assert free["job_queue_delay_s"]["a1"] == pytest.approx(0.0, abs=1.01)  # borrowed p01's idle half
    opts, world = policy.world(jobs, nodes, quotas, {"lend_limit_ratio": 0.0}, Options(detail=True))
    held = simulate(jobs, nodes, None, opts, world=world)
    assert held["job_queue_delay_s"]["a1"] == pytest.approx(3600.0, abs=1.01)  # waits for a0
    assert held["window_idle_quota_reuse_ratio"] == 0.0 < free["window_idle_quota_reuse_ratio"]


def test_preempted_work_is_counted_as_lost_gpu_hours():
    jobs, nodes = _pool()
    quotas = {"d0/p00": {"G": 4000}, "d0/p01": {"G": 4000}}
    jobs = [j if j.job_id != "b0" else TraceJob("b0", 1800.0, 60.0, 4, tenant="d0/p01") for j in jobs]
    r = simulate(jobs, nodes, quotas, Options())  # b0 reclaims from a1 (on loan) after 1,800 s
    assert r["preemptions"] == 1
    assert r["preempted_gpu_hours_lost"] == pytest.approx(4 * (1800 - 1) / 3600, abs=0.01)
    assert simulate(jobs, nodes, quotas, Options(checkpointing=True))["preempted_gpu_hours_lost"] == 0.0



def _six_of_eight():
    # p00 runs 6 GPUs for an hour (2 above its quota of 4) while p01 (quota 4) idles until 7,200 s.
    nodes = [TraceNode("n0", 8, "G")]
    jobs = [TraceJob("a0", 0.0, 3600.0, 4, tenant="d0/p00"), TraceJob("a1", 0.0, 3600.0, 2, tenant="d0/p00"),
            TraceJob("b0", 7200.0, 60.0, 4, tenant="d0/p01")]
    return jobs, nodes, {"d0/p00": {"G": 4000}, "d0/p01": {"G": 4000}}


def test_reuse_is_also_judged_against_todays_quotas_when_a_policy_lowers_them():
    """Halving every project's quota leaves the schedule as it was (p00 borrows either way), so
    reuse against today's quotas is unchanged, while reuse against the run's own quotas doubles —
    the relabelling the objective must not reward (docs/advisor.md, "What reuse measures")."""
    jobs, nodes, quotas = _six_of_eight()
    exact = Options(detail=True, coalesce=0.0)
    opts, world = policy.world(jobs, nodes, quotas, {}, exact)
    today = simulate(jobs, nodes, None, opts, world=world)
    opts, world = policy.world(jobs, nodes, quotas, {"overcommit_ratio": 0.5}, exact)
    halved = simulate(jobs, nodes, None, opts, world=world)
    assert halved["job_queue_delay_s"] == today["job_queue_delay_s"] == {"a0": 0.0, "a1": 0.0, "b0": 0.0}
    own, judged = "window_idle_quota_reuse_ratio", "window_idle_quota_reuse_ratio_today_quotas"
    # today: for 3,600 s of the 7,200 s window 2 of p01's 4 idle GPUs are used, then none of 8
    assert today[own] == today[judged] == pytest.approx(2 * 3600 / (4 * 3600 + 8 * 3600))
    assert halved[judged] == pytest.approx(today[own])
    # halved quotas (2 + 2): p00 is 4 above its quota, p01's 2 idle GPUs are all used
    assert halved[own] == pytest.approx(2 * 3600 / (2 * 3600 + 4 * 3600))
    assert halved["idle_quota_reuse_ratio_today_quotas"] == pytest.approx(today["idle_quota_reuse_ratio"])


def test_the_no_wait_yardstick_equals_a_replay_in_which_no_job_waited():
    from jobs.whatif.advisor.scenario import no_wait_reuse

    jobs, nodes, quotas = _six_of_eight()
    opts, world = policy.world(jobs, nodes, quotas, {}, Options(detail=True, coalesce=0.0))
    replayed = simulate(jobs, nodes, None, opts, world=world)
    assert max(replayed["job_queue_delay_s"].values()) == 0.0
    assert no_wait_reuse(jobs, nodes, quotas) == pytest.approx(replayed["window_idle_quota_reuse_ratio"])
    # when a job waits (no room for c0 until 3,600 s), the yardstick counts it from its submit
    late = [*jobs, TraceJob("c0", 1.0, 3600.0, 4, tenant="d0/p00")]
    opts, world = policy.world(late, nodes, quotas, {}, Options(detail=True, coalesce=0.0))
    waited = simulate(late, nodes, None, opts, world=world)
    assert waited["job_queue_delay_s"]["c0"] == 3599.0
    assert no_wait_reuse(late, nodes, quotas) > waited["window_idle_quota_reuse_ratio"]
