"""Regression: the model → flavor mapping of unconstrained jobs (jobs.whatif.replay.sim.assign_flavors).

It used to balance GPU-*seconds* per flavor over the whole trace. On the Alibaba 2023 default
trace (no pod names a GPU model) a few months-long pods then "filled" the 4,392-GPU G2 share, and
the short pods were all sent to the small flavors: 625 pods on the 2-GPU A10 (317 on G2). With
arrivals compressed 100×, A10 alone held 93 % (static) / 100 % (pooled) of all queueing — hours of
average queue at 1.6 % pool allocation. The mapping now balances requested GPUs ∝ capacity.
Pure: no database."""

from jobs.whatif.replay.sim import Options, assign_flavors, simulate
from jobs.whatif.replay.trace import TraceJob, TraceNode

BIG = [TraceNode(f"b{i}", 8, "BIG") for i in range(8)]  # 64 GPUs
SMALL = [TraceNode("s0", 2, "SMALL")]  # 2 GPUs


def heavy_tailed():
    # one pod that lives for ~a month, then a burst of short pods (10 s, one a second)
    return [TraceJob("long", 0, 3_000_000, 1, tenant="t/a")] + [
        TraceJob(f"s{i:03d}", 1 + i, 10, 1, tenant="t/a") for i in range(200)]


def test_a_long_job_does_not_push_the_short_ones_onto_the_small_flavor():
    got = assign_flavors(heavy_tailed(), BIG + SMALL)
    small = sum(1 for f in got.values() if f == "SMALL")
    # ∝ capacity 64 : 2 → about 201 × 2/66 ≈ 6 jobs; the old rule sent all 200 short ones
    assert small <= 7
    assert got["long"] == "BIG"


def test_the_burst_does_not_queue_on_a_nearly_empty_pool():
    for policy in ("static", "pooled"):
        r = simulate(heavy_tailed(), BIG + SMALL, None, Options(policy=policy))
        assert r["never_started"] == 0
        # at most the 1 s coalescing window (was ≈ 400 s on average with the old mapping)
        assert r["avg_queue_delay_s"] <= 1.0, policy
        assert r["p95_queue_delay_s"] <= 1.0, policy


def test_constrained_jobs_count_in_their_flavor():
    nodes = [TraceNode("a0", 4, "A"), TraceNode("b0", 4, "B")]
    jobs = [TraceJob(f"c{i}", i, 10, 1, gpu_types=("A",)) for i in range(4)]
    jobs += [TraceJob(f"u{i}", 10 + i, 10, 1) for i in range(4)]
    got = assign_flavors(jobs, nodes)
    assert [got[f"u{i}"] for i in range(4)] == ["B"] * 4  # A already has its share
