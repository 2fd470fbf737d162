"""Whole-machine requests in the pure engine (DESIGN §15, docs/resources.md): random nodes with
CPU, memory and local disk, random jobs asking them per worker, several cycles with preemptions,
growth and ends — no node's dimension is ever over-committed, and a worker that fits somewhere
is not refused for a dimension it does not exceed."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from coresnap import NOW, F, limits
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.scheduler.scheduler import Node, QueuedJob, RunningJob, Snapshot, TreeNode, schedule

SETTINGS = settings(max_examples=80, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
DIMS = ("cpu_millicores", "memory_mib", "local_disk_gib")
PROJECTS = ("pa", "pb", "pc")
TREE = (TreeNode("D", None, "department"), *(TreeNode(p, "D", "project") for p in PROJECTS))


@st.composite
def nodes(draw):
    out = []
    for i in range(draw(st.integers(1, 5))):
        reported = draw(st.sampled_from([True, True, True, False]))
        out.append(Node(
            f"n{i}", F, draw(st.sampled_from([8, 8, 4])), "z", "s0", f"l{i // 2}",
            draw(st.sampled_from([True, True, True, False])),
            cpu_millicores=draw(st.sampled_from([16_000, 64_000, 96_000])) if reported else None,
            memory_mib=draw(st.sampled_from([65_536, 262_144, 1_048_576])) if reported else None,
            local_disk_gib=draw(st.sampled_from([200, 1_000, 4_000])) if reported else None,
        ))
    return tuple(out)


def job_values():
    return st.fixed_dictionaries({
        "project": st.sampled_from(PROJECTS),
        "gpus": st.sampled_from([1, 1, 2, 4, 8]),
        "workers": st.integers(1, 3),
        "elastic": st.booleans(),
        "shared": st.none() | st.none() | st.sampled_from([250, 500]),
        "priority": st.sampled_from([50, 100, 500]),
        "preemptible": st.booleans(),
        "cpu_millicores": st.none() | st.sampled_from([500, 8_000, 24_000, 64_000, 100_000]),
        "memory_mib": st.none() | st.sampled_from([4_096, 65_536, 500_000, 2_000_000]),
        "local_disk_gib": st.none() | st.sampled_from([10, 500, 3_000]),
        "cycle": st.integers(0, 3),
    })


def make_job(k: int, spec: dict, now) -> QueuedJob:
    shared = spec["shared"]
    workers = 1 if shared else spec["workers"]
    return QueuedJob(f"j{k:02d}", spec["project"], F, now - timedelta(seconds=k), workers,
                     1 if spec["elastic"] and not shared else None, spec["gpus"], shared,
                     spec["priority"], spec["preemptible"], None, True,
                     **{d: spec[d] for d in DIMS})


def request_of(q: QueuedJob) -> tuple[int, int, int]:
    return (q.cpu_millicores or 0, q.memory_mib or 0, q.local_disk_gib or 0)


def run_stream(world, check):
    """Four cycles; decisions applied between them (victims exit, grown workers join, some end)."""
    node_list, jobs, seed = world
    rng = random.Random(seed)
    lims = {("D", F): limits(64), **{(p, F): limits(8, 32) for p in PROJECTS}}
    running: dict[str, RunningJob] = {}
    waiting: dict[str, QueuedJob] = {}
    asked: dict[str, QueuedJob] = {}
    for cycle in range(4):
        now = NOW + timedelta(minutes=10 * cycle)
        for k, spec in enumerate(jobs):
            if spec["cycle"] == cycle:
                waiting[f"j{k:02d}"] = asked[f"j{k:02d}"] = make_job(k, spec, now)
        snap = Snapshot(now, node_list, TREE, lims, tuple(running.values()), tuple(waiting.values()))
        result = schedule(snap)
        check(snap, result, asked)
        for p in result.preemptions:
            running.pop(p.victim_id)
            waiting[p.victim_id] = asked[p.victim_id]
        for a in result.admissions:
            q = waiting.pop(a.job_id)
            slots = tuple(x for w in a.placement for x in w)
            reqs = tuple((w[0][0], *request_of(q)) for w in a.placement) if any(request_of(q)) else ()
            running[a.job_id] = RunningJob(a.job_id, q.project_id, F, q.priority, q.preemptible, now,
                                           None, slots, requests=reqs, grow_to=q.workers)
        for g in result.growths:
            job, req = running[g.job_id], request_of(asked[g.job_id])
            running[g.job_id] = replace(
                job, placement=job.placement + tuple(x for w in g.added for x in w),
                grown=job.grown + (now,) * len(g.added),
                requests=job.requests + tuple((w[0][0], *req) for w in g.added) if any(req) else ())
        for jid in sorted(running):
            if rng.random() < 0.25:
                del running[jid]


def held_after(snap: Snapshot, result, asked) -> dict[str, list[int]]:
    """Per node, the CPU, memory and disk its jobs hold after the cycle's decisions: what a
    worker asked, or — asking nothing — its GPUs' share of the node (docs/resources.md)."""
    by_id = {n.id: n for n in snap.nodes}
    held: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])

    def add(node, req):
        held[node] = [h + r for h, r in zip(held[node], req, strict=True)]

    def add_share(slots):
        per_node: dict[str, int] = defaultdict(int)
        for node, _, milli in slots:
            per_node[node] += milli
        for node, milli in per_node.items():
            n = by_id[node]
            add(node, [0 if getattr(n, d) is None else -(-(getattr(n, d) // n.gpus) * milli // 1000)
                       for d in DIMS])

    gone = {p.victim_id for p in result.preemptions}
    for job in snap.running:
        if job.id not in gone:
            for node, *req in job.requests:
                add(node, req)
            if not job.requests:
                add_share(job.placement)
    for a in result.admissions:
        req = request_of(asked[a.job_id])
        for worker in a.placement:
            add(worker[0][0], req) if any(req) else add_share(worker)
    for g in result.growths:
        req = request_of(asked[g.job_id])
        for worker in g.added:
            add(worker[0][0], req) if any(req) else add_share(worker)
    return held


worlds = st.tuples(nodes(), st.lists(job_values(), min_size=1, max_size=16), st.integers(0, 1000))


@SETTINGS
@given(worlds)
def test_no_dimension_of_any_node_is_ever_over_committed(world):
    def check(snap, result, asked):
        by_id = {n.id: n for n in snap.nodes}
        for node, held in held_after(snap, result, asked).items():
            n = by_id[node]
            for dim, h in zip(DIMS, held, strict=True):
                cap = getattr(n, dim)
                assert cap is None or h <= cap, (node, dim, h, cap)
    run_stream(world, check)


@SETTINGS
@given(worlds)
def test_a_worker_is_never_placed_where_it_cannot_fit(world):
    def check(snap, result, asked):
        by_id = {n.id: n for n in snap.nodes}
        for a in result.admissions:
            req = request_of(asked[a.job_id])
            for worker in a.placement:
                n = by_id[worker[0][0]]
                for dim, r in zip(DIMS, req, strict=True):
                    cap = getattr(n, dim)
                    assert cap is None or r <= cap
    run_stream(world, check)


def _one(cpu=None, mem=None, disk=None, gpus=1, workers=1) -> QueuedJob:
    return QueuedJob("j", "pa", F, NOW, workers, None, gpus, None, 100, False, None, True,
                     cpu_millicores=cpu, memory_mib=mem, local_disk_gib=disk)


def _node(i=0, cpu=96_000, mem=1_048_576, disk=4_000, gpus=8) -> Node:
    return Node(f"n{i}", F, gpus, "z", "s0", "l0", cpu_millicores=cpu, memory_mib=mem,
                local_disk_gib=disk)


def _lims():
    return {("D", F): limits(64), **{(p, F): limits(16) for p in PROJECTS}}


@SETTINGS
@given(st.sampled_from([1_000, 48_000, 96_000]), st.sampled_from([1_024, 500_000, 1_048_576]),
       st.sampled_from([1, 4_000]), st.sampled_from([1, 2, 8]))
def test_a_worker_that_fits_an_empty_node_in_every_dimension_is_admitted(cpu, mem, disk, gpus):
    result = schedule(Snapshot(NOW, (_node(),), TREE, _lims(), (), (_one(cpu, mem, disk, gpus),)))
    assert [a.job_id for a in result.admissions] == ["j"]


def test_memory_beyond_every_node_is_invalid_and_says_memory():
    snap = Snapshot(NOW, (_node(0), _node(1, mem=524_288)), TREE, _lims(), (), (_one(mem=1_048_577),))
    result = schedule(snap)
    assert result.admissions == ()
    explain = result.explanations["j"]
    assert explain.reason == "invalid" and explain.resource == "memory"
    assert "memory" in explain.message


def test_a_node_whose_cpu_is_taken_strands_its_gpus():
    """One job takes all 96 cores and one GPU: the node's 7 other GPUs are stranded (no core
    left to feed them), so the second job waits for CPU although GPUs are free."""
    first = RunningJob("r", "pb", F, 100, False, NOW, None, (("n0", 0, 1000),),
                       requests=(("n0", 96_000, 1_024, 0),))
    snap = Snapshot(NOW, (_node(0),), TREE, _lims(), (first,), (_one(cpu=1_000),))
    result = schedule(snap)
    assert result.admissions == ()
    assert result.explanations["j"].reason == "resources"
    assert result.explanations["j"].resource == "CPU"
    # Half the cores taken: 48 free cores feed 4 GPUs at the node's share of 12 cores a GPU,
    # so of its 7 free GPUs a 4-GPU worker fits and a 5-GPU one waits for CPU.
    half = RunningJob("r", "pb", F, 100, False, NOW, None, (("n0", 0, 1000),),
                      requests=(("n0", 48_000, 1_024, 0),))
    snap = Snapshot(NOW, (_node(0),), TREE, _lims(), (half,), (_one(mem=1_024, gpus=4),))
    assert [a.job_id for a in schedule(snap).admissions] == ["j"]
    snap = Snapshot(NOW, (_node(0),), TREE, _lims(), (half,), (_one(mem=1_024, gpus=5),))
    result = schedule(snap)
    assert result.admissions == () and result.explanations["j"].resource == "CPU"


def _cuda_node(i, cuda, gpus=8) -> Node:
    return Node(f"n{i}", F, gpus, "z", "s0", "l0", cuda=cuda)


def _needs(version, gpus=1, name="j") -> QueuedJob:
    return QueuedJob(name, "pa", F, NOW, 1, None, gpus, None, 100, False, None, True, min_cuda=version)


def test_nodes_below_the_cuda_version_a_job_requires_are_never_chosen():
    nodes = (_cuda_node(0, (12, 2)), _cuda_node(1, (12, 4)), _cuda_node(2, ()))
    old_only = (_cuda_node(0, (12, 2)),)
    # Packing alone would pick the busiest node: n0 holds 7 GPUs, one left.
    busy = RunningJob("r", "pb", F, 100, False, NOW, None, tuple(("n0", g, 1000) for g in range(7)))
    result = schedule(Snapshot(NOW, nodes, TREE, _lims(), (busy,), (_needs((12, 4)),)))
    assert [w[0][0] for a in result.admissions for w in a.placement] in (["n1"], ["n2"])
    result = schedule(Snapshot(NOW, old_only, TREE, _lims(), (), (_needs((12, 4)),)))
    assert result.admissions == ()
    explain = result.explanations["j"]
    assert explain.reason == "cuda" and explain.resource == "12.4"
    # Without a requirement the same node takes it.
    assert schedule(Snapshot(NOW, old_only, TREE, _lims(), (), (_needs(()),))).admissions


@SETTINGS
@given(st.lists(st.sampled_from([(11, 8), (12, 2), (12, 4), ()]), min_size=1, max_size=5),
       st.lists(st.sampled_from([(), (12, 0), (12, 4)]), min_size=1, max_size=8),
       st.lists(st.sampled_from([1, 2, 4, 8]), min_size=8, max_size=8))
def test_no_job_ever_lands_below_its_cuda_version(versions, wants, sizes):
    nodes = tuple(_cuda_node(i, v) for i, v in enumerate(versions))
    by_id = {n.id: n for n in nodes}
    jobs = tuple(_needs(w, sizes[k], f"j{k}") for k, w in enumerate(wants))
    result = schedule(Snapshot(NOW, nodes, TREE, _lims(), (), jobs))
    wanted = {j.id: j.min_cuda for j in jobs}
    for a in result.admissions:
        for worker in a.placement:
            cuda = by_id[worker[0][0]].cuda
            assert not cuda or cuda >= wanted[a.job_id]


def test_a_waiting_head_reserves_only_nodes_of_its_cuda_version():
    """The head job needs CUDA 12.4: the only such node (n1) is busy for an hour, the old one
    (n0) is free. Its reservation is on n1 at the hour, and n0 stays free for a job that may
    run there (before, it reserved n0, which it will never use, and blocked it)."""
    nodes = (_cuda_node(0, (12, 2)), _cuda_node(1, (12, 4)))
    busy = RunningJob("r", "pb", F, 100, False, NOW, 3600, tuple(("n1", g, 1000) for g in range(8)))
    head = _needs((12, 4), gpus=8, name="head")
    later = QueuedJob("later", "pc", F, NOW + timedelta(seconds=1), 1, None, 8, None, 100, False,
                      None, True)
    result = schedule(Snapshot(NOW, nodes, TREE, _lims(), (busy,), (head, later)))
    (reservation,) = result.reservations
    assert reservation.job_id == "head" and reservation.nodes == ("n1",)
    assert reservation.earliest_start == NOW + timedelta(hours=1)
    assert [(a.job_id, a.placement[0][0][0]) for a in result.admissions] == [("later", "n0")]
    # It waits for GPUs of nodes it may use (n0 is taken now), not for the old node.
    assert result.explanations["head"].reason == "capacity"


@SETTINGS
@given(st.lists(st.sampled_from([(11, 8), (12, 2), (12, 4), ()]), min_size=1, max_size=5),
       st.lists(st.tuples(st.integers(0, 4), st.sampled_from([2, 4, 8]), st.sampled_from([600, 3600, None])),
                max_size=5),
       st.lists(st.tuples(st.sampled_from([(), (12, 0), (12, 4)]), st.sampled_from([4, 8, 16])),
                min_size=1, max_size=6))
def test_no_reservation_ever_names_a_node_below_its_jobs_cuda_version(versions, busy, wants):
    """Whatever runs where and for how long, a waiting job's reservation holds only nodes it may
    run on (the head's and those of the jobs held to FIFO alike)."""
    nodes = tuple(_cuda_node(i, v) for i, v in enumerate(versions))
    by_id = {n.id: n for n in nodes}
    running, taken = [], set()
    for k, (i, gpus, runtime) in enumerate(busy):
        if i >= len(nodes) or i in taken:
            continue
        taken.add(i)
        slots = tuple((f"n{i}", g, 1000) for g in range(gpus))
        running.append(RunningJob(f"r{k}", "pb", F, 500, False, NOW, runtime, slots))
    jobs = tuple(QueuedJob(f"j{k}", "pa", F, NOW + timedelta(seconds=k), 1 if gpus <= 8 else 2, None,
                           min(gpus, 8), None, 100, False, 3600, True, min_cuda=want)
                 for k, (want, gpus) in enumerate(wants))
    result = schedule(Snapshot(NOW, nodes, TREE, _lims(), tuple(running), jobs))
    wanted = {j.id: j.min_cuda for j in jobs}
    for reservation in result.reservations:
        for name in reservation.nodes:
            cuda = by_id[name].cuda
            assert not cuda or cuda >= wanted[reservation.job_id], (reservation, cuda)
