"""Property tests: random trees, limits, clusters and job streams run through several cycles;
the invariants of DESIGN §3/§5 must hold after every cycle."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta

from coresnap import NOW, F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.scheduler.scheduler import (
    Limits,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    TreeNode,
    schedule,
)

SETTINGS = settings(max_examples=60, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def worlds(draw):
    """A tenant tree with limits, a cluster and a stream of jobs (submitted over 3 cycles)."""
    tree, lims, projects = [], {}, []
    for d in range(draw(st.integers(1, 3))):
        dep = f"D{d}"
        tree.append(TreeNode(dep, None, "department"))
        lims[(dep, F)] = draw(limit_values())
        parents = [dep]
        if draw(st.booleans()):
            sub = f"D{d}s"
            tree.append(TreeNode(sub, dep, "department"))
            lims[(sub, F)] = draw(limit_values())
            parents.append(sub)
        for k in range(draw(st.integers(1, 3))):
            pid = f"p{d}{k}"
            tree.append(TreeNode(pid, draw(st.sampled_from(parents)), "project"))
            if draw(st.booleans()):
                lims[(pid, F)] = draw(limit_values())
            projects.append(pid)
    # Clusters share topology names (a leaf "l0" in c1 and in c2): names are per cluster.
    nodes = tuple(Node(f"n{i}", F, draw(st.sampled_from([8, 8, 4])), "z", f"s{i // 4}",
                       f"l{i // 2}", draw(st.sampled_from([True, True, True, False])),
                       cluster=draw(st.sampled_from(["c1", "c1", "c2"])))
                  for i in range(draw(st.integers(1, 5))))
    jobs = draw(st.lists(job_values(projects), min_size=1, max_size=20))
    seed = draw(st.integers(0, 1000))
    return tuple(tree), lims, nodes, jobs, seed


def limit_values():
    return st.builds(
        lambda q, b, lend: Limits(q * 1000, None if b is None else b * 1000,
                                  None if lend is None else min(lend, q) * 1000),
        st.integers(0, 16), st.none() | st.integers(0, 8), st.none() | st.integers(0, 16))


def job_values(projects):
    return st.fixed_dictionaries({
        "project": st.sampled_from(projects),
        "gpus": st.sampled_from([1, 1, 2, 3, 4, 8]),
        "workers": st.integers(1, 3),
        "elastic": st.booleans(),
        "shared": st.none() | st.sampled_from([250, 500, 700]),
        "priority": st.sampled_from([50, 100, 500]),
        "preemptible": st.booleans(),
        "runtime": st.none() | st.sampled_from([600, 1800, 7200]),
        "cycle": st.integers(0, 2),
        "approved": st.booleans(),
    })


def make_job(k: int, spec: dict, now) -> QueuedJob:
    shared = spec["shared"]
    workers = 1 if shared else spec["workers"]
    return QueuedJob(f"j{k:02d}", spec["project"], F, now - timedelta(seconds=k), workers,
                     1 if spec["elastic"] else None, spec["gpus"], shared, spec["priority"],
                     spec["preemptible"], spec["runtime"], spec["approved"])


def run_stream(world, check, **flags):
    """Three cycles; decisions applied between them (victims exit at once, some jobs end)."""
    tree, lims, nodes, jobs, seed = world
    rng = random.Random(seed)
    over = frozenset(rng.sample([t.id for t in tree], 1)) if seed % 5 == 0 else frozenset()
    running: dict[str, RunningJob] = {}
    waiting: dict[str, QueuedJob] = {}
    for cycle in range(3):
        now = NOW + timedelta(minutes=10 * cycle)
        for k, spec in enumerate(jobs):
            if spec["cycle"] == cycle:
                waiting[f"j{k:02d}"] = make_job(k, spec, now)
        snap = Snapshot(now, nodes, tree, lims, tuple(running.values()),
                        tuple(waiting.values()), over)
        result = schedule(snap, **flags)
        check(snap, result)
        for p in result.preemptions:
            victim = running.pop(p.victim_id)
            waiting[victim.id] = QueuedJob(victim.id, victim.project_id, F, now, 1, None, 1)
        for a in result.admissions:
            q = waiting.pop(a.job_id)
            slots = tuple(x for w in a.placement for x in w)
            running[a.job_id] = RunningJob(a.job_id, q.project_id, F, q.priority, q.preemptible,
                                           now, q.max_runtime_seconds, slots)
        for jid in sorted(running):
            if rng.random() < 0.3:
                del running[jid]


def live_after(snap: Snapshot, result) -> list[tuple[str, str, tuple]]:
    """(job id, project, slots) of every job holding GPUs after the cycle's decisions."""
    gone = {p.victim_id for p in result.preemptions}
    out = [(j.id, j.project_id, j.placement) for j in snap.running if j.id not in gone]
    queued = {q.id: q for q in snap.queued}
    out += [(a.job_id, queued[a.job_id].project_id, tuple(x for w in a.placement for x in w))
            for a in result.admissions]
    return out


