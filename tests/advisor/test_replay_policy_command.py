"""``manage.py replay`` with a ``policy`` (a SPEC.json key, or ``--policy-file``): the rules reach the
engine, and a bad policy is a clear error, never a silent default."""

import json

import pytest
from django.core.management import CommandError, call_command


@pytest.fixture
def files(tmp_path):
    # j1 (a/x, 4 GPUs) needs b/y's idle quota 2 on top of its own 2; j2 comes after it.
    trace = tmp_path / "trace.csv"
    trace.write_text("job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,workers\n"
                     "j1,0,100,4,,,a/x,,,\nj2,200,50,2,,,b/y,,,\n")
    spec = {"nodes": [{"flavor": "F", "count": 1, "gpus_per_node": 4}],
            "quotas": {"a/x": {"F": 2}, "b/y": {"F": 2}}}
    return trace, spec, tmp_path


def _replay(trace, spec, tmp, *extra):
    (tmp / "spec.json").write_text(json.dumps(spec))
    call_command("replay", str(trace), "--cluster", str(tmp / "spec.json"), "--out", str(tmp / "out.json"),
                 "--quiet", *extra)
    return json.loads((tmp / "out.json").read_text())


def test_a_spec_policy_reaches_the_engine(files):
    trace, spec, tmp = files
    today = _replay(trace, spec, tmp)
    assert today["tenants"]["a/x"]["avg_queue_delay_s"] == 0  # borrowed at once
    held = _replay(trace, {**spec, "policy": {"lend_limit_ratio": 0, "grace_s": 5}}, tmp)
    assert held["policy_rules"] == {"lend_limit_ratio": 0, "grace_s": 5} and held["grace_s"] == 5
    assert held["finished"] == 1 and held["never_started"] == 1  # j1 (4 GPUs) can no longer borrow


def test_a_policy_file_and_its_errors(files):
    trace, spec, tmp = files
    (tmp / "p.json").write_text(json.dumps({"policy": {"backfill": False, "packing": "best_fit"}}))
    r = _replay(trace, spec, tmp, "--policy-file", str(tmp / "p.json"))
    assert (r["backfill"], r["fragmentation_aware"]) == (False, False)
    for bad in ({"policy": {"packing": "fgd"}}, {"rules": {}}, [1]):
        (tmp / "p.json").write_text(json.dumps(bad))
        with pytest.raises(CommandError):
            _replay(trace, spec, tmp, "--policy-file", str(tmp / "p.json"))
