"""The dynamic replay (issue 7): metrics on a hand-checked trace, the production engine in the
loop, pooled vs static. Pure: no database."""

import json

import pytest

from jobs.whatif.replay import sim
from jobs.whatif.replay.csvtrace import TraceError, read_trace
from jobs.whatif.replay.metrics import percentile
from jobs.whatif.replay.sim import Options, assign_flavors, repeat_jobs, simulate
from jobs.whatif.replay.spec import derive_quotas, load_spec, tenant_tree
from jobs.whatif.replay.trace import TraceJob, TraceNode

F = "F"
ONE_NODE = [TraceNode("n0", 4, F)]
HALF = {"a/x": {F: 2000}, "b/y": {F: 2000}}  # C = 4 GPUs, quota 2 each


def hand_trace():
    # j1 (a/x) borrows b's idle quota: 4 GPUs at t=0 for 100 s. j2 (b/y) wants its 2 GPUs
    # back at t=10 for 50 s: in quota → reclaims j1 (grace 0), which waits and restarts at 60.
    return [TraceJob("j1", 0, 100, 4, tenant="a/x"), TraceJob("j2", 10, 50, 2, tenant="b/y")]


def test_pooled_metrics_by_hand():
    r = simulate(hand_trace(), ONE_NODE, HALF, Options(policy="pooled"))
    assert (r["jobs"], r["finished"], r["never_started"], r["preemptions"]) == (2, 2, 0, 1)
    # delays: j1 0 + (60 − 10) = 50 (restarts after j2), j2 0
    assert r["avg_queue_delay_s"] == 25
    assert (r["p50_queue_delay_s"], r["p95_queue_delay_s"]) == (0, 50)  # nearest rank
    assert r["avg_jct_s"] == (160 + 50) / 2  # j1 ends 60 + 100 (restart from zero)
    assert r["makespan_s"] == 160
    # allocated: j1 4×10 + j2 2×50 + j1 4×100 = 540 GPU-s of 4 × 160
    assert r["gpu_allocation_rate"] == pytest.approx(540 / 640)
    # idle quota: b 2×10, a 2×50, b 2×100 = 320; used beyond quota: a 2×10 + a 2×100 = 220
    assert r["idle_quota_gpu_s"] == pytest.approx(320)
    assert r["borrowed_gpu_s"] == pytest.approx(220)
    assert r["idle_quota_reuse_ratio"] == pytest.approx(220 / 320)
    assert r["tenants"]["a/x"]["gpu_hours"] == pytest.approx(440 / 3600)
    assert r["tenants"]["b/y"] == {"jobs": 1, "finished": 1, "avg_queue_delay_s": 0, "p95_queue_delay_s": 0,
                                   "p99_queue_delay_s": 0, "max_queue_delay_s": 0, "waited_over_bound": 0,
                                   "avg_jct_s": 50, "gpu_hours": pytest.approx(100 / 3600),
                                   "quota_gpus": {F: 2.0}}
    # p99 and max: j1's 50 s; neither waited over the default bound of 3,600 s
    assert (r["p99_queue_delay_s"], r["max_queue_delay_s"], r["waited_over_bound"]) == (50, 50, 0)
    assert r["tenants"]["a/x"]["max_queue_delay_s"] == 50


def test_static_metrics_by_hand():
    r = simulate(hand_trace(), ONE_NODE, HALF, Options(policy="static"))
    # j1 (4 GPUs) exceeds a's quota of 2 and never runs; j2 runs 10..60.
    assert (r["jobs"], r["finished"], r["never_started"], r["preemptions"]) == (2, 1, 1, 0)
    assert r["avg_queue_delay_s"] == 0
    assert r["makespan_s"] == 60
    assert r["gpu_allocation_rate"] == pytest.approx(100 / (4 * 60))
    assert r["idle_quota_gpu_s"] == pytest.approx(2 * 10 + 2 * 60)  # b idle 0..10, a idle 0..60
    assert r["idle_quota_reuse_ratio"] == 0


def test_no_borrowing_flag_is_static():
    pooled_off = simulate(hand_trace(), ONE_NODE, HALF, Options(policy="pooled", borrowing=False))
    static = simulate(hand_trace(), ONE_NODE, HALF, Options(policy="static"))
    for key in ("finished", "never_started", "avg_queue_delay_s", "gpu_allocation_rate", "makespan_s"):
        assert pooled_off[key] == static[key]


