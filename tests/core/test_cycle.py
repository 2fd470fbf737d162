"""DESIGN §5 cycle rules: ordering, elastic, EASY backfill, budget holds, explain, engine."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest
from coresnap import NOW, cluster, limits, queued, running, snapshot, tree

from jobs.scheduler.scheduler import Engine, Snapshot, schedule


def admitted(result) -> list[str]:
    return [a.job_id for a in result.admissions]


# -- 5.1 ordering --------------------------------------------------------------------------
@pytest.mark.parametrize(("jobs", "first"), [
    # (id, project, priority, age) competing for one 8-GPU node; one wins
    ([("lo", "a", 100, 900), ("hi", "b", 500, 10)], "hi"),  # priority first
    ([("old", "a", 100, 900), ("new", "b", 100, 10)], "old"),  # then (equal share) submit
    ([("j2", "a", 100, 60), ("j1", "b", 100, 60)], "j1"),  # then id
])
def test_order_priority_then_submit_time_then_id(jobs, first):
    tl = tree({"D": (16, {"a": 8, "b": 8})})
    queue = [queued(j, p, 8, priority=pr, age_s=age) for j, p, pr, age in jobs]
    assert admitted(schedule(snapshot(cluster(1), tl, [], queue))) == [first]


def test_order_lowest_dominant_share_first():
    """b uses 4 of 8 (share .5), a uses 4 of 16 (.25): a's later job goes first."""
    tl = tree({"D": (24, {"a": 16, "b": 8})})
    run = [running("ra", "a", "n000", 4), running("rb", "b", "n000", 4, first_gpu=4)]
    queue = [queued("b1", "b", 8, age_s=900), queued("a1", "a", 8, age_s=10)]
    assert admitted(schedule(snapshot(cluster(2), tl, run, queue))) == ["a1"]


def test_dominant_share_is_the_max_across_flavors():
    """a is light on A100 but heavy on H800: its dominant share is the H800 one."""
    tl, lims = tree({"D": (32, {"a": 16, "b": 16})})  # both jobs in quota: no reclaim
    lims = {**lims, ("a", "H800"): limits(1), ("b", "H800"): limits(8)}
    nodes = cluster(2) + cluster(1, flavor="H800", prefix="h")
    run = [running("ha", "a", "h000", 1, flavor="H800"), running("rb", "b", "n000", 4)]
    queue = [queued("a1", "a", 8, age_s=900), queued("b1", "b", 8, age_s=10)]
    snap = snapshot(nodes, (tl, lims), run, queue)
    result = schedule(snap)
    assert admitted(result) == ["b1"]  # a: max(0/16, 1/1) = 1 > b: 4/16


def test_fair_share_alternates_tenants_within_a_cycle():
    tl = tree({"D": (16, {"a": 8, "b": 8})})
    queue = [queued(f"a{k}", "a", 2, age_s=100 - k) for k in range(4)]
    queue += [queued(f"b{k}", "b", 2, age_s=50 - k) for k in range(4)]
    order = admitted(schedule(snapshot(cluster(1), tl, [], queue)))
    assert order == ["a0", "b0", "a1", "b1"]


# -- 5.3/5.4 gangs and elastic jobs ---------------------------------------------------------
def test_gang_is_admitted_all_or_nothing():
    tl = tree({"D": (32, {"a": 32})})
    run = [running("r", "a", "n000", 4)]
    result = schedule(snapshot(cluster(2), tl, run, [queued("g", "a", 8, workers=2)]))
    assert admitted(result) == []
    assert result.explanations["g"].reason in {"capacity", "placement"}


def test_elastic_job_starts_at_largest_worker_count_that_fits():
    tl = tree({"D": (32, {"a": 32})})
    run = [running("r", "a", "n000", 4)]
    job = queued("e", "a", 4, workers=6, min_workers=2)
    result = schedule(snapshot(cluster(2), tl, run, [job]))
    assert [(a.job_id, a.workers) for a in result.admissions] == [("e", 3)]
    assert len(result.admissions[0].placement) == 3


def test_elastic_job_is_sized_by_quota_too():
    tl = tree({"D": (32, {"a": (8, 0, None)})})  # a never borrows: 8 GPUs max
    job = queued("e", "a", 2, workers=6, min_workers=1)
    result = schedule(snapshot(cluster(2), tl, [], [job]))
    assert result.admissions[0].workers == 4