def ancestors(tree: tuple[TreeNode, ...], project: str) -> list[str]:
    parent = {t.id: t.parent_id for t in tree}
    path, n = [], project
    while n is not None:
        path.append(n)
        n = parent[n]
    return path


# -- invariants --------------------------------------------------------------------------
@SETTINGS
@given(worlds())
def test_usage_never_exceeds_capacity_per_flavor(world):
    def check(snap, result):
        per_gpu: dict[tuple[str, int], int] = defaultdict(int)
        healthy = {n.id for n in snap.nodes if n.schedulable}
        for _, _, slots in live_after(snap, result):
            for node, gpu, milli in slots:
                per_gpu[(node, gpu)] += milli
        assert all(m <= 1000 for m in per_gpu.values())
        for a in result.admissions:
            assert all(s[0] in healthy for w in a.placement for s in w)
        total = sum(m for (node, _), m in per_gpu.items() if node in healthy)
        assert total <= sum(n.gpus for n in snap.nodes if n.schedulable) * 1000
    run_stream(world, check)


@SETTINGS
@given(worlds())
def test_each_tree_node_stays_within_quota_plus_permitted_borrowing(world):
    def check(snap, result):
        usage: dict[str, int] = defaultdict(int)
        for _, project, slots in live_after(snap, result):
            for n in ancestors(snap.tree, project):
                usage[n] += sum(m for _, _, m in slots)
        for (n, _), lim in snap.limits.items():
            if lim.borrow_limit is not None:
                assert usage[n] <= lim.quota + lim.borrow_limit, n
    run_stream(world, check)


@SETTINGS
@given(worlds())
def test_only_on_loan_jobs_are_preempted_across_tenants(world):
    def check(snap, result):
        split = schedule(Snapshot(snap.now, snap.nodes, snap.tree, snap.limits,
                                  snap.running)).on_loan  # rule 1 at the cycle's start
        runs = {j.id: j for j in snap.running}
        queued = {q.id: q for q in snap.queued}
        for p in result.preemptions:
            victim, job = runs[p.victim_id], queued[p.for_job_id]
            if victim.project_id != job.project_id:
                # reclaim (rule 5), or borrowing within the cohort: a lower priority on loan
                assert p.reason in ("reclaim", "borrow") and split[victim.id] is True
                assert p.reason == "reclaim" or victim.priority < job.priority
            if p.reason == "priority":
                assert victim.project_id == job.project_id
                assert victim.preemptible and victim.priority < job.priority
    run_stream(world, check)


@SETTINGS
@given(worlds())
def test_a_gang_is_all_or_nothing(world):
    def check(snap, result):
        queued = {q.id: q for q in snap.queued}
        for a in result.admissions:
            q = queued[a.job_id]
            low = q.min_workers if q.min_workers is not None else q.workers
            assert low <= a.workers <= q.workers and len(a.placement) == a.workers
            for worker in a.placement:
                assert len({node for node, _, _ in worker}) == 1
                if q.gpu_milli is not None:
                    assert [m for _, _, m in worker] == [q.gpu_milli]
                else:
                    assert len(worker) == q.gpus_per_worker
                    assert all(m == 1000 for _, _, m in worker)
    run_stream(world, check)