def test_grace_and_checkpointing():
    r = simulate(hand_trace(), ONE_NODE, HALF, Options(grace=5, checkpointing=True))
    # j1 signalled at 10, exits at 15 having run 15 s (85 left); j2 starts at 15, ends 65;
    # j1 resumes at 65 and ends at 150.
    assert r["preemptions"] == 1
    assert r["tenants"]["b/y"]["avg_queue_delay_s"] == 5
    assert r["tenants"]["a/x"]["avg_queue_delay_s"] == 50
    assert r["makespan_s"] == 150
    assert r["gpu_allocation_rate"] == pytest.approx((4 * 15 + 2 * 50 + 4 * 85) / (4 * 150))


def two_tenant_trace():
    # a submits a burst of 1-GPU jobs; b (same quota) is idle early and busy late.
    jobs = [TraceJob(f"a{i}", i, 100, 1, tenant="a/x") for i in range(24)]
    jobs += [TraceJob(f"b{i}", 400 + i, 100, 1, tenant="b/y") for i in range(24)]
    return jobs


def test_pooled_queues_less_than_static():
    nodes = [TraceNode("n0", 8, F), TraceNode("n1", 8, F)]
    quotas = {"a/x": {F: 8000}, "b/y": {F: 8000}}
    pooled = simulate(two_tenant_trace(), nodes, quotas, Options(policy="pooled"))
    static = simulate(two_tenant_trace(), nodes, quotas, Options(policy="static"))
    assert pooled["finished"] == static["finished"] == 48
    assert pooled["avg_queue_delay_s"] < 0.5 * static["avg_queue_delay_s"]
    assert pooled["idle_quota_reuse_ratio"] > 0 == static["idle_quota_reuse_ratio"]
    assert pooled["makespan_s"] < static["makespan_s"]


def test_replay_runs_the_production_engine(monkeypatch):
    """A rule changed in the engine changes the replay: rule 4 made to hold back every idle
    GPU (lend limit 0 everywhere) → pooled behaves like static (j1 can never borrow)."""
    from quotas.admission import INF, Ledger

    monkeypatch.setattr(Ledger, "sibling_hold", lambda self, path: INF)
    r = simulate(hand_trace(), ONE_NODE, HALF, Options(policy="pooled"))
    assert (r["never_started"], r["preemptions"], r["idle_quota_reuse_ratio"]) == (1, 0, 0)


def test_engine_flags_reach_the_engine():
    seen = []

    def factory(snap, **kw):
        seen.append(kw)
        return sim.Engine(snap, **kw)

    simulate(hand_trace(), ONE_NODE, HALF,
             Options(policy="pooled", backfill=False, fragmentation_aware=False), engine_factory=factory)
    simulate(hand_trace(), ONE_NODE, HALF, Options(policy="static"), engine_factory=factory)
    assert seen == [{"fragmentation_aware": False, "backfill": False, "borrowing": True},
                    {"fragmentation_aware": True, "backfill": True, "borrowing": False}]


def test_coalescing_runs_one_cycle_per_window():
    jobs = [TraceJob(f"j{i}", i * 0.1, 10, 1, tenant="a/x") for i in range(5)]
    r = simulate(jobs, ONE_NODE, {"a/x": {F: 4000}}, Options(coalesce=1.0))
    fine = simulate(jobs, ONE_NODE, {"a/x": {F: 4000}}, Options(coalesce=0.0))
    assert r["cycles"] < fine["cycles"]
    assert r["finished"] == fine["finished"] == 5


def test_derived_quotas_sum_to_capacity_and_follow_demand():
    jobs = [TraceJob("a", 0, 300, 1, tenant="t/a"), TraceJob("b", 0, 100, 1, tenant="t/b"),
            TraceJob("c", 0, 100, 1, gpu_types=("G",), tenant="t/c")]
    nodes = [TraceNode("n0", 8, F), TraceNode("n1", 2, "G")]
    flavors = assign_flavors(jobs, nodes)
    assert flavors == {"a": F, "b": F, "c": "G"}
    q = derive_quotas(jobs, flavors, {F: 8000, "G": 2000}, 300)
    assert q == {"t/a": {F: 6000}, "t/b": {F: 2000}, "t/c": {"G": 2000}}
    tree, limits = tenant_tree(["t/a", "t/b", "t/c"], q)
    assert [(n.id, n.parent_id, n.kind) for n in tree] == [
        ("t", None, "department"), ("t/a", "t", "project"), ("t/b", "t", "project"), ("t/c", "t", "project")]
    assert limits[("t", F)].quota == 8000 and limits[("t", "G")].quota == 2000
    # equal split: a and b share F evenly whatever their demand; c alone in G; unknown split refused
    assert derive_quotas(jobs, flavors, {F: 8000, "G": 2000}, 300, "equal") == {
        "t/a": {F: 4000}, "t/b": {F: 4000}, "t/c": {"G": 2000}}
    with pytest.raises(ValueError, match="quota split"):
        derive_quotas(jobs, flavors, {F: 8000}, 300, "fair")