# -- 5.2 EASY backfill ---------------------------------------------------------------------
def backfill_case(short_runtime: int, **kw):
    """One 8-GPU node used 4 GPUs until +1h; a 8-GPU head waits for it; a 4-GPU job after."""
    tl = tree({"D": (64, {"a": 32, "b": 32, "c": 32})})
    run = [running("r", "c", "n000", 4, age_s=0, runtime=3600)]
    queue = [queued("head", "a", 8, age_s=100, runtime=7200),
             queued("small", "b", 4, age_s=10, runtime=short_runtime)]
    return schedule(snapshot(cluster(1), tl, run, queue), **kw)


def test_easy_backfill_reserves_for_the_blocked_head():
    result = backfill_case(7200)
    assert [r.job_id for r in result.reservations] == ["head"]
    assert result.reservations[0].earliest_start == NOW + timedelta(hours=1)
    assert result.reservations[0].nodes == ("n000",)
    assert admitted(result) == []  # small would still run at +1h: it would delay head
    assert result.explanations["small"].reason == "reservation"
    assert result.explanations["head"].reservation is not None


def test_backfill_only_where_it_does_not_delay_the_reservation():
    assert admitted(backfill_case(1800)) == ["small"]  # done before the head can start
    assert admitted(backfill_case(3600)) == ["small"]  # exactly at the start is fine
    assert admitted(backfill_case(3601)) == []


def test_backfill_off_keeps_strict_order():
    result = backfill_case(1800, backfill=False)
    assert admitted(result) == [] and result.reservations == ()
    assert result.explanations["small"].reason == "reservation"


def test_each_priority_level_gets_its_own_reservation():
    tl = tree({"D": (64, {"a": 32, "b": 32})})
    run = [running("r", "a", "n000", 6, age_s=0, runtime=3600, preemptible=False),
           running("s", "b", "n001", 6, age_s=0, runtime=1800, preemptible=False)]
    queue = [queued("hi", "a", 8, priority=500, runtime=600),
             queued("lo", "b", 8, priority=100, runtime=600)]
    result = schedule(snapshot(cluster(2), tl, run, queue))
    got = {r.job_id: (r.nodes, r.earliest_start) for r in result.reservations}
    assert got["hi"] == (("n001",), NOW + timedelta(seconds=1800))
    # hi holds n001 from +30 min for its 10 min: lo's earliest is n001 again at +40 min
    assert got["lo"] == (("n001",), NOW + timedelta(seconds=2400))


def test_job_without_max_runtime_never_backfills_onto_a_reservation():
    assert admitted(backfill_case(None)) == []


# -- budget holds --------------------------------------------------------------------------
def test_budget_holds_non_approved_jobs_of_over_budget_tenants():
    tl = tree({"D": (16, {"a": 8, "b": 8})})
    queue = [queued("x", "a", 1), queued("y", "a", 1, approved=True), queued("z", "b", 1)]
    result = schedule(snapshot(cluster(1), tl, [], queue, over_budget_tenants=frozenset({"D"})))
    assert admitted(result) == ["y"]
    assert result.explanations["x"].reason == "budget"
    assert result.explanations["x"].node_id == "D"


# -- explain -------------------------------------------------------------------------------
def test_explain_names_position_blocking_level_and_holders():
    tl = tree({"A": (8, {"a": 8}), "B": (0, {"b": 0})})
    run = [running("b1", "b", "n000", 8, priority=500, preemptible=False)]  # on loan
    queue = [queued("a1", "a", 8, workers=2, age_s=20), queued("a2", "a", 9, age_s=10)]
    result = schedule(snapshot(cluster(1), tl, run, queue))
    # a1 is in quota for 8 but asks 16 (not in quota); a2 cannot fit any node
    assert admitted(result) == []
    assert result.explanations["a1"].position == 1
    assert result.explanations["a2"].reason == "invalid"
    in_quota = queued("a3", "a", 8)
    result = schedule(snapshot(cluster(1), tl, [replace(run[0], preemptible=True)],
                               [in_quota]))
    assert admitted(result) == ["a3"]  # reclaimed: preemptible or not, on loan is on loan


def test_explain_lists_on_loan_holders_of_what_an_in_quota_job_is_owed():
    # a is owed 8 but its 8 cannot be placed even after reclaim (2 nodes × 4 on loan, 8 wide)
    tl = tree({"A": (8, {"a": 8}), "B": (0, {"b": 0})})
    nodes = cluster(2, per_node=4)
    run = [running("b1", "b", "n000", 4), running("b2", "b", "n001", 4)]
    result = schedule(snapshot(nodes, tl, run, [queued("a1", "a", 8)]))
    why = result.explanations["a1"]
    assert why.reason == "invalid"  # no node has 8 GPUs
    result = schedule(snapshot(nodes, tl, run, [queued("a1", "a", 4, workers=2)]))
    assert admitted(result) == ["a1"]


