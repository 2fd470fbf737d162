"""Consolidation (issue 36 item 2, jobs/scheduler/engine/consolidate.py): worked examples and
property tests over random fragmented pools."""

from __future__ import annotations

from datetime import timedelta
from itertools import combinations

from coresnap import NOW, F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.scheduler.scheduler import (
    Consolidation,
    Limits,
    Node,
    PriorityClass,
    QueuedJob,
    RunningJob,
    Snapshot,
    TreeNode,
    schedule,
)

SETTINGS = settings(max_examples=300, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
TREE = (TreeNode("A", None, "department"), TreeNode("pa", "A"), TreeNode("B", None, "department"),
        TreeNode("pb", "B"))
MIN_RUNTIME = {50: 0, 100: 3600, 500: 600}
CLASSES = tuple(PriorityClass(f"c{v}", v, True, 30, m) for v, m in MIN_RUNTIME.items())


def nodes(n: int) -> tuple[Node, ...]:
    return tuple(Node(f"n{i}", F, 8, "z", "s0", f"l{i // 4}") for i in range(n))


def limits(qa: int, qb: int) -> dict:
    return {(t, F): Limits(q * 1000) for t, q in (("A", qa), ("pa", qa), ("B", qb), ("pb", qb))}


def run(jid, proj, node, gpus, *, milli=1000, prio=100, ckpt=True, age_h=2.0, preemptible=True):
    return RunningJob(jid, proj, F, prio, preemptible, NOW - timedelta(hours=age_h), None,
                      tuple((node, x, milli) for x in gpus), checkpointing=ckpt)


def gang(workers=2, prio=100, proj="pa"):
    return QueuedJob("gang", proj, F, NOW, workers=workers, gpus_per_worker=8, priority=prio)


def snap(running, queued, *, budget=10, recent=0, n=4, qa=32, qb=32):
    pol = None if budget is None else Consolidation(budget, min_gang_gpus=16, max_job_gpus=8)
    return Snapshot(NOW, nodes(n), TREE, limits(qa, qb), tuple(running), tuple(queued),
                    priority_classes=CLASSES, consolidation=pol,
                    recent_moves=tuple(NOW - timedelta(minutes=5) for _ in range(recent)))


def moves(result):
    return [p.victim_id for p in result.preemptions if p.reason == "consolidate"]


# -- examples ----------------------------------------------------------------------------
# Four 8-GPU nodes, each with one 1-GPU job of tenant B: 28 GPUs free, no whole node.
SCATTERED = [run(f"b{i}", "pb", f"n{i}", [0]) for i in range(4)]


def test_gang_placed_after_moving_two_jobs():
    result = schedule(snap(SCATTERED, [gang()]))
    (adm,) = result.admissions
    assert adm.job_id == "gang" and len(moves(result)) == 2
    assert set(adm.moved) == set(moves(result)) == set(adm.preempts)
    freed = {s[0] for w in adm.placement for s in w}
    assert freed == {f"n{int(v[1:])}" for v in adm.moved}


def test_off_without_a_policy():
    result = schedule(snap(SCATTERED, [gang()], budget=None))
    assert result.admissions == () and result.preemptions == ()


def test_hourly_budget_counts_recent_moves():
    assert moves(schedule(snap(SCATTERED, [gang()], budget=3, recent=2))) == []
    assert len(moves(schedule(snap(SCATTERED, [gang()], budget=3, recent=1)))) == 2


def test_never_moves_a_job_that_does_not_checkpoint():
    running = [run(f"b{i}", "pb", f"n{i}", [0], ckpt=i >= 2) for i in range(4)]
    result = schedule(snap(running, [gang()]))
    assert set(moves(result)) == {"b2", "b3"}
    running = [run(f"b{i}", "pb", f"n{i}", [0], ckpt=i >= 3) for i in range(4)]
    assert schedule(snap(running, [gang()])).admissions == ()


def test_minimum_runtime_protects_young_jobs():
    # Class 100 must run an hour: the two jobs 30 min old stay, the old ones move.
    running = [run(f"b{i}", "pb", f"n{i}", [0], age_h=0.5 if i < 2 else 2) for i in range(4)]
    assert set(moves(schedule(snap(running, [gang()])))) == {"b2", "b3"}


def test_not_when_capacity_is_short():
    # 4 nodes × 7 GPUs used: 4 free in total, a 16-GPU gang needs capacity, not consolidation.
    running = [run(f"b{i}", "pb", f"n{i}", range(7)) for i in range(4)]
    result = schedule(snap(running, [gang()]))
    assert result.admissions == () and result.preemptions == ()


def test_moved_jobs_must_fit_again():
    # Nodes 0-2 hold a 4-GPU job each, node 3 two: 12 GPUs free but a move would leave a
    # 4-GPU job nowhere to go once the gang takes two whole nodes.
    running = [run(f"b{i}", "pb", f"n{i}", range(4)) for i in range(3)]
    running.append(run("b3", "pb", "n3", range(4, 8)))
    running.append(run("b4", "pb", "n3", range(4)))
    result = schedule(snap(running, [gang()]))
    assert result.admissions == () and moves(result) == []


def test_explain_names_the_moves():
    result = schedule(snap(SCATTERED, [gang()]))
    assert len(result.admissions[0].moved) == 2


# -- properties --------------------------------------------------------------------------
@st.composite
def worlds(draw):
    """3-6 nodes with up to three small jobs each, at random offsets (so free GPUs are
    scattered), of both tenants, some not checkpointing, young or not preemptible."""
    n = draw(st.integers(3, 6))
    running, k = [], 0
    for i in range(n):
        x, half = draw(st.integers(0, 3)), None
        for _ in range(draw(st.integers(0, 3))):
            kind = draw(st.sampled_from([1, 1, 2, 4, "half"]))
            common = {"prio": draw(st.sampled_from([50, 100, 100, 500])),
                      "ckpt": draw(st.sampled_from([True, True, True, False])),
                      "age_h": draw(st.sampled_from([0.1, 0.5, 2.0, 2.0])),
                      "preemptible": draw(st.sampled_from([True, True, True, False]))}
            proj = draw(st.sampled_from(["pa", "pb", "pb"]))
            if kind == "half":
                if half is None and x >= 8:
                    break
                gpu = half if half is not None else x
                half, x = (x, x + 1) if half is None else (None, x)
                running.append(run(f"j{k}", proj, f"n{i}", [gpu], milli=500, **common))
            else:
                if x + kind > 8:
                    break
                running.append(run(f"j{k}", proj, f"n{i}", range(x, x + kind), **common))
                x += kind + draw(st.integers(0, 2))
            k += 1
    workers = draw(st.integers(2, 3))
    prio = draw(st.sampled_from([100, 500]))
    budget = draw(st.integers(0, 6))
    recent = draw(st.integers(0, 3))
    qb = draw(st.sampled_from([0, 8, 48]))
    return n, running, gang(workers, prio), budget, recent, qb


def _free(n, running, skip=()):
    """Per (node, GPU) the milli free with every job but ``skip`` running."""
    free = {(f"n{i}", x): 1000 for i in range(n) for x in range(8)}
    for j in running:
        if j.id not in skip:
            for node, x, m in j.placement:
                free[(node, x)] -= m
    return free


def _workers(free, n):
    return sum(sum(1 for x in range(8) if free[(f"n{i}", x)] == 1000) // 8 for i in range(n))


def _placeable(jobs, free, n) -> bool:
    """Exact: can every job of ``jobs`` be put somewhere in ``free`` (on one node each)?"""
    if not jobs:
        return True
    j, rest = jobs[0], jobs[1:]
    g = len(j.placement)
    milli = j.placement[0][2]
    for i in range(n):
        if milli < 1000:
            for x in range(8):
                if free[(f"n{i}", x)] >= milli:
                    free[(f"n{i}", x)] -= milli
                    ok = _placeable(rest, free, n)
                    free[(f"n{i}", x)] += milli
                    if ok:
                        return True
        else:
            whole = [x for x in range(8) if free[(f"n{i}", x)] == 1000]
            if len(whole) >= g:
                for x in whole[:g]:
                    free[(f"n{i}", x)] = 0
                ok = _placeable(rest, free, n)
                for x in whole[:g]:
                    free[(f"n{i}", x)] = 1000
                if ok:
                    return True
    return False


def _valid(moved, running, q, n, left) -> bool:
    """The rules for a set of moves, as the test reads them."""
    if len(moved) > left or sum(len(j.placement) * j.placement[0][2] for j in moved) > q.workers * 8000:
        return False
    free = _free(n, running, {j.id for j in moved})
    if _workers(free, n) < q.workers:
        return False
    # The gang takes whole free nodes (8-GPU workers on 8-GPU nodes: any q.workers of them).
    empty = [i for i in range(n) if all(free[(f"n{i}", x)] == 1000 for x in range(8))]
    for i in empty[:q.workers]:
        for x in range(8):
            free[(f"n{i}", x)] = 0
    return _placeable(sorted(moved, key=lambda j: -len(j.placement)), free, n)


@SETTINGS
@given(worlds())
def test_consolidation_rules(world):
    n, running, q, budget, recent, qb = world
    s = snap(running, [q], budget=budget, recent=recent, n=n, qa=48, qb=qb)
    result = schedule(s)
    by_id = {j.id: j for j in running}
    moved = [by_id[v] for v in moves(result)]
    left = max(0, budget - recent)
    assert len(moved) <= left
    if not moved:
        return
    # One queued job: moves come only when no reclaim or rule-6 preemption placed it.
    assert all(p.reason == "consolidate" for p in result.preemptions)
    (adm,) = result.admissions
    assert adm.job_id == "gang" and set(adm.moved) == {j.id for j in moved}
    for j in moved:
        assert j.checkpointing and j.preemptible and j.priority <= q.priority
        assert NOW - j.started_at >= timedelta(seconds=MIN_RUNTIME[j.priority])
        assert len({node for node, _, _ in j.placement}) == 1
    gang_gpus = adm.workers * 8000
    assert sum(m for j in moved for _, _, m in j.placement) <= gang_gpus
    # Fragmentation was the only obstacle: enough free in total, no place without moves.
    assert sum(_free(n, running).values()) >= q.workers * 8000
    assert schedule(snap(running, [q], budget=None, n=n, qa=48, qb=qb)).admissions == ()
    # Every moved job (another tenant's in-quota ones included) has a place again.
    assert _valid(moved, running, q, n, left)
    # Minimal: none of them could stay.
    for j in moved:
        assert _workers(_free(n, running, {v.id for v in moved if v is not j}), n) < q.workers
    # Fewest: no valid smaller set among the movable jobs.
    movable = [j for j in running if j.checkpointing and j.preemptible and j.priority <= q.priority
               and NOW - j.started_at >= timedelta(seconds=MIN_RUNTIME[j.priority])]
    for size in range(1, len(moved)):
        for subset in combinations(movable, size):
            assert not _valid(list(subset), running, q, n, left), [j.id for j in subset]


@SETTINGS
@given(worlds())
def test_moves_only_when_the_gang_is_admitted(world):
    n, running, q, budget, recent, qb = world
    result = schedule(snap(running, [q], budget=budget, recent=recent, n=n, qa=48, qb=qb))
    if moves(result):
        assert [a.job_id for a in result.admissions] == ["gang"]
    else:
        assert all(not a.moved for a in result.admissions)


def test_a_warm_engine_counts_its_own_moves_for_an_hour():
    from jobs.scheduler.scheduler import Engine

    # Nodes 4 and 5 half used by jobs that do not checkpoint: room for the moved jobs.
    keep = [run(f"k{i}", "pb", f"n{i}", range(4), ckpt=False) for i in (4, 5)]
    engine = Engine(snap(SCATTERED + keep, [gang()], budget=2, n=6, qa=48, qb=48))
    first = engine.cycle(NOW)
    assert len(moves(first)) == 2
    engine.finish(moves(first))  # the moved jobs exited (requeued, they would start again)
    engine.submit([QueuedJob("gang2", "pa", F, NOW, workers=2, gpus_per_worker=8, priority=100)])
    later = engine.cycle(NOW + timedelta(minutes=30))
    assert moves(later) == [] and later.admissions == ()  # the budget of 2 is spent this hour
    again = engine.cycle(NOW + timedelta(minutes=61))
    assert [a.job_id for a in again.admissions] == ["gang2"] and len(moves(again)) == 2
