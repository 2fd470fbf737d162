"""A replay ``policy`` on top of a recorded world (issue 25: the advisor searching the centre's own
history). At every instant the limits the SPEC has in force (windows, loans, limit objects) are
transformed by the policy; its night window's edges are merged with the SPEC's. Pure: no database
(except the command test, which reads files only)."""

import json
from dataclasses import replace

from django.core.management import call_command

from jobs.scheduler.scheduler import Limits
from jobs.whatif.replay import limits
from jobs.whatif.replay.sim import Options, project_quotas, simulate
from jobs.whatif.replay.trace import TraceJob, TraceNode

F = "F"
NODE = [TraceNode("n0", 16, F)]
ORIGIN = "2026-11-02T18:00:00+08:00"  # a Monday, 18:00 in Shanghai
JOBS = [TraceJob("a1", 0, 9000, 8, tenant="a/p"), TraceJob("a2", 10, 100, 8, tenant="a/p"),
        TraceJob("b1", 20, 600, 4, tenant="b/q")]
TENANTS = {"a/p", "b/q"}
# b lends nothing by day; Mondays from 20:00 to 08:00 it lends 8 (a history's quota window);
# b/q lends a/p 2 GPUs from 600 s to 3,600 s (a project loan); a/p has its own borrow limit 4.
NIGHT = {"tenant": "b", "flavor": F, "weekdays": [0], "start": "20:00", "end": "08:00", "lend_limit": 8}
LOAN = {"lender": "b/q", "borrower": "a/p", "flavor": F, "amount": 2, "start_s": 600, "end_s": 3600}


def spec(**more) -> dict:
    return {
        "origin": ORIGIN, "zone": "Asia/Shanghai",
        "nodes": [{"flavor": F, "count": 1, "gpus_per_node": 16}],
        "quotas": {"a": {F: 8}, "a/p": {F: {"quota": 8, "borrow_limit": 4}},
                   "b": {F: {"quota": 8, "lend_limit": 0}}, "b/q": {F: 8}},
        "windows": [NIGHT], "loans": [LOAN], **more,
    }


TODAY = {"overcommit_ratio": 1.0, "grace_s": 0, "backfill": True, "packing": "fragmentation_aware"}


def test_without_a_policy_the_new_path_is_todays_replay():
    before = limits.world(spec(), TENANTS, 2 * 86400)
    for rules in ({}, TODAY):  # the advisor's candidate 0 is TODAY
        after = limits.world(spec(), TENANTS, 2 * 86400, rules)
        # … judging reuse against the recorded quotas, which are the same as its own here
        assert after.reference_quotas == project_quotas(before.tree, before.limits)
        assert replace(after, reference_quotas=None) == before
        assert _figures(simulate(JOBS, NODE, None, Options(detail=True), world=after)) == \
            _figures(simulate(JOBS, NODE, None, Options(detail=True), world=before))


def _figures(result: dict) -> dict:
    """A replay's result without its wall time (the machine's, not the replay's)."""
    return {k: v for k, v in result.items() if k != "wall_seconds"}


def test_reuse_is_judged_against_the_recorded_quotas_under_an_overcommit():
    before = limits.world(spec(), TENANTS, 2 * 86400)
    halved = limits.world(spec(), TENANTS, 2 * 86400, {"overcommit_ratio": 0.5})
    recorded = project_quotas(before.tree, before.limits)
    assert halved.reference_quotas == recorded
    assert project_quotas(halved.tree, halved.limits) != recorded


def _at(world, t):
    out = world.limits
    for at, lim in world.changes:
        if at <= t:
            out = lim
    return out


def test_overcommit_limits_and_night_on_a_loan_and_a_window():
    rules = {"overcommit_ratio": 0.5, "lend_limit_ratio": 0.5,
             "night": {"start_hour": 22, "end_hour": 6, "lend_limit_ratio": 1.0}}
    world = limits.world(spec(), TENANTS, 2 * 86400, rules)
    # loan 600–3600; SPEC window Mon 20:00 (7200) – Tue 08:00 (50400); policy night 22:00 (14400)
    # – 06:00 (43200) every day in the zone, again Tue 22:00 (100800) – Wed 06:00 (129600).
    # Tuesday 20:00 / 08:00 Wednesday (the SPEC window is Mondays only) change nothing: left out.
    assert [t for t, _ in world.changes] == [600, 3600, 7200, 14400, 43200, 50400, 100800, 129600]
    ap, bq, a, b = (("a/p", F), ("b/q", F), ("a", F), ("b", F))
    day = _at(world, 0)
    # projects: quota × 0.5; lend = 0.5 × the new quota; a/p's own borrow limit kept (no ratio given)
    assert day[ap] == Limits(4000, 4000, 2000) and day[bq] == Limits(4000, None, 2000)
    assert day[a] == Limits(8000) and day[b] == Limits(8000, None, 0)  # departments keep theirs
    loan = _at(world, 600)  # the loan moves 2 GPUs before the policy scales them: 10 × 0.5, 6 × 0.5
    assert loan[ap] == Limits(5000, 4000, 2500) and loan[bq] == Limits(3000, None, 1500)
    assert _at(world, 3600) == day
    assert _at(world, 7200)[b] == Limits(8000, None, 8000)  # the SPEC's window opens b
    dark = _at(world, 14400)  # the policy's night: lend ratio 1
    assert dark[ap] == Limits(4000, 4000, 4000) and dark[b] == Limits(8000, None, 8000)
    assert _at(world, 43200)[ap] == Limits(4000, 4000, 2000)  # 06:00: policy night over
    assert _at(world, 50400) == day  # 08:00: SPEC window closed
    assert _at(world, 100800) == {**day, ap: Limits(4000, 4000, 4000), bq: Limits(4000, None, 4000)}


def test_a_ratio_given_replaces_the_historys_limit_and_null_removes_it():
    world = limits.world(spec(loans=[]), TENANTS, 86400, {"borrow_limit_ratio": None, "lend_limit_ratio": 0})
    assert world.limits[("a/p", F)] == Limits(8000, None, 0)
    kept = limits.world(spec(loans=[]), TENANTS, 86400, {"overcommit_ratio": 2})
    assert kept.limits[("a/p", F)] == Limits(16000, 4000, None)


def test_the_command_replays_a_history_with_a_policy(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,workers\n"
                     + "".join(f"{j.job_id},{j.submit_time},{j.duration},{j.num_gpus},,{F},{j.tenant},,,\n"
                               for j in JOBS))
    (tmp_path / "cluster.json").write_text(json.dumps(spec()))
    (tmp_path / "p.json").write_text(json.dumps({"policy": {"overcommit_ratio": 0.5, "grace_s": 7,
                                                            "night": {"start_hour": 22, "end_hour": 6}}}))

    def replay(*extra):
        call_command("replay", "--trace", str(trace), "--cluster", str(tmp_path / "cluster.json"), "--quiet",
                     "--out", str(tmp_path / "out.json"), *extra)
        return json.loads((tmp_path / "out.json").read_text())

    plain, ruled = replay(), replay("--policy-file", str(tmp_path / "p.json"))
    assert "policy_rules" not in plain and ruled["policy_rules"]["overcommit_ratio"] == 0.5
    assert ruled["grace_s"] == 7 and ruled["finished"] == plain["finished"] == 3
    # a/p's quota is 4 under the policy: a1 (8 GPUs) runs on borrowed quota, b1 still fits
    assert ruled["tenants"]["a/p"]["quota_gpus"] != plain["tenants"]["a/p"]["quota_gpus"]
