"""``manage.py replay`` parses its arguments and writes the §9 result keys (no database)."""

import json

import pytest
from django.core.management import CommandError, call_command

KEYS = {"jobs", "finished", "avg_queue_delay_s", "p50_queue_delay_s", "p95_queue_delay_s", "avg_jct_s",
        "gpu_allocation_rate", "idle_quota_reuse_ratio", "preemptions", "makespan_s", "wall_seconds",
        "tenants"}


@pytest.fixture
def files(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,workers\n"
                     "j1,0,100,4,,,a/x,,,\nj2,10,50,2,,,b/y,,,\n")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"nodes": [{"flavor": "F", "count": 1, "gpus_per_node": 4}],
                                "quotas": {"a/x": {"F": 2}, "b/y": {"F": 2}}}))
    return trace, spec, tmp_path / "out.json"


@pytest.mark.parametrize("policy, finished", [("pooled", 2), ("static", 1)])
def test_replay_command_writes_result(files, policy, finished):
    trace, spec, out = files
    call_command("replay", str(trace), "--policy", policy, "--cluster", str(spec), "--out", str(out),
                 "--quiet")
    result = json.loads(out.read_text())
    assert set(result) >= KEYS
    assert result["policy"] == policy and result["finished"] == finished


def test_replay_command_flags_and_errors(files):
    trace, spec, out = files
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet",
                 "--no-borrowing", "--no-backfill", "--plain-best-fit", "--repeat", "2", "--scale", "2")
    result = json.loads(out.read_text())
    assert (result["borrowing"], result["backfill"], result["fragmentation_aware"]) == (False, False, False)
    assert result["jobs"] == 4 and result["repeat"] == 2
    with pytest.raises(CommandError, match="cluster"):
        call_command("replay", str(trace), "--quiet")
    with pytest.raises(CommandError):
        call_command("replay", str(trace.parent / "missing.csv"), "--cluster", str(spec), "--quiet")


def test_replay_command_load_and_tenant_options(files):
    trace, spec, out = files
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet",
                 "--overlay", "3", "--start", "5", "--scale", "2")
    result = json.loads(out.read_text())
    assert result["jobs"] == 6
    assert (result["overlay"], result["start"], result["tenant_split"]) == (3, 5, "trace")
    with pytest.raises(CommandError, match="derived quotas"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet", "--tenants", "hash:4")
    with pytest.raises(CommandError, match="hash:N"):
        call_command("replay", str(trace), "--quiet", "--tenants", "bogus")
    with pytest.raises(CommandError, match="overlay"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet", "--overlay", "0")


def test_replay_command_hash_tenants_with_derived_quotas(tmp_path):
    trace = tmp_path / "trace.csv"
    rows = "".join(f"j{i},{i},10,1\n" for i in range(40))
    trace.write_text("job_id,submit_time,duration,num_gpus\n" + rows)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"nodes": [{"flavor": "F", "count": 1, "gpus_per_node": 8}]}))
    out = tmp_path / "out.json"
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet",
                 "--tenants", "hash:4")
    result = json.loads(out.read_text())
    assert set(result["tenants"]) <= {"d0/p00", "d0/p01", "d0/p02", "d0/p03"} and len(result["tenants"]) > 1
    assert sum(sum(t["quota_gpus"].values()) for t in result["tenants"].values()) == 8


def test_replay_command_queueing_options(files):
    """Issue 25 item 4: --queueing, --aging-bound, --wait-bound and the SPEC's keys."""
    trace, spec, out = files
    data = json.loads(spec.read_text())
    spec.write_text(json.dumps({**data, "queueing": {"a/x": "best_effort"}, "aging_bound_s": 600}))
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet",
                 "--queueing", "strict_fifo", "--wait-bound", "10")
    result = json.loads(out.read_text())
    assert (result["queueing"], result["queueing_by_tenant"]) == ("strict_fifo", {"a/x": "best_effort"})
    assert (result["aging_bound_s"], result["wait_bound_s"]) == (600, 10)
    assert {"p99_queue_delay_s", "max_queue_delay_s", "waited_over_bound"} <= set(result)
    assert "waited_over_bound" in result["tenants"]["a/x"]
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet",
                 "--aging-bound", "60")
    assert json.loads(out.read_text())["aging_bound_s"] == 60
    with pytest.raises(CommandError, match="aging-bound"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet", "--aging-bound", "-5")
    with pytest.raises(CommandError, match="wait-bound"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet", "--wait-bound", "nan")
    spec.write_text(json.dumps({**data, "queueing": {"a/x": "lifo"}}))
    with pytest.raises(CommandError, match="queueing of 'a/x'"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet")


@pytest.mark.usefixtures("openb")
def test_replay_command_places_the_alibaba_cpu_and_memory_unless_told_not_to(tmp_path):
    """The Alibaba trace's CPU and memory go to the engine by default (the result says so and
    carries the stranded GPUs); ``--no-resources`` replays GPUs only."""
    from jobs.whatif.replay.paths import alibaba_dir

    out = tmp_path / "out.json"
    pods = alibaba_dir() / "csv" / "openb_pod_list_gpushare20.csv"
    common = ("replay", str(pods), "--out", str(out), "--quiet", "--start", "12000000")
    call_command(*common)
    result = json.loads(out.read_text())
    assert result["resources"] is True and result["jobs"] > 0
    assert {"stranded_gpus_mean", "stranded_gpus_max", "stranded_gpu_hours"} <= set(result)
    call_command(*common, "--no-resources")
    result = json.loads(out.read_text())
    assert result["resources"] is False and result["stranded_gpus_max"] == 0


def test_a_generic_trace_and_spec_with_memory_replay_it(tmp_path):
    """The generic CSV's cpu_milli / memory_mib and a SPEC node's: the 90 GiB job strands the node's
    other 3 GPUs and the 20 GiB one waits for it (as in tests/replay/test_sim.py)."""
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,tenant,cpu_milli,memory_mib\n"
                     "big,0,100,1,a/x,1000,92160\nsmall,10,10,1,a/x,,20480\n")
    spec = tmp_path / "spec.json"
    node = {"flavor": "F", "count": 1, "gpus_per_node": 4, "cpu_milli": 64000, "memory_mib": 102400}
    spec.write_text(json.dumps({"nodes": [node], "quotas": {"a/x": {"F": 4}}}))
    out = tmp_path / "out.json"
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet")
    result = json.loads(out.read_text())
    assert (result["resources"], result["max_queue_delay_s"], result["stranded_gpus_max"]) == (True, 90, 3)
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet", "--no-resources")
    result = json.loads(out.read_text())
    assert (result["resources"], result["max_queue_delay_s"], result["stranded_gpus_max"]) == (False, 0, 0)
    spec.write_text(json.dumps({"nodes": [{**node, "memory_mib": "lots"}], "quotas": {"a/x": {"F": 4}}}))
    with pytest.raises(CommandError, match="memory_mib must be a whole number"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet")
    trace.write_text("job_id,submit_time,duration,num_gpus,memory_mib\nj,0,1,1,-5\n")
    spec.write_text(json.dumps({"nodes": [node], "quotas": {"a/x": {"F": 4}}}))
    with pytest.raises(CommandError, match="line 2"):
        call_command("replay", str(trace), "--cluster", str(spec), "--quiet")
