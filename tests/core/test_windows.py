"""Reservations, maintenance windows and queue holds in the pure engine (issue 35 item 6, DESIGN
§17): a job whose maximum runtime crosses a maintenance start is not placed on those nodes but may
go elsewhere, and explain says so; a reserved count is not given to another project during the
window while its owner may use it; backfill respects both; a held queue admits nothing."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from coresnap import NOW, cluster, queued, running, snapshot, tree

from jobs.scheduler.scheduler import Engine, Window, schedule

H = 3600
TL = tree({"D": (64, {"p": 32, "q": 32})})
MAINT = Window("m1", NOW + timedelta(hours=2), NOW + timedelta(hours=4), nodes=("n000",))


def _count(wid: str, *, start_h: int = -1) -> Window:
    """8 GPUs of A100 reserved for project p from ``start_h`` hours to 5 h from now."""
    return Window(wid, NOW + timedelta(hours=start_h), NOW + timedelta(hours=5), project_id="p",
                  flavor="A100", gpus=8)


def _placed(result) -> dict[str, set[str]]:
    return {a.job_id: {node for worker in a.placement for node, _, _ in worker} for a in result.admissions}


def test_a_job_crossing_a_maintenance_start_goes_elsewhere_or_waits_and_explain_says_so():
    jobs = [queued("long1", "q", 8, runtime=4 * H, age_s=300),
            queued("long2", "q", 8, runtime=4 * H, age_s=200)]
    result = schedule(snapshot(cluster(2), TL, (), jobs, windows=(MAINT,)))
    assert _placed(result) == {"long1": {"n001"}}
    e = result.explanations["long2"]
    assert e.reason == "maintenance" and e.window == MAINT
    assert "not placed on n000: its maximum runtime crosses the maintenance at" in e.message


def test_a_job_that_ends_before_the_maintenance_and_a_job_without_a_limit():
    short = queued("short", "q", 8, runtime=2 * H, age_s=300)  # ends exactly at the start: allowed
    unlimited = queued("unlimited", "q", 8, runtime=None, age_s=200)
    other = queued("other", "q", 8, runtime=None, age_s=100)
    result = schedule(snapshot(cluster(2), TL, (), [short, unlimited, other], windows=(MAINT,)))
    placed = _placed(result)
    assert placed["unlimited"] == {"n001"} and placed["short"] == {"n000"}
    assert "other" not in placed and result.explanations["other"].reason in {"maintenance", "capacity"}


def test_a_maintenance_that_is_over_or_for_no_node_of_the_pool_bars_nothing():
    over = Window("old", NOW - timedelta(hours=4), NOW - timedelta(hours=1), nodes=("n000", "n001"))
    jobs = [queued(f"j{i}", "q", 8, runtime=10 * H, age_s=100 - i) for i in range(2)]
    assert set(_placed(schedule(snapshot(cluster(2), TL, (), jobs, windows=(over,))))) == {"j0", "j1"}


def test_named_nodes_reserved_for_a_project_are_its_own_and_nobody_else_s():
    resv = Window("r1", NOW - timedelta(hours=1), NOW + timedelta(hours=5), project_id="p", nodes=("n000",))
    jobs = [queued("q1", "q", 8, runtime=H, age_s=400), queued("q2", "q", 8, runtime=H, age_s=300),
            queued("p1", "p", 8, runtime=10 * H, age_s=100)]
    result = schedule(snapshot(cluster(2), TL, (), jobs, windows=(resv,)))
    assert _placed(result) == {"q1": {"n001"}, "p1": {"n000"}}
    result = schedule(snapshot(cluster(2), TL, (), jobs[:2], windows=(resv,)))
    assert _placed(result) == {"q1": {"n001"}}
    e = result.explanations["q2"]
    assert e.reason == "reserved" and e.node_id is None  # the other project is not named to it
    assert "not placed on n000: its maximum runtime crosses another project's reservation" in e.message


def test_a_reserved_count_is_not_given_to_another_project_during_the_window():
    resv = _count("r2")
    jobs = [queued(f"q{i}", "q", 4, runtime=H, age_s=500 - i) for i in range(4)]
    result = schedule(snapshot(cluster(2), TL, (), jobs, windows=(resv,)))
    assert set(_placed(result)) == {"q0", "q1"}  # 16 GPUs, 8 held for p
    e = result.explanations["q2"]
    assert e.reason == "reserved" and dict(e.numbers)["reserved"] == 8000
    # The owner may use it: with p's jobs queued too, p gets its 8 GPUs.
    mine = [queued("p1", "p", 4, runtime=H, age_s=10), queued("p2", "p", 4, runtime=H, age_s=5)]
    result = schedule(snapshot(cluster(2), TL, (), [*jobs, *mine], windows=(resv,)))
    assert {"p1", "p2"} <= set(_placed(result))
    assert sum(1 for j in _placed(result) if j.startswith("q")) == 2


def test_what_the_owner_already_uses_counts_against_its_reserved_count():
    resv = _count("r3")
    run = [running("p0", "p", "n000", 8)]
    jobs = [queued("q1", "q", 8, runtime=H)]
    assert set(_placed(schedule(snapshot(cluster(2), TL, run, jobs, windows=(resv,))))) == {"q1"}


def test_a_future_reservation_holds_only_against_jobs_that_would_still_run_at_its_start():
    resv = _count("r4", start_h=3)
    short = [queued("s1", "q", 8, runtime=2 * H, age_s=20), queued("s2", "q", 8, runtime=2 * H, age_s=10)]
    assert set(_placed(schedule(snapshot(cluster(2), TL, (), short, windows=(resv,))))) == {"s1", "s2"}
    long = [queued("l1", "q", 8, runtime=4 * H, age_s=20), queued("l2", "q", 8, runtime=4 * H, age_s=10)]
    assert set(_placed(schedule(snapshot(cluster(2), TL, (), long, windows=(resv,))))) == {"l1"}


def test_backfill_respects_the_maintenance():
    """A blocked head holds a reservation; a job behind it that would fit now on the node under
    maintenance is not backfilled there when it would cross the start, one that ends before is."""
    nodes = cluster(3)
    run = [running("r1", "q", "n001", 8, age_s=H, runtime=2 * H)]  # ends at NOW + 1 h
    head = queued("head", "p", 8, workers=2, runtime=10 * H, age_s=900)
    crossing = queued("crossing", "q", 8, runtime=3 * H, age_s=500)
    before = queued("before", "q", 8, runtime=H + H // 2, age_s=400)
    snap = snapshot(nodes, TL, run, [head, crossing, before], windows=(MAINT,))
    for engine_result in (schedule(snap), Engine(snap).cycle()):
        placed = _placed(engine_result)
        assert placed == {"before": {"n000"}}
        assert "n000" not in engine_result.reservations[0].nodes
        assert engine_result.explanations["crossing"].reason in {"maintenance", "reservation"}


def test_backfill_respects_a_reserved_count():
    """A head another project's reserved count holds back is planned after the window: short
    jobs are backfilled around it, never into the held GPUs, and the owner keeps its GPUs."""
    resv = _count("r5")
    run = [running("r1", "q", "n001", 8, age_s=H, runtime=2 * H)]
    head = queued("head", "q", 8, workers=2, runtime=10 * H, age_s=900)
    smalls = [queued(f"s{i}", "q", 4, runtime=H // 2, age_s=500 - i) for i in range(3)]
    result = schedule(snapshot(cluster(3), TL, run, [head, *smalls], windows=(resv,)))
    placed = _placed(result)
    assert "head" not in placed and result.reservations[0].job_id == "head"
    assert result.reservations[0].earliest_start == resv.end
    # 16 GPUs free, 8 held for p: two 4-GPU jobs of q are backfilled, the third is not.
    assert set(placed) == {"s0", "s1"} and result.explanations["s2"].reason in {"reserved", "reservation"}
    # The owner's job takes its 8 (the head, no longer held back, then waits only for r1).
    mine = queued("p1", "p", 8, runtime=H, age_s=100)
    result = schedule(snapshot(cluster(3), TL, run, [head, *smalls, mine], windows=(resv,)))
    assert "p1" in _placed(result) and "head" not in _placed(result)


def test_a_held_queue_admits_nothing_and_explain_says_queue_on_hold():
    jobs = [queued("p1", "p", 1), queued("q1", "q", 1)]
    result = schedule(snapshot(cluster(1), TL, (), jobs, queues_held=frozenset({"p"})))
    assert set(_placed(result)) == {"q1"}
    e = result.explanations["p1"]
    assert e.reason == "queue_hold" and e.node_id == "p" and "queue on hold" in e.message
    result = schedule(snapshot(cluster(1), TL, (), jobs, queues_held=frozenset({"D"})))
    assert _placed(result) == {} and result.explanations["q1"].node_id == "D"


def _elastic(runtime):
    """Elastic job e of q: 2 workers of 1 GPU on n000 (of 4), target 6; started 1 h ago."""
    job = running("e", "q", "n000", 2, age_s=H, runtime=runtime)
    return replace(job, worker_milli=1000, grow_to=6)


def test_the_grow_pass_respects_a_maintenance_its_new_workers_would_cross():
    maint = Window("m2", NOW + timedelta(hours=2), NOW + timedelta(hours=3), nodes=("n001",))
    nodes = cluster(2, per_node=4)
    grown = {g.job_id: g.workers for g in schedule(snapshot(nodes, TL, [_elastic(None)])).growths}
    assert grown == {"e": 6}  # without the maintenance: n000's 2 free GPUs and n001's
    result = schedule(snapshot(nodes, TL, [_elastic(None)], windows=(maint,)))
    assert {g.job_id: g.workers for g in result.growths} == {"e": 4}
    assert all(node == "n000" for g in result.growths for w in g.added for node, _, _ in w)
    # A job that ends (in 1 h) before the maintenance starts grows onto n001 too.
    ending = schedule(snapshot(nodes, TL, [_elastic(2 * H)], windows=(maint,)))
    assert {g.job_id: g.workers for g in ending.growths} == {"e": 6}


def test_a_warm_engine_applies_windows_by_its_clock():
    """The windows are compared with the cycle's ``now``: once the maintenance is over, the same
    engine places the job it held back; a cold engine at that instant decides the same."""
    both = Window("m3", NOW + timedelta(hours=1), NOW + timedelta(hours=2), nodes=("n000", "n001"))
    job = queued("j", "q", 8, runtime=4 * H)
    snap = snapshot(cluster(2), TL, (), [job], windows=(both,))
    engine = Engine(snap)
    assert engine.cycle().admissions == () and engine.state.windows
    later = NOW + timedelta(hours=2)
    assert [a.job_id for a in engine.cycle(later).admissions] == ["j"]
    cold = schedule(snapshot(cluster(2), TL, (), [job], windows=(both,), now=later))
    assert [a.job_id for a in cold.admissions] == ["j"]
