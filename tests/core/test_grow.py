"""The grow pass (DESIGN §4 inference "scaled between min and max", §5.4 elastic "scale up
later"): running elastic jobs get workers one at a time, in queue order, only with what the
queue and the reservations leave, within the quota rules; grown on-loan workers are reclaimed
alone, and a job preempted as a whole takes its grown workers with it."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from coresnap import NOW, F, cluster, queued, running, snapshot, tree

from jobs.scheduler.scheduler import Engine, Node, RunningJob, schedule


def elastic(jid: str, project: str, node: str, workers: int, *, grow_to: int, gpus: int = 1,
            first_gpu: int = 0, grown: int = 0, priority: int = 100, **kw) -> RunningJob:
    """A running elastic job of ``workers`` workers of ``gpus`` GPUs on ``node``; its last
    ``grown`` workers were added by earlier grow passes."""
    job = running(jid, project, node, workers * gpus, first_gpu=first_gpu, priority=priority, **kw)
    at = tuple(NOW - timedelta(seconds=60 - k) for k in range(grown))
    return replace(job, worker_milli=gpus * 1000, grow_to=grow_to, grown=at,
                   submitted_at=job.started_at - timedelta(seconds=30))


def grown_placement(job: RunningJob, now) -> list[RunningJob]:
    """``job`` after one cycle of growth on its own (as the service would store it)."""
    [growth] = schedule(snapshot(cluster(2), tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})}), [job],
                                 now=now)).growths
    added = tuple(x for w in growth.added for x in w)
    return [replace(job, placement=job.placement + added, grown=(now,) * len(growth.added))]


def grown(result) -> dict[str, tuple[int, int]]:
    """job -> (workers now, workers added)."""
    return {g.job_id: (g.workers, len(g.added)) for g in result.growths}


def gpus_of(result, job_id: str) -> list[tuple[str, int]]:
    return sorted((n, g) for growth in result.growths if growth.job_id == job_id
                  for w in growth.added for n, g, _ in w)


def test_grows_when_capacity_frees():
    tl = tree({"D": (8, {"a": 8})})
    e = elastic("e", "a", "n000", 2, grow_to=4)
    other = running("r", "a", "n000", 6, first_gpu=2)
    engine = Engine(snapshot(cluster(1), tl, [e, other]))
    assert engine.cycle().growths == ()  # full: nothing to grow into
    engine.finish(["r"])
    result = engine.cycle(NOW + timedelta(seconds=5))
    assert grown(result) == {"e": (4, 2)}
    assert all(len(w) == 1 for g in result.growths for w in g.added)  # one worker = one GPU
    assert engine.cycle(NOW + timedelta(seconds=10)).growths == ()  # at its target now
    # cold: the same state from a snapshot decides the same
    assert grown(schedule(snapshot(cluster(1), tl, [e]))) == {"e": (4, 2)}


def test_never_grows_beyond_its_target_or_its_quota():
    tl = tree({"D": (16, {"a": (4, 0, None), "b": 12})})  # a never borrows: 4 GPUs at most
    jobs = [elastic("e", "a", "n000", 1, grow_to=8), elastic("f", "b", "n001", 1, grow_to=3)]
    result = schedule(snapshot(cluster(2), tl, jobs))
    assert grown(result) == {"e": (4, 3), "f": (3, 2)}
    assert not any(result.on_loan.values())


def test_a_job_at_or_above_its_target_does_not_grow():
    tl = tree({"D": (8, {"a": 8})})
    job = elastic("e", "a", "n000", 3, grow_to=2)  # its owner scaled the target down
    assert schedule(snapshot(cluster(1), tl, [job])).growths == ()


def test_grows_a_whole_worker_at_a_time_on_one_node():
    tl = tree({"D": (16, {"a": 16})})
    e = elastic("e", "a", "n000", 1, grow_to=3, gpus=4)
    filler = running("x", "a", "n001", 6)  # n001 has 2 free GPUs: no 4-GPU worker fits there
    result = schedule(snapshot(cluster(2), tl, [e, filler]))
    assert grown(result) == {"e": (2, 1)}  # only n000's other half fits a worker
    [[worker]] = [g.added for g in result.growths]
    assert {n for n, _, _ in worker} == {"n000"} and len(worker) == 4


# -- the queue and reservations come first ----------------------------------------------------
def test_never_ahead_of_a_queued_job_of_the_same_or_higher_priority():
    tl = tree({"D": (16, {"a": 8, "b": 8})})
    e = elastic("e", "a", "n000", 2, grow_to=8)
    big = running("r", "b", "n001", 4)
    waiting = queued("q", "b", 8, priority=100)  # needs a whole node: waits for room
    result = schedule(snapshot(cluster(2), tl, [e, big], [waiting]))
    assert result.admissions == () and result.growths == ()
    assert result.explanations["q"].reason in {"capacity", "placement"}
    # a queued job of lower priority does not hold a higher one back
    low = replace(waiting, priority=50)
    assert grown(schedule(snapshot(cluster(2), tl, [e, big], [low]))) == {"e": (8, 6)}


def test_queued_jobs_refused_by_quota_or_never_fitting_do_not_hold_growth_back():
    tl = tree({"D": (16, {"a": 16, "b": (1, 0, None)})})  # b: 1 GPU, never borrows
    e = elastic("e", "a", "n000", 2, grow_to=4)
    over_quota = queued("q", "b", 4)  # waits for quota, not for room
    too_big = queued("z", "a", 8, workers=3)  # 24 GPUs: more than the flavor has
    result = schedule(snapshot(cluster(2), tl, [e], [over_quota, too_big]))
    assert result.admissions == ()
    assert grown(result) == {"e": (4, 2)}


def test_never_takes_the_gpus_of_a_reservation():
    tl = tree({"D": (28, {"a": 8, "b": 12, "c": 8})})  # everybody in quota: no reclaim
    nodes = cluster(3)
    long = running("l", "b", "n000", 8, runtime=7200)  # n000 busy for an hour
    short = running("s", "b", "n001", 4, runtime=3600 + 600)  # n001 half busy for 10 minutes
    e = elastic("e", "c", "n002", 8, grow_to=12, priority=500)  # n002 full; it would borrow
    head = queued("h", "a", 8, priority=100, age_s=10)  # a whole node: n001 in 10 minutes
    result = schedule(snapshot(nodes, tl, [long, short, e], [head]))
    [res] = result.reservations
    assert res.job_id == "h" and res.nodes == ("n001",)
    assert result.growths == ()  # n001's free half is held for h
    assert grown(schedule(snapshot(nodes, tl, [long, short, e]))) == {"e": (12, 4)}


def test_growth_comes_after_this_cycles_admissions():
    tl = tree({"D": (8, {"a": 4, "b": 4})})
    e = elastic("e", "a", "n000", 2, grow_to=8)
    q = queued("q", "b", 2, priority=50)  # lower priority, but queued: it goes first
    result = schedule(snapshot(cluster(1), tl, [e], [q]))
    assert [a.job_id for a in result.admissions] == ["q"]
    assert grown(result) == {"e": (6, 4)}  # and e takes the rest (on loan beyond a's 4)


# -- order and placement ------------------------------------------------------------------------
def test_tenants_take_turns_by_dominant_share():
    tl = tree({"D": (24, {"a": 8, "b": 8, "c": 8})})
    ea = elastic("ea", "a", "n000", 3, grow_to=8)  # share 3/8
    eb = elastic("eb", "b", "n000", 1, grow_to=8, first_gpu=3)  # share 1/8
    filler = running("x", "c", "n001", 8)
    result = schedule(snapshot(cluster(2), tl, [ea, eb, filler]))
    # 4 free GPUs: eb catches up first (2/8, 3/8), then they alternate: b's share stays lower
    assert grown(result) == {"eb": (4, 3), "ea": (4, 1)}


def test_growth_stays_near_the_job_and_inside_its_cluster():
    nodes = (cluster(4, per_leaf=2)[:2]
             + tuple(replace(n, cluster="c2") for n in cluster(4, per_leaf=2)[2:]))
    nodes = tuple(replace(n, cluster=n.cluster or "c1") for n in nodes)
    tl = tree({"D": (32, {"a": 32})})
    e = elastic("e", "a", "n000", 8, grow_to=20)  # n000 full; n001 (its leaf) free; n002-3 elsewhere
    result = schedule(snapshot(nodes, tl, [e]))
    assert grown(result) == {"e": (16, 8)}  # n001 only: n002 and n003 are another cluster's
    assert {n for n, _ in gpus_of(result, "e")} == {"n001"}


def test_growth_prefers_the_jobs_own_leaf():
    tl = tree({"D": (32, {"a": 32})})
    nodes = cluster(4, per_leaf=2)  # leaves l0 = n000, n001; l1 = n002, n003
    e = elastic("e", "a", "n002", 2, grow_to=3)
    others = [running("x", "a", "n000", 7), running("y", "a", "n003", 8)]
    # best fit anywhere would be n000 (1 free GPU); near the job it is n002 itself
    result = schedule(snapshot(nodes, tl, [e, *others]))
    assert gpus_of(result, "e") == [("n002", 2)]
    plain = schedule(snapshot(nodes, tl, [e, *others]), fragmentation_aware=False)
    assert gpus_of(plain, "e") == [("n000", 7)]


def test_a_cordoned_job_does_not_grow():
    tl = tree({"D": (16, {"a": 16})})
    nodes = (replace(cluster(2)[0], schedulable=False), cluster(2)[1])
    e = elastic("e", "a", "n000", 2, grow_to=4)
    assert schedule(snapshot(nodes, tl, [e])).growths == ()


# -- quota: in quota first, on loan when borrowing is allowed, reclaimable -----------------
def test_grows_on_loan_only_when_borrowing_is_allowed():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    e = elastic("e", "a", "n000", 8, grow_to=12)
    result = schedule(snapshot(cluster(2), tl, [e]))
    assert grown(result) == {"e": (12, 4)}
    assert result.on_loan == {"e": False}  # its first 8 workers stay in quota
    assert schedule(snapshot(cluster(2), tl, [e]), borrowing=False).growths == ()


def test_on_loan_growth_is_reclaimed_alone_and_the_job_runs_on():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    e = elastic("e", "b", "n000", 8, grow_to=16)
    engine = Engine(snapshot(cluster(2), tl, [e]))
    assert grown(engine.cycle()) == {"e": (16, 8)}  # A is idle: b grows on loan onto n001
    engine.submit([queued("a1", "a", 8)])  # A's in-quota job: reclaims what b borrowed
    result = engine.cycle(NOW + timedelta(seconds=5))
    assert [a.job_id for a in result.admissions] == ["a1"]
    assert result.admissions[0].preempts == ()  # grown workers leave at once: nothing to wait for
    assert sorted((p.victim_id, p.worker, p.reason) for p in result.preemptions) == [
        ("e", k, "reclaim") for k in range(8, 16)]
    assert result.on_loan["e"] is False and "e" in result.on_loan
    # cold: the same state (e with 8 grown workers) reclaims the same workers
    [growth] = engine_growths = grown_placement(e, NOW)
    cold = schedule(snapshot(cluster(2), tl, [growth], [queued("a1", "a", 8)]))
    assert engine_growths
    assert sorted((p.victim_id, p.worker) for p in cold.preemptions) == [("e", k) for k in range(8, 16)]


def test_grown_workers_are_on_loan_when_their_job_is():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    # b runs 12 workers + 1 grown: its 12-GPU base cannot be in quota (8); rule 1 alone would
    # find room for the 1-GPU unit, but a unit is on loan whenever its job is
    base = elastic("e", "b", "n000", 13, grow_to=13, grown=1, gpus=1)
    nodes = cluster(1, per_node=16)
    result = schedule(snapshot(nodes, tl, [base], [queued("a1", "a", 4)]))
    # a1 (in quota, 3 GPUs free) reclaims the grown worker, the most recently started loan
    assert {(p.victim_id, p.worker) for p in result.preemptions} == {("e", 12)}
    assert result.on_loan["e"] is True and [a.job_id for a in result.admissions] == ["a1"]


def test_a_job_preempted_as_a_whole_takes_its_grown_workers_and_their_gpus():
    tl = tree({"D": (8, {"a": 8})})
    e = elastic("e", "a", "n000", 6, grow_to=8, grown=4, priority=50)  # 2 first + 4 grown workers
    filler = running("x", "a", "n000", 2, first_gpu=6)
    small = queued("hi", "a", 3, priority=500)  # rule 6: its grown workers go first, alone
    shrunk = schedule(snapshot(cluster(1), tl, [e, filler], [small]))
    assert [(p.victim_id, p.worker) for p in shrunk.preemptions] == [("e", 5), ("e", 4), ("e", 3)]
    hi = queued("hi", "a", 5, priority=500)  # needs e's first workers too: e goes as a whole
    engine = Engine(snapshot(cluster(1), tl, [e, filler], [hi]))
    result = engine.cycle()
    assert [(p.victim_id, p.worker) for p in result.preemptions] == [("e", None)]
    assert result.admissions[0].preempts == ("e",)
    # hi takes 5 of e's 6 GPUs; the 6th (a grown worker's) stays taken through e's grace period
    engine.submit([queued("lo", "a", 1, priority=100)])
    assert engine.cycle(NOW + timedelta(seconds=1)).admissions == ()
    engine.finish(["e"])  # e has exited
    assert [a.job_id for a in engine.cycle(NOW + timedelta(seconds=2)).admissions] == ["lo"]


def test_schedule_and_a_warm_engine_agree_after_growth():
    tl = tree({"A": (8, {"a": 8}), "B": (8, {"b": 8})})
    e = elastic("e", "a", "n000", 2, grow_to=12)
    engine = Engine(snapshot(cluster(2), tl, [e]))
    first = engine.cycle()
    [growth] = first.growths
    placement = e.placement + tuple(x for w in growth.added for x in w)
    grown_e = replace(e, placement=placement, grown=(NOW,) * len(growth.added))
    engine.submit([queued("b1", "b", 8)])
    warm = engine.cycle(NOW + timedelta(seconds=5))
    cold = schedule(snapshot(cluster(2), tl, [grown_e], [queued("b1", "b", 8)],
                             now=NOW + timedelta(seconds=5)))
    assert warm.admissions == cold.admissions and warm.preemptions == cold.preemptions
    assert warm.growths == cold.growths and dict(warm.on_loan) == dict(cold.on_loan)


def test_non_elastic_jobs_never_grow():
    tl = tree({"D": (16, {"a": 16})})
    plain = running("p", "a", "n000", 2)
    assert schedule(snapshot(cluster(2), tl, [plain])).growths == ()
    # unknown flavor nodes or no worker size: nothing happens either
    odd = replace(plain, grow_to=8)  # a target but no worker size
    assert schedule(snapshot(cluster(2), tl, [odd])).growths == ()
    assert isinstance(cluster(1)[0], Node) and F
