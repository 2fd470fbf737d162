"""SPEC ``loans``, ``windows`` and limit objects (issue 25 item 1): the replay honours them through
the portal's own effective-limit rules (``quotas.effective``), fed to the engine as limit changes
on the virtual clock. Pure: no database.

The pool: one node of 16 GPUs (C = 16); departments a and b hold 8 each (one project each).
b lends nothing by day (``lend_limit`` 0), so a's second 8-GPU job cannot borrow b's idle 8 —
until b lends them by a loan or a night window."""

import json

import pytest
from django.core.management import call_command

from jobs.whatif.replay import limits
from jobs.whatif.replay.sim import Options, simulate
from jobs.whatif.replay.spec import load_spec
from jobs.whatif.replay.trace import TraceJob, TraceNode

F = "F"
NODE = [TraceNode("n0", 16, F)]
ORIGIN = "2026-11-02T18:00:00+08:00"  # a Monday, 18:00 in Shanghai
JOBS = [TraceJob("a1", 0, 9000, 8, tenant="a/p"), TraceJob("a2", 10, 100, 8, tenant="a/p")]


def spec(**more) -> dict:
    return {
        "origin": ORIGIN,
        "zone": "Asia/Shanghai",
        "nodes": [{"flavor": F, "count": 1, "gpus_per_node": 16}],
        "quotas": {"a": {F: 8}, "a/p": {F: 8}, "b": {F: {"quota": 8, "lend_limit": 0}}, "b/q": {F: 8}},
        **more,
    }


def delays(data: dict) -> dict:
    world = limits.world(data, {j.tenant for j in JOBS}, 10000)
    return simulate(JOBS, NODE, None, Options(detail=True), world=world)["job_queue_delay_s"]


def test_without_loan_or_window_the_borrower_waits_for_its_own_quota():
    assert delays(spec()) == {"a1": 0, "a2": 8990}  # a2 starts when a1 ends at 9000


def test_a_loan_raises_the_borrowers_quota_while_it_is_active():
    loan = {"lender": "b", "borrower": "a", "flavor": F, "amount": 8, "start_s": 600, "end_s": 3600}
    # From 600 s b's quota is 0 (a's 16): b holds nothing back, so a2 — beyond a/p's own quota of
    # 8, on loan — fits (8 + 8 + hold 0 ≤ 16); before, b held its idle 8 back (8 + 8 + 8 > 16).
    assert delays(spec(loans=[loan])) == {"a1": 0, "a2": 590}


def test_a_night_window_opens_the_lenders_idle_quota_at_its_start():
    night = {
        "tenant": "b",
        "flavor": F,
        "weekdays": list(range(7)),
        "start": "20:00",
        "end": "08:00",
        "lend_limit": 8,
    }
    assert delays(spec(windows=[night])) == {"a1": 0, "a2": 7190}  # 20:00 = 7200 s after 18:00


def test_limit_changes_follow_the_portals_effective_limits():
    night = {"tenant": "b", "flavor": F, "weekdays": [0], "start": "20:00", "end": "08:00", "lend_limit": 8}
    loan = {"lender": "b", "borrower": "a", "flavor": F, "amount": 2, "start_s": -60, "end_s": 1800}
    world = limits.world(spec(windows=[night], loans=[loan]), {"a/p"}, 2 * 86400)
    first = world.limits
    assert (first[("a", F)].quota, first[("b", F)].quota, first[("b", F)].lend_limit) == (10000, 6000, 0)
    times = [t for t, _lim in world.changes]
    # loan ends at 1800; Monday's window opens at 20:00 (7200) and closes Tuesday 08:00 (50400);
    # Tuesday's 20:00 opens nothing (the window is Mondays only)
    assert times == [1800, 7200, 50400]
    assert world.changes[1][1][("b", F)].lend_limit == 8000


def test_plain_quotas_keep_the_old_replay():
    assert not limits.needs_world({"quotas": {"a/p": {F: 8}}})
    assert limits.needs_world({"quotas": {"a/p": {F: {"quota": 8, "borrow_limit": 0}}}})
    assert limits.needs_world({"quotas": {}, "loans": [{}]})


