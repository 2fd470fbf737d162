"""Replay of a trace whose ``gpu_type`` lists acceptable models (``A100-80G|Ascend-910B``, DESIGN
§9, §14): the engine gets them as the job's alternatives and places a job on the second model
when the first is full; the result JSON reports usage per flavor."""

import json

import pytest
from django.core.management import call_command

from jobs.whatif.replay import sim
from jobs.whatif.replay.csvtrace import read_trace
from jobs.whatif.replay.spec import load_spec

TRACE = (
    "job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,workers\n"
    "j1,0,100,8,,A100-80G|Ascend-910B,d/p,,,\n"
    "j2,10,100,8,,A100-80G|Ascend-910B,d/p,,,\n"
    "j3,20,100,4,,A100-80G|Ascend-910B,d/p,,,\n"
    "j4,30,50,4,,Ascend-910B,d/q,,,\n"
)
SPEC = {
    "nodes": [
        {"flavor": "A100-80G", "count": 1, "gpus_per_node": 8},
        {"flavor": "Ascend-910B", "count": 1, "gpus_per_node": 8},
    ],
    "quotas": {"d/p": {"A100-80G": 8, "Ascend-910B": 8}, "d/q": {"Ascend-910B": 4}},
}


@pytest.fixture
def files(tmp_path):
    trace, spec = tmp_path / "trace.csv", tmp_path / "spec.json"
    trace.write_text(TRACE)
    spec.write_text(json.dumps(SPEC))
    return trace, spec, tmp_path / "out.json"


def test_replay_places_on_the_second_flavor_when_the_first_is_full(files):
    trace, spec, out = files
    call_command("replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet")
    result = json.loads(out.read_text())
    assert result["finished"] == 4 and result["alternatives"] is True
    # j1 takes the A100 node at 0; j2 finds it full and starts on the Ascend node at 10; j3 (4
    # GPUs) waits until j1 ends at 100 and takes its first choice again; j4 (Ascend only) waits
    # for j2 to end at 110.
    a100, ascend = result["flavors"]["A100-80G"], result["flavors"]["Ascend-910B"]
    assert (a100["starts"], ascend["starts"]) == (2, 2)
    assert a100["gpu_hours"] == pytest.approx((8 * 100 + 4 * 100) / 3600)
    assert ascend["gpu_hours"] == pytest.approx((8 * 100 + 4 * 50) / 3600)
    assert (a100["gpus"], ascend["gpus"]) == (8, 8)
    assert result["tenants"]["d/p"]["avg_queue_delay_s"] == pytest.approx((0 + 0 + 80) / 3)
    assert result["tenants"]["d/q"]["avg_queue_delay_s"] == pytest.approx(80)


def test_without_alternatives_each_job_is_pinned_to_one_flavor(files):
    trace, spec, out = files
    call_command(
        "replay", str(trace), "--cluster", str(spec), "--out", str(out), "--quiet", "--no-alternatives"
    )
    assert json.loads(out.read_text())["flavors"]["A100-80G"]["starts"] == 0
    nodes, quotas = load_spec(spec)
    jobs = read_trace(str(trace))
    with_alt = sim.simulate(jobs, nodes, quotas, sim.Options(alternatives=True))
    pinned = sim.simulate(jobs, nodes, quotas, sim.Options())  # the default: as before
    # Pinned to the listed model with the most capacity (a tie: the later name), every job
    # queues on the Ascend node while the A100 node stays idle.
    assert pinned["flavors"]["A100-80G"]["starts"] == 0
    assert pinned["avg_queue_delay_s"] > with_alt["avg_queue_delay_s"]
    assert with_alt["flavors"]["A100-80G"]["gpu_allocation_rate"] > 0


def test_alternatives_are_the_listed_models_that_exist_in_order(files):
    trace, spec, _ = files
    header = TRACE.splitlines()[0]
    trace.write_text(
        f"{header}\nj,0,10,8,,H800|Ascend-910B|A100-80G,t/x,,,\nk,0,10,16,,A100-80G|Ascend-910B,t/x,,,\n"
    )
    nodes, _ = load_spec(spec)
    # H800 has no node; 16 GPUs fit no node of either flavor.
    assert sim.alternatives(read_trace(str(trace)), nodes) == {"j": ("Ascend-910B", "A100-80G")}