def test_assign_flavors_spreads_unconstrained_by_capacity_and_skips_impossible():
    nodes = [TraceNode("big", 8, "A"), TraceNode("s0", 2, "B"), TraceNode("s1", 2, "B")]
    jobs = [TraceJob(f"j{i}", i, 10, 1) for i in range(12)]
    jobs += [TraceJob("gang", 0, 10, 8), TraceJob("nowhere", 0, 10, 16), TraceJob("cpu", 0, 10, 0)]
    got = assign_flavors(jobs, nodes)
    spread = [got[f"j{i}"] for i in range(12)]
    assert spread.count("A") == 8 and spread.count("B") == 4  # ∝ capacity 8 : 4
    assert got["gang"] == "A" and "nowhere" not in got and "cpu" not in got


def test_repeat_and_scale():
    jobs = [TraceJob("a", 0, 5, 1), TraceJob("b", 9, 5, 1)]
    out = repeat_jobs(jobs, 2, 2.0)
    assert [(j.job_id, j.submit_time) for j in out] == [("a", 0), ("b", 4.5), ("a#1", 5), ("b#1", 9.5)]


def test_percentile_nearest_rank():
    assert percentile([], 50) == 0
    assert percentile([3, 1, 2, 4], 50) == 2
    assert percentile(list(range(1, 101)), 95) == 95


def test_csv_and_spec_files(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,workers\n"
                     "j1,0,100,4,,,a/x,,,\n"
                     "j2,10,50,2,,A|B,b/y,inference,200,1\n"
                     "j3,20,,1,500,,,,,\n")
    jobs = read_trace(trace)
    assert jobs[0] == TraceJob("j1", 0, 100, 4, tenant="a/x")
    assert jobs[1].gpu_types == ("A", "B") and jobs[1].priority == 200 and jobs[1].kind == "inference"
    assert jobs[2].duration is None and jobs[2].gpu_milli == 500 and jobs[2].tenant == "default/default"
    bad = tmp_path / "bad.csv"
    bad.write_text("job_id,submit_time,num_gpus\nj1,zero,1\n")
    with pytest.raises(TraceError, match="line 2"):
        read_trace(bad)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"nodes": [{"flavor": F, "count": 2, "gpus_per_node": 2}],
                                "quotas": {"a/x": {F: 2}, "b/y": {F: 2}}}))
    nodes, quotas = load_spec(spec)
    assert [n.gpus for n in nodes] == [2, 2] and quotas == HALF


def test_reuse_counts_only_others_idle_quota():
    """Quotas summing to less than the capacity: use of unassigned GPUs is not reuse of idle
    quota. a/x (quota 1) runs 3 GPUs for 100 s on a 4-GPU node while b/y (quota 1) is idle: usage
    beyond quota 2 GPU, idle quota 1 GPU → only 1 GPU of it is others' idle quota reused."""
    r = simulate([TraceJob("j1", 0, 100, 3, tenant="a/x")], ONE_NODE,
                 {"a/x": {F: 1000}, "b/y": {F: 1000}}, Options(policy="pooled"))
    assert r["finished"] == 1  # the engine lets a/x use b's idle quota and the unassigned GPUs
    assert r["idle_quota_gpu_s"] == pytest.approx(100)  # b: 1 GPU × 100 s
    assert r["borrowed_gpu_s"] == pytest.approx(100)  # min(beyond quota 2, idle 1) × 100 s (was 200)
    assert r["idle_quota_reuse_ratio"] == pytest.approx(1.0)  # (was 2.0: above 1, not a share)


def test_an_observer_sees_snapshots_and_starts_and_the_forecast_of_a_sample_comes_true():
    """bench/estimates.py's hook (issue 24): samples of the replay's state as the engine's
    snapshot, the starts as they happen; with exact limits and no later arrival the forecast
    at t=0 is what then happens."""
    from jobs.scheduler.forecast import forecast

    class Watch(sim.Observer):
        every = 1.0

        def __init__(self):
            self.snaps, self.starts = [], {}

        def sample(self, t, snapshot, requeue):
            self.snaps.append((t, snapshot))

        def started(self, job_id, t):
            self.starts[job_id] = t

    jobs = [TraceJob("a", 0, 100, 4, tenant="a/x"), TraceJob("b", 0, 30, 4, tenant="b/y"),
            TraceJob("c", 0, 50, 4, tenant="a/x")]
    watch = Watch()
    simulate(jobs, ONE_NODE, {"a/x": {F: 4000}, "b/y": {F: 4000}}, Options(policy="static", limit_factor=2),
             observer=watch)
    t, first = watch.snaps[0]
    assert t == 0 and [r.id for r in first.running] == ["a"] and {q.id for q in first.queued} == {"b", "c"}
    assert first.running[0].max_runtime_seconds == 200  # 2 × the true duration
    found = forecast(first, borrowing=False)
    assert {j: (at - first.now).total_seconds() for j, at in found.starts.items()} == {"b": 200, "c": 260}
    assert watch.starts == {"a": 0, "b": 100, "c": 130}  # earlier: jobs end before their limits


