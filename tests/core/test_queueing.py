"""Queueing strategies (issue 25 item 4, jobs/scheduler/engine/fifo.py): strict FIFO and the aging bound
on hand-checked snapshots, and warm == cold with the FIFO rule holding over random worlds."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta

import pytest
from coresnap import NOW, cluster, queued, running, snapshot, tree
from test_alternatives import World, _apply, _between, _decisions, _submit, _world

from jobs.scheduler.engine import fifo
from jobs.scheduler.scheduler import Engine, Snapshot, schedule

# One node of 8; project p (quota 4, borrow limit 0: it waits for its own quota) runs 3 GPUs.
TL = tree({"D": (8, {"p": (4, 0), "q": 4})})
BUSY = running("r", "p", "n000", 3, runtime=600)


def _admitted(result) -> set[str]:
    return {a.job_id for a in result.admissions}


def test_best_effort_lets_a_later_small_job_pass_the_job_waiting_for_quota():
    jobs = [queued("big", "p", 4, age_s=120), queued("small", "p", 1, age_s=60)]
    result = schedule(snapshot(cluster(1), TL, [BUSY], jobs))
    assert _admitted(result) == {"small"}
    assert result.explanations["big"].reason == "borrow_limit"


def test_strict_fifo_blocks_the_later_job_of_its_project_and_explains_why():
    jobs = [queued("big", "p", 4, age_s=120), queued("small", "p", 1, age_s=60),
            queued("other", "q", 1, age_s=30)]
    result = schedule(snapshot(cluster(1), TL, [BUSY], jobs, strict_fifo=frozenset({"p"})))
    assert _admitted(result) == {"other"}  # another project is not held back
    e = result.explanations["small"]
    assert (e.reason, e.behind, e.behind_why) == ("fifo", "big", "strict_fifo")
    assert e.message == "waits behind job big of its project (strict FIFO)"
    assert result.explanations["big"].reason == "borrow_limit"


def test_strict_fifo_blocks_only_its_own_priority_level_and_flavors():
    nodes = cluster(1) + cluster(1, flavor="H800", prefix="h")
    t, lims = TL
    lims = {**lims, ("D", "H800"): lims[("D", "A100")], ("p", "H800"): lims[("p", "A100")]}
    jobs = [queued("big", "p", 4, age_s=120), queued("low", "p", 1, age_s=60, priority=50),
            queued("h800", "p", 1, age_s=60, flavor="H800"), queued("same", "p", 1, age_s=50)]
    result = schedule(snapshot(nodes, (t, lims), [BUSY], jobs, strict_fifo=frozenset({"p"})))
    assert _admitted(result) == {"low", "h800"}
    assert result.explanations["same"].reason == "fifo"


def test_an_earlier_job_is_never_blocked_by_a_later_one():
    jobs = [queued("small", "p", 1, age_s=120), queued("big", "p", 4, age_s=60)]
    result = schedule(snapshot(cluster(1), TL, [BUSY], jobs, strict_fifo=frozenset({"p"})))
    assert _admitted(result) == {"small"}


def test_a_job_that_can_never_run_or_is_held_by_a_budget_blocks_nobody():
    too_big = queued("huge", "p", 8, age_s=120)  # above p's quota 4 + borrow limit 0: never
    result = schedule(snapshot(cluster(1), TL, [BUSY], [too_big, queued("small", "p", 1, age_s=60)],
                               strict_fifo=frozenset({"p"})))
    assert _admitted(result) == {"small"}
    held = queued("held", "q", 1, age_s=120)
    tl = tree({"D": (8, {"p": (4, 0), "q": (4, 0)})})
    snap = snapshot(cluster(1), tl, [], [held, queued("fine", "q", 1, age_s=60, approved=True)],
                    strict_fifo=frozenset({"q"}), over_budget_tenants=frozenset({"q"}))
    result = schedule(snap)
    assert _admitted(result) == {"fine"} and result.explanations["held"].reason == "budget"


def test_a_strict_job_promised_room_on_loan_is_not_passed_by_a_later_in_quota_job():
    """Under strict FIFO, p's first job (on loan only: 8 > quota 4) is promised the idle node,
    to be placed after in-quota demand; p's later 4-GPU job is in quota and would be placed
    first, taking half of that room. It waits behind the first instead."""
    tl = tree({"D": (8, {"p": 4, "z": 4})})
    jobs = [queued("first", "p", 8, age_s=120), queued("later", "p", 4, age_s=60)]
    strict = schedule(snapshot(cluster(1), tl, [], jobs, strict_fifo=frozenset({"p"})))
    assert _admitted(strict) == {"first"}
    best = schedule(snapshot(cluster(1), tl, [], jobs))
    assert _admitted(best) == {"later"}  # best effort: the later job goes ahead


def test_a_strict_job_waiting_for_capacity_gets_a_reservation_of_its_own():
    # Two 8-GPU nodes, each project runs 8 in quota: p's ends in 600 s, q's in 1,200 s. Both
    # queue an 8-GPU job on loan (shares tie; q's is older: the level's head, reserving node
    # 0 from 600 s for its 60 s). Best effort: p's big job gets no reservation. Strict: it
    # reserves too, after q's reservation (node 0 at 660 s, before node 1 frees at 1,200 s),
    # and p's later small job waits behind it.
    tl = tree({"D": (16, {"p": 8, "q": 8})})
    busy = [running("rp", "p", "n000", 8, runtime=3600 + 600),
            running("rq", "q", "n001", 8, runtime=3600 + 1200)]
    jobs = [queued("qhead", "q", 8, age_s=300, runtime=60), queued("pbig", "p", 8, age_s=200, runtime=60),
            queued("psmall", "p", 1, age_s=100, runtime=60)]
    best = schedule(snapshot(cluster(2), tl, busy, jobs))
    strict = schedule(snapshot(cluster(2), tl, busy, jobs, strict_fifo=frozenset({"p"})))
    assert [r.job_id for r in best.reservations] == ["qhead"]
    assert [r.job_id for r in strict.reservations] == ["qhead", "pbig"]
    starts = {r.job_id: r.earliest_start for r in strict.reservations}
    assert starts == {"qhead": NOW + timedelta(seconds=600), "pbig": NOW + timedelta(seconds=660)}
    assert strict.explanations["psmall"].reason == "fifo"
    assert best.explanations["psmall"].reason != "fifo"
    assert best.admissions == strict.admissions == ()


def test_the_aging_bound_makes_a_job_that_waited_too_long_strict():
    jobs = [queued("big", "p", 4, age_s=4000), queued("small", "p", 1, age_s=60)]
    young = schedule(snapshot(cluster(1), TL, [BUSY], jobs, default_aging_bound_s=7200))
    assert _admitted(young) == {"small"} and young.explanations["big"].waited_s is None
    old = schedule(snapshot(cluster(1), TL, [BUSY], jobs, default_aging_bound_s=3600))
    assert _admitted(old) == set()
    e = old.explanations["big"]
    assert (e.waited_s, e.aging_bound_s) == (4000, 3600)
    assert e.message.endswith("; waiting 1.1 h, over the aging bound of 1 h")
    small = old.explanations["small"]
    assert (small.reason, small.behind, small.behind_why) == ("fifo", "big", "aging")
    # A project's own bound wins over the centre's default.
    own = schedule(snapshot(cluster(1), TL, [BUSY], jobs, default_aging_bound_s=3600,
                            aging_bound_s={"p": 7200}))
    assert _admitted(own) == {"small"}


# -- random worlds: warm == cold, and no later job of a strict project passes a waiting one --
class FifoWorld(World):
    strict = frozenset({"a"})
    bound: int | None = None

    def snapshot(self, now) -> Snapshot:
        return replace(super().snapshot(now), strict_fifo=self.strict, default_aging_bound_s=self.bound)


def _fifo_holds(snap: Snapshot, result) -> int:
    """In this world no job is hopeless (a worker fits a node; no borrow limit below a job)."""
    admitted = {a.job_id for a in result.admissions}
    waiting = [q for q in snap.queued if q.id not in admitted]
    checked = 0
    for q in snap.queued:
        if q.id not in admitted or q.project_id != "a":
            continue
        flavors = set(q.flavors or (q.flavor,))
        for w in waiting:
            earlier = (w.submitted_at, w.id) < (q.submitted_at, q.id)
            if w.project_id == "a" and w.priority == q.priority and earlier \
                    and flavors & set(w.flavors or (w.flavor,)):
                assert result.explanations[w.id].reason in ("reclaimed", "budget"), (q.id, w.id)
        checked += 1
    return checked


@pytest.mark.parametrize("seed", range(16))
def test_warm_engine_with_strict_fifo_and_aging_decides_like_a_cold_one(seed):
    rng = random.Random(seed)
    base = _world(rng)
    world = FifoWorld(base.nodes, base.tl)
    world.bound = rng.choice([None, 900, 3600])
    now = NOW
    engine = Engine(world.snapshot(now))
    blocked = checked = 0
    for _ in range(30):
        snap = world.snapshot(now)
        warm = engine.cycle(now)
        cold = schedule(snap)
        assert _decisions(warm) == _decisions(cold)
        checked += _fifo_holds(snap, warm)
        blocked += sum(e.reason == "fifo" for e in warm.explanations.values())
        _apply(world, warm, now)
        now += timedelta(seconds=rng.randint(30, 900))
        _between(world, engine, rng)
        engine.submit(_submit(world, rng, now))
    if seed == 0:
        assert blocked > 0 and checked > 0  # the worlds do block jobs and admit strict ones


def test_own_reservations_are_capped_per_cycle_and_blocking_is_not():
    """20 strict projects each wait for a whole node: the level's head reserves, then at most
    MAX_OWN_RESERVATIONS more; every project's later job is blocked all the same."""
    n = 20
    tl = tree({"D": (8 * n, {f"p{k:02d}": 8 for k in range(n)})})
    busy = [running(f"r{k:02d}", f"p{k:02d}", f"n{k:03d}", 8, runtime=3600 + 60 * (k + 1)) for k in range(n)]
    jobs = [queued(f"big{k:02d}", f"p{k:02d}", 8, age_s=300 - k, runtime=60) for k in range(n)]
    jobs += [queued(f"small{k:02d}", f"p{k:02d}", 1, age_s=100, runtime=60) for k in range(n)]
    strict = frozenset(f"p{k:02d}" for k in range(n))
    result = schedule(snapshot(cluster(n), tl, busy, jobs, strict_fifo=strict))
    assert len(result.reservations) == 1 + fifo.MAX_OWN_RESERVATIONS
    assert all(result.explanations[f"small{k:02d}"].reason == "fifo" for k in range(n))