def test_explanations_cover_exactly_the_waiting_jobs_with_positions():
    tl = tree({"D": (8, {"a": 8})})
    queue = [queued(f"j{k}", "a", 4, age_s=100 - k) for k in range(5)]
    result = schedule(snapshot(cluster(1), tl, [], queue))
    assert admitted(result) == ["j0", "j1"]
    assert sorted(result.explanations) == ["j2", "j3", "j4"]
    assert [result.explanations[j].position for j in ("j2", "j3", "j4")] == [1, 2, 3]


# -- preemption bookkeeping ----------------------------------------------------------------
def test_victims_gpus_are_not_handed_to_others_in_the_same_cycle():
    """a1 needs 4 of the 8 GPUs b2 frees; the other 4 stay b2's until it exits (grace)."""
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    run = [running("b1", "b", "n000", 8, age_s=7200), running("b2", "b", "n001", 8)]
    queue = [queued("a1", "a", 4, age_s=20), queued("a2", "a", 4, age_s=10)]
    result = schedule(snapshot(cluster(2), tl, run, queue))
    assert admitted(result) == ["a1"]
    assert [p.victim_id for p in result.preemptions] == ["b2"]


def test_terminating_jobs_keep_their_gpus_and_are_never_victims_again():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    run = [running("b1", "b", "n000", 8, age_s=7200),
           running("b2", "b", "n001", 8, terminating=True),
           running("a1", "a", "n001", 4, age_s=0)]  # admitted onto b2's GPUs last cycle
    result = schedule(snapshot(cluster(2), tl, run, [queued("a2", "a", 4)]))
    assert admitted(result) == [] and result.preemptions == ()
    assert "b2" not in result.on_loan
    run[1] = replace(run[1], terminating=False)
    run.pop()
    assert admitted(schedule(snapshot(cluster(2), tl, run, [queued("a2", "a", 4)]))) == ["a2"]


def test_borrowing_off_runs_in_quota_only():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    queue = [queued("a1", "a", 8, age_s=20), queued("a2", "a", 8, age_s=10)]
    result = schedule(snapshot(cluster(2), tl, [], queue), borrowing=False)
    assert admitted(result) == ["a1"]
    assert result.explanations["a2"].reason == "quota"


# -- determinism and the incremental engine ------------------------------------------------
def test_same_snapshot_same_decisions_whatever_the_input_order():
    tl = tree({"A": (16, {"a": 8, "a2": 8}), "B": (8, {"b": 8})})
    run = [running("r1", "a", "n000", 4), running("r2", "b", "n001", 2)]
    queue = [queued(f"q{k}", "ab"[k % 2] if k % 3 else "a2", 1 + k % 4, age_s=k % 5)
             for k in range(20)]
    snap = snapshot(cluster(4), tl, run, queue)
    base = schedule(snap)
    rng = random.Random(5)
    for _ in range(3):
        shuffled = Snapshot(snap.now, tuple(rng.sample(snap.nodes, len(snap.nodes))),
                            tuple(rng.sample(snap.tree, len(snap.tree))), snap.limits,
                            tuple(rng.sample(snap.running, len(snap.running))),
                            tuple(rng.sample(snap.queued, len(snap.queued))))
        again = schedule(shuffled)
        assert again.admissions == base.admissions
        assert again.preemptions == base.preemptions
        assert again.reservations == base.reservations
        assert dict(again.on_loan) == dict(base.on_loan)
        assert dict(again.explanations) == dict(base.explanations)


def test_engine_applies_decisions_and_deltas_between_cycles():
    tl = tree({"D": (16, {"a": 8, "b": 8})})
    queue = [queued("a1", "a", 8, runtime=60), queued("b1", "b", 8), queued("a2", "a", 8)]
    engine = Engine(snapshot(cluster(2), tl, [], queue))
    first = engine.cycle()
    assert admitted(first) == ["a1", "b1"]
    engine.finish(["a1"])
    second = engine.cycle(NOW + timedelta(seconds=60))
    assert admitted(second) == ["a2"]
    with pytest.raises(RuntimeError):
        dict(first.explanations)  # the engine has moved on


def test_elastic_job_takes_its_largest_size_even_on_loan():
    tl = tree({"D": (32, {"a": 4, "b": 28})})  # a: 4 in quota, may borrow idle capacity
    job = queued("e", "a", 2, workers=8, min_workers=1)
    result = schedule(snapshot(cluster(2), tl, [], [job]))
    assert [(a.workers, a.in_quota) for a in result.admissions] == [(8, False)]