# -- CPU and memory (issue 33 item 7) --------------------------------------------------------
GIB = 1024


def memory_trace():
    # One node of 4 GPUs and 100 GiB (25 GiB per GPU). "big" asks 1 GPU and 90 GiB for 100 s: its
    # footprint is 4 GPUs' share, it takes its 1 GPU and 90 GiB, and the 10 GiB left feed no GPU at
    # the share — 3 free GPUs stranded. "small" (1 GPU, 20 GiB) at t=10 waits for big's memory.
    nodes = [TraceNode("n0", 4, F, cpu_milli=64000, memory_mib=100 * GIB)]
    jobs = [TraceJob("big", 0, 100, 1, tenant="a/x", memory_mib=90 * GIB),
            TraceJob("small", 10, 10, 1, tenant="a/x", memory_mib=20 * GIB)]
    return jobs, nodes


def test_memory_binds_a_job_waits_beside_free_gpus_and_they_count_as_stranded():
    jobs, nodes = memory_trace()
    r = simulate(jobs, nodes, {"a/x": {F: 4000}}, Options(policy="pooled"))
    assert r["resources"] is True
    assert (r["finished"], r["never_started"]) == (2, 0)
    assert r["max_queue_delay_s"] == 90  # small starts when big ends at 100, not at 10
    assert r["makespan_s"] == 110
    # 3 GPUs stranded from 0 to 100 (then small's 20 GiB leave 80: 3 usable of 3 free)
    assert r["stranded_gpus_max"] == 3
    assert r["stranded_gpu_hours"] == pytest.approx(3 * 100 / 3600)
    assert r["stranded_gpus_mean"] == pytest.approx(300 / 110)


def test_without_resources_the_same_trace_places_gpus_only():
    jobs, nodes = memory_trace()
    r = simulate(jobs, nodes, {"a/x": {F: 4000}}, Options(policy="pooled", resources=False))
    assert r["resources"] is False
    assert r["max_queue_delay_s"] == 0 and r["makespan_s"] == 100
    assert (r["stranded_gpus_max"], r["stranded_gpu_hours"]) == (0, 0)


def test_a_flavor_whose_share_cannot_feed_the_worker_is_not_assigned():
    # "S" has 4 cores per GPU: a 1-GPU worker asking 16 cores would take 4 GPUs' share, more than
    # its 2-GPU node has; "L" (32 cores per GPU) holds it. Without the request S is the choice.
    nodes = [TraceNode("s0", 2, "S", cpu_milli=8000, memory_mib=64 * GIB),
             TraceNode("l0", 2, "L", cpu_milli=64000, memory_mib=64 * GIB)]
    hungry = TraceJob("j", 0, 10, 1, cpu_milli=16000)
    assert assign_flavors([hungry], nodes) == {"j": "L"}
    assert assign_flavors([TraceJob("k", 0, 10, 1)], nodes) == {"k": "L"}  # balanced: ties by name
    assert assign_flavors([TraceJob("m", 0, 10, 1, gpu_types=("S",))], nodes) == {"m": "S"}
    assert assign_flavors([TraceJob("h", 0, 10, 1, cpu_milli=16000, gpu_types=("S",))], nodes) == {}


def test_a_rebuilt_engine_keeps_the_running_jobs_memory():
    """A limit change rebuilds the engine from a snapshot of the running jobs (World.changes): big's
    90 GiB go with it (RunningJob.requests), so small still waits for them; counted as its GPU's
    share only, small would start at 10."""
    jobs, nodes = memory_trace()
    tree, limits = tenant_tree({"a/x"}, {"a/x": {F: 4000}})
    world = sim.World(tree, limits, changes=((5.0, limits),))
    r = simulate(jobs, nodes, options=Options(policy="pooled"), world=world)
    assert r["max_queue_delay_s"] == 90 and r["stranded_gpus_max"] == 3
