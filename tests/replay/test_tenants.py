"""Load and tenant options of the replay (issue 7): ``--tenants``, ``--start``, ``--overlay``.
Pure: no database."""

from collections import Counter

import pytest

from jobs.whatif.replay.sim import overlay_jobs, prepare, start_at
from jobs.whatif.replay.spec import parse_tenants, project_name, split_tenants, zipf_weights
from jobs.whatif.replay.trace import TraceJob


def trace(n=2000):
    return [TraceJob(f"pod-{i:05d}", float(i), 10.0, 1 + i % 2, tenant="LS/default") for i in range(n)]


def test_parse_tenants():
    assert parse_tenants("trace") == ("trace", 0)
    assert parse_tenants("hash:8") == ("hash", 8)
    assert parse_tenants("shape:3") == ("shape", 3)
    for bad in ("hash", "hash:0", "qos:2", "shape:x"):
        with pytest.raises(ValueError):
            parse_tenants(bad)


def test_trace_split_keeps_tenants():
    jobs = trace(10)
    assert split_tenants(jobs, "trace") == jobs


def test_hash_split_is_deterministic_skewed_and_keeps_the_job_mix():
    jobs = trace()
    out = split_tenants(jobs, "hash:8")
    assert out == split_tenants(jobs, "hash:8")  # deterministic (CRC-32 of the id)
    assert [(j.job_id, j.submit_time, j.duration, j.num_gpus) for j in out] == \
        [(j.job_id, j.submit_time, j.duration, j.num_gpus) for j in jobs]
    counts = Counter(j.tenant for j in out)
    assert set(counts) == {project_name(k) for k in range(8)}
    assert project_name(0) == "d0/p00" and project_name(5) == "d1/p05"
    w = zipf_weights(8)
    assert w[0] == pytest.approx(1 / sum(1 / (k + 1) for k in range(8)))
    for k in range(8):  # Zipf shares within sampling noise
        assert counts[project_name(k)] / len(jobs) == pytest.approx(w[k], abs=0.03)
    assert counts["d0/p00"] > 2 * counts["d0/p02"]


def test_hash_split_keeps_copies_with_their_project():
    jobs = trace(50)
    out = split_tenants(overlay_jobs(jobs, 3), "hash:4")
    by = {j.job_id: j.tenant for j in out}
    assert all(by[f"{j.job_id}#o1"] == by[f"{j.job_id}#o2"] == by[j.job_id] for j in jobs)


def test_shape_split_puts_one_shape_in_one_project():
    jobs = trace(200)
    out = split_tenants(jobs, "shape:16")
    per_shape = {}
    for j in out:
        per_shape.setdefault(j.num_gpus, set()).add(j.tenant)
    assert all(len(t) == 1 for t in per_shape.values())


def test_start_at_is_a_warm_start():
    jobs = [TraceJob("done", 0, 50, 1), TraceJob("running", 10, 100, 1), TraceJob("forever", 20, None, 1),
            TraceJob("later", 80, 5, 1)]
    out = start_at(jobs, 60)
    assert [(j.job_id, j.submit_time, j.duration) for j in out] == [
        ("running", 60, 50), ("forever", 60, None), ("later", 80, 5)]


def test_overlay_rotates_copies_over_the_same_window():
    jobs = [TraceJob("a", 0, 5, 1), TraceJob("b", 9, 5, 1)]  # span 10
    out = overlay_jobs(jobs, 2)
    assert sorted((j.job_id, j.submit_time) for j in out) == [("a", 0), ("a#o1", 5), ("b", 9), ("b#o1", 4)]
    assert overlay_jobs(jobs, 1) == jobs


def test_prepare_order():
    jobs = [TraceJob("a", 100, 5, 1), TraceJob("b", 110, 5, 1)]
    out = prepare(jobs, tenants="hash:2", start=100, overlay=2, repeat=1, scale=2)
    assert sorted(j.submit_time for j in out) == [50, 52.25, 52.75, 55]  # span 11: a#o1 105.5, b#o1 104.5
    assert all(j.tenant.startswith("d0/p0") for j in out)