@SETTINGS
@given(worlds(), st.booleans())
def test_item3_no_admission_or_reservation_spans_two_clusters(world, frag):
    def check(snap, result):
        cluster = {n.id: n.cluster for n in snap.nodes}
        for a in result.admissions:
            assert len({cluster[node] for w in a.placement for node, _, _ in w}) == 1, a
        for r in result.reservations:
            assert len({cluster[node] for node in r.nodes}) == 1, r
    run_stream(world, check, fragmentation_aware=frag)


@SETTINGS
@given(worlds(), st.booleans(), st.booleans(), st.booleans())
def test_invariants_hold_in_every_policy_mode(world, frag, backfill, borrowing):
    """Replay compares plain best fit, no backfill and no borrowing: same invariants."""
    def check(snap, result):
        per_gpu: dict[tuple[str, int], int] = defaultdict(int)
        for _, _, slots in live_after(snap, result):
            for node, gpu, milli in slots:
                per_gpu[(node, gpu)] += milli
        assert all(m <= 1000 for m in per_gpu.values())
        if not borrowing:
            assert all(a.in_quota for a in result.admissions if not a.preempts)
        if not backfill:
            assert result.reservations == ()
    run_stream(world, check, fragmentation_aware=frag, backfill=backfill, borrowing=borrowing)


@SETTINGS
@given(worlds())
def test_the_same_snapshot_gives_the_same_decisions(world):
    def check(snap, result):
        rng = random.Random(len(snap.queued))
        again = schedule(Snapshot(snap.now, tuple(rng.sample(snap.nodes, len(snap.nodes))),
                                  tuple(rng.sample(snap.tree, len(snap.tree))), snap.limits,
                                  tuple(rng.sample(snap.running, len(snap.running))),
                                  tuple(rng.sample(snap.queued, len(snap.queued))),
                                  snap.over_budget_tenants))
        assert again.admissions == result.admissions
        assert again.preemptions == result.preemptions
        assert again.reservations == result.reservations
        assert dict(again.on_loan) == dict(result.on_loan)
        assert dict(again.explanations) == dict(result.explanations)
    run_stream(world, check)


@SETTINGS
@given(nodes=st.integers(1, 4), size=st.sampled_from([4, 8]), gpus=st.integers(1, 8),
       workers=st.integers(1, 3), fill=st.lists(st.integers(1, 8), min_size=1, max_size=12),
       priority=st.sampled_from([0, 100, 1000]), lend=st.none() | st.integers(0, 8))
def test_in_quota_job_blocked_only_by_on_loan_usage_is_admitted_within_one_cycle(
        nodes, size, gpus, workers, fill, priority, lend):
    gpus = min(gpus, size)
    workers = min(workers, nodes * (size // gpus))
    cluster = tuple(Node(f"n{i}", F, size, "z", "s", f"l{i}") for i in range(nodes))
    capacity = nodes * size
    tree = (TreeNode("A", None, "department"), TreeNode("a", "A"),
            TreeNode("B", None, "department"), TreeNode("b", "B"))
    lims = {("A", F): Limits(capacity * 1000, None, None if lend is None else lend * 1000),
            ("a", F): Limits(capacity * 1000)}  # B and b have no quota: all b runs on loan
    running, free = [], {(f"n{i}", g) for i in range(nodes) for g in range(size)}
    for k, want in enumerate(fill):  # b fills the cluster with jobs of many sizes
        for i in range(nodes):
            spots = sorted(g for n, g in free if n == f"n{i}")[:want]
            if len(spots) == want:
                free -= {(f"n{i}", g) for g in spots}
                running.append(RunningJob(f"b{k}", "b", F, priority, False,
                                          NOW - timedelta(seconds=k), None,
                                          tuple((f"n{i}", g, 1000) for g in spots)))
                break
    job = QueuedJob("mine", "a", F, NOW, workers, None, gpus)
    result = schedule(Snapshot(NOW, cluster, tree, lims, tuple(running), (job,)))
    assert [a.job_id for a in result.admissions] == ["mine"]
    assert result.admissions[0].in_quota
    assert {p.victim_id for p in result.preemptions} <= {r.id for r in running}