@pytest.mark.parametrize(
    "bad, message",
    [
        (
            {
                "origin": None,
                "loans": [
                    {"lender": "b", "borrower": "a", "flavor": F, "amount": 1, "start_s": 0, "end_s": 1}
                ],
            },
            "origin",
        ),
        ({"zone": "Mars/Olympus"}, "zone"),
        ({"origin": "2026-11-02T18:00:00"}, "UTC offset"),
        (
            {
                "loans": [
                    {"lender": "b", "borrower": "a", "flavor": F, "amount": 1, "start_s": 10, "end_s": 10}
                ]
            },
            "end_s",
        ),
        (
            {
                "loans": [
                    {"lender": "b", "borrower": "a", "flavor": F, "amount": -1, "start_s": 0, "end_s": 10}
                ]
            },
            "≥ 0",
        ),
        (
            {"windows": [{"tenant": "b", "flavor": F, "weekdays": [7], "start": "20:00", "end": "08:00"}]},
            "weekdays",
        ),
        ({"windows": [{"tenant": "b", "flavor": F, "start": "25:00", "end": "08:00"}]}, "time of day"),
        ({"windows": [{"tenant": "zz", "flavor": F, "start": "20:00", "end": "08:00"}]}, "zz"),
        ({"loans": [{"lender": "b", "flavor": F, "amount": 1, "start_s": 0, "end_s": 10}]}, "borrower"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_field(bad, message):
    with pytest.raises(ValueError, match=message):
        limits.world(spec(**bad), {"a/p"}, 100)


def _replay_with_a_loan(tmp_path, *flags: str) -> dict:
    """``manage.py replay`` of a1 (8 GPUs, 9,000 s) and a2 (8 GPUs at 10 s) with a loan of 8 GPUs
    to ``a`` from 600 s to 3,600 s."""
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,tenant\na1,0,9000,8,a/p\na2,10,100,8,a/p\n")
    loan = {"lender": "b", "borrower": "a", "flavor": F, "amount": 8, "start_s": 600, "end_s": 3600}
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps(spec(loans=[loan])))
    out = tmp_path / "result.json"
    call_command("replay", str(trace), "--cluster", str(cluster), "--out", str(out), "--quiet", *flags)
    return json.loads(out.read_text())


def test_replay_command_reads_windows_and_loans(tmp_path):
    result = _replay_with_a_loan(tmp_path)
    assert result["avg_queue_delay_s"] == 295  # (0 + 590) / 2, as with the loan above


def test_exported_nodes_keep_their_topology(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(
        json.dumps(
            {
                "nodes": [
                    {
                        "name": "c1/g0",
                        "flavor": F,
                        "gpus_per_node": 8,
                        "zone": "z1",
                        "spine": "s1",
                        "leaf": "l0",
                    },
                    {
                        "name": "c1/g1",
                        "flavor": F,
                        "gpus_per_node": 8,
                        "zone": "z1",
                        "spine": "s1",
                        "leaf": "l1",
                    },
                ]
            }
        )
    )
    nodes, quotas = load_spec(path)
    assert [(n.name, n.leaf, n.spine) for n in nodes] == [("c1/g0", "l0", "s1"), ("c1/g1", "l1", "s1")]
    assert quotas is None


def test_replay_command_mirrors_a_backend_start_latency(tmp_path):
    result = _replay_with_a_loan(tmp_path, "--start-latency", "5", "--period", "5")
    # each job starts 5 s after its admission: a1 at 5, a2 at 605
    assert result["avg_queue_delay_s"] == 300


def test_replay_command_refuses_a_negative_period(tmp_path):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="--period"):
        call_command("replay", str(tmp_path / "t.csv"), "--period", "-1")


def test_a_window_long_after_the_last_submission_still_applies(tmp_path):
    """A 16-GPU job of a (quota 8) waits for b's idle 8 until the night window lends them: the
    limit change at 20:00 lies far beyond the trace's last submit + duration (110 s)."""
    jobs = [TraceJob("big", 10, 100, 16, tenant="a/p")]
    night = {"tenant": "b", "flavor": F, "start": "20:00", "end": "08:00", "lend_limit": 8}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(spec(windows=[night])))
    result = simulate(jobs, NODE, None, Options(detail=True), world=limits.load_world(path, jobs))
    assert result["job_queue_delay_s"] == {"big": 7190}
    assert result["makespan_s"] == 7300 - 10  # later limit changes start nothing and do not count
