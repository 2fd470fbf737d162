"""Jobs that list acceptable flavors (DESIGN §14): the cycle takes the first flavor, in the
job's order, that it can place within the quota rules; explain says why each flavor is out; a
warm engine decides exactly as a cold one."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest
from coresnap import NOW, cluster, limits, queued, running, snapshot

from jobs.scheduler.scheduler import Engine, QueuedJob, RunningJob, Snapshot, TreeNode, schedule

A, B = "A100-80G", "Ascend-910B"


def alt(jid: str, project: str, count: int, *flavors: str, **kw) -> QueuedJob:
    return replace(queued(jid, project, count, flavor=flavors[0], **kw), flavors=flavors)


def two_flavors(qa: float = 8, qb: float = 8, *, nodes_a: int = 1, nodes_b: int = 1):
    """One project ``p`` under department ``D``, quotas on both flavors."""
    tree = (TreeNode("D", None, "department"), TreeNode("p", "D", "project"))
    lims = {("D", A): limits(qa), ("p", A): limits(qa), ("D", B): limits(qb), ("p", B): limits(qb)}
    nodes = cluster(nodes_a, flavor=A, prefix="a") + cluster(nodes_b, flavor=B, prefix="b")
    return nodes, (tree, lims)


def test_takes_the_first_flavor_when_it_has_room():
    nodes, tl = two_flavors()
    result = schedule(snapshot(nodes, tl, queued_jobs=[alt("j", "p", 4, A, B)]))
    (adm,) = result.admissions
    assert adm.flavor == A and all(n.startswith("a") for n, _, _ in adm.placement[0])


def test_order_is_the_jobs_not_the_alphabet():
    nodes, tl = two_flavors()
    (adm,) = schedule(snapshot(nodes, tl, queued_jobs=[alt("j", "p", 4, B, A)])).admissions
    assert adm.flavor == B and all(n.startswith("b") for n, _, _ in adm.placement[0])


def test_goes_to_the_second_flavor_when_the_first_is_full():
    nodes, tl = two_flavors()
    busy = running("r", "p", "a000", 8, flavor=A)
    (adm,) = schedule(snapshot(nodes, tl, [busy], [alt("j", "p", 4, A, B)])).admissions
    assert (adm.job_id, adm.flavor, adm.in_quota) == ("j", B, True)
    assert {n for n, _, _ in adm.placement[0]} == {"b000"}


def test_a_flavor_without_quota_is_passed_over_under_the_static_policy():
    nodes, tl = two_flavors(qa=0)
    result = schedule(snapshot(nodes, tl, queued_jobs=[alt("j", "p", 2, A, B)]), borrowing=False)
    assert [(a.job_id, a.flavor) for a in result.admissions] == [("j", B)]


def test_prefers_a_free_second_flavor_to_preempting_on_the_first():
    nodes, tl = two_flavors()
    low = running("low", "p", "a000", 8, flavor=A, priority=10)
    job = alt("j", "p", 8, A, B, priority=500)
    result = schedule(snapshot(nodes, tl, [low], [job]))
    assert result.preemptions == ()
    assert [(a.job_id, a.flavor) for a in result.admissions] == [("j", B)]


def test_preempts_on_the_first_flavor_when_no_flavor_is_free():
    nodes, tl = two_flavors()
    lows = [
        running("la", "p", "a000", 8, flavor=A, priority=10),
        running("lb", "p", "b000", 8, flavor=B, priority=10),
    ]
    result = schedule(snapshot(nodes, tl, lows, [alt("j", "p", 8, A, B, priority=500)]))
    assert [(p.victim_id, p.reason) for p in result.preemptions] == [("la", "priority")]
    assert [(a.job_id, a.flavor, a.preempts) for a in result.admissions] == [("j", A, ("la",))]


def test_explain_names_every_flavor_in_the_jobs_order():
    nodes, tl = two_flavors(qa=16, qb=4)  # A: in quota, pool full; B: not in quota
    busy = running("r", "p", "a000", 8, flavor=A)
    result = schedule(snapshot(nodes, tl, [busy], [alt("j", "p", 8, A, B)]), borrowing=False)
    assert result.admissions == ()
    e = result.explanations["j"]
    assert [(x.flavor, x.reason) for x in e.alternatives] == [(A, "capacity"), (B, "quota")]
    assert (e.flavor, e.reason) == (A, "capacity")
    assert e.message.startswith(f"{A}: ") and f"; {B}: " in e.message


def test_waiting_alternatives_count_in_no_flavors_usage():
    nodes, tl = two_flavors(qa=8, qb=8)
    waiting = alt("big", "p", 16, A, B)  # fits neither flavor (8 GPUs each)
    small = queued("s", "p", 8, flavor=A, age_s=1)
    result = schedule(snapshot(nodes, tl, queued_jobs=[waiting, small]))
    assert [(a.job_id, a.flavor) for a in result.admissions] == [("s", A)]
    assert result.explanations["big"].reason == "invalid"


def test_a_single_flavor_list_is_a_plain_job():
    nodes, tl = two_flavors()
    job = replace(queued("j", "p", 2, flavor=A), flavors=(A,))
    (adm,) = schedule(snapshot(nodes, tl, queued_jobs=[job])).admissions
    assert adm.flavor == A


def test_a_reservation_is_held_on_the_first_flavor_with_room_by_quota():
    nodes, tl = two_flavors(qa=16, qb=0)
    busy = running("r", "p", "a000", 8, flavor=A, runtime=600)
    result = schedule(snapshot(nodes, tl, [busy], [alt("j", "p", 8, B, A, runtime=60)]), borrowing=False)
    assert result.admissions == ()
    assert [(r.job_id, r.flavor) for r in result.reservations] == [("j", A)]


# -- warm engine == cold engine ----------------------------------------------------------------
@dataclass
class World:
    nodes: tuple
    tl: tuple
    running: dict[str, RunningJob] = field(default_factory=dict)
    waiting: dict[str, QueuedJob] = field(default_factory=dict)
    seq: int = 0

    def snapshot(self, now) -> Snapshot:
        t, lims = self.tl
        return Snapshot(now, self.nodes, t, lims, tuple(self.running.values()), tuple(self.waiting.values()))


def _decisions(result):
    explained = {j: (e.reason, e.message, e.alternatives) for j, e in result.explanations.items()}
    return (result.admissions, result.preemptions, result.reservations, dict(result.on_loan), explained)


def _world(rng: random.Random) -> World:
    tree = (
        TreeNode("D", None, "department"),
        TreeNode("E", None, "department"),
        TreeNode("a", "D", "project"),
        TreeNode("b", "D", "project"),
        TreeNode("c", "E", "project"),
    )
    lims = {}
    for f, q in ((A, 8), (B, 16)):
        lims[("D", f)] = limits(q, None, rng.choice([None, 4]))
        lims[("E", f)] = limits(q)
        for proj, share in (("a", q // 2), ("b", q // 2), ("c", q)):
            lims[(proj, f)] = limits(share)
    nodes = cluster(rng.choice([1, 2]), flavor=A, prefix="a") + cluster(2, 8, flavor=B, prefix="b")
    return World(nodes, (tree, lims))


def _submit(world: World, rng: random.Random, now) -> list[QueuedJob]:
    new = []
    for _ in range(rng.choice([0, 1, 2, 3])):
        world.seq += 1
        jid = f"j{world.seq:03d}"
        choice = rng.choice([(A,), (B,), (A, B), (B, A), (A, B)])
        job = queued(
            jid,
            rng.choice("abc"),
            rng.choice([1, 2, 4, 8]),
            flavor=choice[0],
            age_s=0,
            priority=rng.choice([10, 100, 500]),
            runtime=rng.choice([None, 600]),
        )
        if rng.random() < 0.15:
            job = replace(job, gpus_per_worker=1, gpu_milli=500)
        job = replace(job, submitted_at=now, flavors=choice if len(choice) > 1 else ())
        world.waiting[jid] = job
        new.append(job)
    return new


def _apply(world: World, result, now) -> None:
    for p in result.preemptions:
        job = world.running[p.victim_id]
        world.running[job.id] = replace(job, terminating=True, terminating_since=now)
    for a in result.admissions:
        q = world.waiting.pop(a.job_id)
        assert a.flavor in (q.flavors or (q.flavor,))
        slots = tuple(x for w in a.placement for x in w)
        world.running[a.job_id] = RunningJob(
            a.job_id, q.project_id, a.flavor, q.priority, q.preemptible, now, q.max_runtime_seconds, slots
        )


def _between(world: World, engine: Engine, rng: random.Random) -> None:
    finished = [jid for jid, job in sorted(world.running.items()) if job.terminating or rng.random() < 0.3]
    for jid in finished:
        del world.running[jid]
    engine.finish(finished)
    cancelled = [jid for jid in sorted(world.waiting) if rng.random() < 0.05]
    for jid in cancelled:
        del world.waiting[jid]
    engine.cancel(cancelled)


def run_world(seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    world = _world(rng)
    now = NOW
    engine = Engine(world.snapshot(now))
    seen = {"second": 0, "waiting_alt": 0}
    for _ in range(30):
        warm = engine.cycle(now)
        cold = schedule(world.snapshot(now))
        assert _decisions(warm) == _decisions(cold)
        for a in warm.admissions:
            q = world.waiting[a.job_id]
            seen["second"] += bool(q.flavors) and a.flavor != q.flavors[0]
        seen["waiting_alt"] += sum(bool(e.alternatives) for e in warm.explanations.values())
        _apply(world, warm, now)
        now += timedelta(seconds=rng.randint(30, 900))
        _between(world, engine, rng)  # before the submits: the engine cancels only known jobs
        engine.submit(_submit(world, rng, now))
    return seen


@pytest.mark.parametrize("seed", range(24))
def test_warm_engine_with_alternative_flavors_decides_like_a_cold_one(seed):
    run_world(seed)


def test_the_random_worlds_use_second_choices_and_explain_waiting_alternatives():
    seen = [run_world(seed) for seed in range(6)]
    assert sum(s["second"] for s in seen) > 0
    assert sum(s["waiting_alt"] for s in seen) > 0
