"""Starvation (issue 25 item 4) on the pure engine through the replay: a project's 64-GPU job
behind a steady stream of 1-GPU jobs of the same project that keeps it at its quota.

The pool: 16 nodes × 8 GPUs = 128, projects ``d/big`` and ``d/idle`` with quota 64 each, static
policy (no borrowing: the big job waits for its own project's quota, never for capacity). The
stream: a 1-GPU job of ``d/big`` every 10 s for 4 h, each running D = 640 s, so 64 run at any
time — each finish frees one GPU just as the next job arrives. The big job (8 workers × 8 GPUs,
600 s) arrives at t = 1,005 s, when the project holds its 64 GPUs.

* best effort: every freed GPU goes to the next small job; the big job waits until the stream
  ends (t = 14,400 s), then for the last small jobs to finish: far past the 3,600 s bound.
* strict FIFO: the big job blocks the later small jobs; the 64 running ones end within D, so it
  starts within D of its submission (the stated bound, + the 1 s coalescing window).
* best effort with an aging bound B = 1,800 s: it blocks once it has waited B, and starts within
  B + D of its submission.
"""

import json

import pytest

from jobs.whatif.replay.sim import Options, simulate
from jobs.whatif.replay.spec import load_queueing
from jobs.whatif.replay.trace import TraceJob, TraceNode

F = "A100"
NODES = [TraceNode(f"n{i:02d}", 8, F) for i in range(16)]
QUOTAS = {"d/big": {F: 64_000}, "d/idle": {F: 64_000}}
D = 640.0  # a small job's duration
STREAM_END = 4 * 3600.0
BIG_AT = 1005.0


def trace() -> list[TraceJob]:
    small = [TraceJob(f"s{k:05d}", k * 10.0, D, 1, tenant="d/big") for k in range(int(STREAM_END / 10))]
    big = TraceJob("big", BIG_AT, 600.0, 8, tenant="d/big", workers=8)
    return [*small, big]


def run(**options) -> dict:
    return simulate(trace(), NODES, QUOTAS, Options(policy="static", detail=True, **options))


def big_delay(result: dict) -> float:
    return result["job_queue_delay_s"]["big"]


def test_best_effort_starves_the_big_job_until_the_stream_ends():
    r = run()
    assert big_delay(r) > STREAM_END - BIG_AT  # it started only once the stream had ended
    assert r["max_queue_delay_s"] == big_delay(r)
    assert r["waited_over_bound"] == 1 and r["tenants"]["d/big"]["waited_over_bound"] == 1
    assert r["wait_bound_s"] == 3600
    small = [d for j, d in r["job_queue_delay_s"].items() if j != "big"]
    assert max(small) <= 1  # the small jobs never waited (the coalescing window)


def test_best_effort_big_job_never_starts_within_a_shorter_horizon():
    jobs = [j for j in trace() if j.submit_time <= 7200]  # the stream lasts the whole horizon
    jobs = [j if j.job_id == "big" else TraceJob(j.job_id, j.submit_time, None, 1, tenant=j.tenant)
            for j in jobs]  # small jobs that never end: the project stays at its quota
    r = simulate(jobs, NODES, QUOTAS, Options(policy="static"))
    assert r["never_started"] >= 1
    assert r["waited_over_bound"] >= 1  # the big job, still waiting at the end, counts


def test_strict_fifo_starts_the_big_job_within_one_small_job_duration():
    r = run(queueing_by_tenant={"d/big": "strict_fifo"})
    assert big_delay(r) <= D + 1
    assert r["queueing_by_tenant"] == {"d/big": "strict_fifo"}
    assert r["finished"] == r["jobs"]
    # The price: the small jobs behind it waited (the project's GPUs drained for the big job).
    assert max(d for j, d in r["job_queue_delay_s"].items() if j != "big") > 0


def test_strict_fifo_for_every_project_flag():
    assert big_delay(run(queueing="strict_fifo")) <= D + 1


def test_aging_bound_turns_best_effort_strict_for_the_job_that_waited_too_long():
    bound = 1800.0
    r = run(aging_bound_s=bound)
    assert bound < big_delay(r) <= bound + D + 1
    assert r["aging_bound_s"] == bound
    assert r["waited_over_bound"] == 0  # nobody queued longer than 3,600 s


def test_strict_fifo_elsewhere_changes_nothing():
    """Strict FIFO of another project (and no aging) decides exactly as best effort."""
    base = run()
    other = run(queueing_by_tenant={"d/idle": "strict_fifo"})
    assert other["job_queue_delay_s"] == base["job_queue_delay_s"]


def test_queueing_keys_of_the_spec(tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"nodes": [{"flavor": F, "count": 1, "gpus_per_node": 8}],
                                "queueing": {"d/big": "strict_fifo"}, "aging_bound_s": 7200}))
    assert load_queueing(spec) == ({"d/big": "strict_fifo"}, 7200.0)
    for bad in ({"queueing": {"d/big": "lifo"}}, {"aging_bound_s": -1}, {"aging_bound_s": "1h"},
                {"queueing": ["d/big"]}):
        spec.write_text(json.dumps({"nodes": [{"flavor": F, "count": 1, "gpus_per_node": 8}], **bad}))
        with pytest.raises(ValueError):
            load_queueing(spec)
    with pytest.raises(ValueError, match="--queueing"):
        run(queueing="fifo")
