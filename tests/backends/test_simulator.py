"""The simulated cluster through its backend client, against a real simserver process (no DB)."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from jobs.clusters.backends.base import (
    CANCELLED,
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BackendError,
    JobSpec,
    NodeInfo,
    Slot,
)
from jobs.clusters.backends.simulator import SimulatorBackend
from tests.simserver import SPEED, _free_port
from tests.waiting import wait_until

NODES = [
    NodeInfo("n1", "A100-80G", 4, "ready", zone="z1", spine="s1", leaf="l1"),
    NodeInfo("n2", "A100-80G", 4, "ready", zone="z1", spine="s1", leaf="l2"),
]
METRIC_NAMES = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_XID_ERRORS",
}
SLACK = timedelta(milliseconds=2)  # microsecond rounding of timestamps on both sides


def spec(
    name, *, workers=(("n1", (0,)),), milli=1000, duration=10**6, command="python train.py", max_runtime=None
) -> JobSpec:
    placement = tuple(tuple(Slot(node, g, milli) for g in gpus) for node, gpus in workers)
    return JobSpec(
        job_id=int(re.sub(r"\D", "", name) or 0),
        name=name,
        kind="training",
        image="pytorch:2.3",
        command=command,
        flavor="A100-80G",
        k8s_resource="nvidia.com/gpu",
        slurm_gres="gpu:a100",
        workers=len(workers),
        gpus_per_worker=len(workers[0][1]),
        gpu_milli=milli if milli < 1000 else None,
        placement=placement,
        max_runtime_seconds=max_runtime,
        sim_duration_seconds=duration,
    )


def reach(sim, name, phase):
    """Wait until the simulator reports ``phase`` for ``name`` (a phase the job stays in); its status."""
    return wait_until(
        lambda: (st := sim.status([name])[name]).phase == phase and st, f"{name} to be {phase}", interval=0.02
    )


def real(sim_seconds: float) -> float:
    return sim_seconds / SPEED


def get_json(server, path):
    with urllib.request.urlopen(server.url + path, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def sim(simserver) -> SimulatorBackend:
    backend = simserver.backend()
    backend.set_inventory(NODES)
    return backend


def test_inventory_round_trips_with_topology(sim):
    assert sim.list_nodes() == NODES
    assert sim.health() == "ok"


def test_submit_twice_with_the_same_name_makes_one_job(sim, simserver):
    first = sim.submit(spec("gp-1"))
    second = sim.submit(spec("gp-1", workers=(("n2", (1,)),), command="other"))
    assert first == second == "gp-1"
    jobs = get_json(simserver, "/jobs")["jobs"]
    assert list(jobs) == ["gp-1"]
    assert jobs["gp-1"]["command"] == "python train.py"
    assert jobs["gp-1"]["nodes"] == ["n1"]


def test_job_completes_after_duration_over_speed_and_its_times_flow_back(sim):
    before = datetime.now(UTC)
    sim.submit(spec("gp-2", duration=50))
    submitted = datetime.now(UTC)
    st = sim.status(["gp-2"])["gp-2"]
    # 0.5 s: on a busy machine the job may be over before the first look.
    assert (st.phase, st.finished_at is None) in {(RUNNING, True), (SUCCEEDED, False)}
    assert before - SLACK <= st.started_at <= submitted + SLACK  # it started when submitted
    done = reach(sim, "gp-2", SUCCEEDED)
    assert done.exit_code == 0 and not done.node_failure
    assert done.started_at == st.started_at
    assert (done.finished_at - done.started_at).total_seconds() == pytest.approx(real(50), abs=1e-3)
    assert done.nodes == ("n1",)


def test_max_runtime_ends_the_job_failed(sim):
    sim.submit(spec("gp-3", duration=600, max_runtime=30))
    done = reach(sim, "gp-3", FAILED)
    assert done.message == "max runtime exceeded" and not done.node_failure
    assert (done.finished_at - done.started_at).total_seconds() == pytest.approx(real(30), abs=1e-3)


def test_cancel_waits_the_grace_period_and_is_idempotent(sim):
    sim.submit(spec("gp-4"))
    asked = datetime.now(UTC)
    sim.cancel("gp-4", grace_seconds=50)
    answered = datetime.now(UTC)
    time.sleep(real(20))
    sim.cancel("gp-4", grace_seconds=50)  # a repeat must not extend the grace period
    st = sim.status(["gp-4"])["gp-4"]
    # Inside the grace period (0.5 s) it runs on, "cancelling"; a busy machine may look later.
    assert (st.phase, st.message) == (RUNNING, "cancelling") or st.phase == CANCELLED, st
    done = reach(sim, "gp-4", CANCELLED)
    # The end is the first cancel plus the grace period: the first cancel reached the simulator
    # between ``asked`` and ``answered``; a repeat (≥ real(20) after ``answered``) moved nothing.
    grace = timedelta(seconds=real(50))
    assert asked + grace - SLACK <= done.finished_at <= answered + grace + SLACK
    sim.cancel("gp-4")  # already over: nothing changes
    sim.cancel("gp-never-submitted")
    assert sim.status(["gp-4"])["gp-4"] == done


def test_cancel_of_a_pending_job_is_immediate(sim):
    sim.slow_start("gp-5", 600)
    sim.submit(spec("gp-5"))
    sim.cancel("gp-5", grace_seconds=600)
    st = sim.status(["gp-5"])["gp-5"]
    assert st.phase == CANCELLED and st.started_at is None and st.finished_at is not None


def test_node_down_fails_the_jobs_running_on_it(sim, simserver):
    sim.submit(spec("gp-61"))
    sim.submit(spec("gp-62", workers=(("n2", (0,)),)))
    sim.submit(spec("gp-63", workers=(("n2", (1,)), ("n1", (1,)))))  # a gang across both nodes
    node = sim.set_node_state("n1", "down")
    assert node.state == "down"
    st = sim.status(["gp-61", "gp-62", "gp-63"])
    assert st["gp-61"].phase == FAILED and st["gp-61"].node_failure
    assert st["gp-63"].phase == FAILED and st["gp-63"].node_failure
    assert st["gp-62"].phase == RUNNING and not st["gp-62"].node_failure
    assert {n.name: n.state for n in sim.list_nodes()} == {"n1": "down", "n2": "ready"}
    sim.submit(spec("gp-64"))  # placed on the down node: fails at once
    st = sim.status(["gp-64"])["gp-64"]
    assert st.phase == FAILED and st.node_failure and st.started_at is None
    assert 'Hostname="n1"' not in sim.metrics() and 'Hostname="n2"' in sim.metrics()
    with pytest.raises(BackendError, match="503"):
        sim.metrics(node="n1")


def test_crash_fails_the_job_with_exit_code_137(sim):
    sim.submit(spec("gp-7"))
    crashed = sim.crash("gp-7")
    assert crashed.phase == FAILED and crashed.exit_code == 137 and not crashed.node_failure
    assert sim.status(["gp-7"])["gp-7"].phase == FAILED
    with pytest.raises(BackendError, match="409"):
        sim.crash("gp-7")


def test_slow_start_keeps_the_job_pending_that_long(sim):
    sim.slow_start("gp-8", 50)  # armed before the portal dispatches the job
    submitted = datetime.now(UTC)
    sim.submit(spec("gp-8"))
    answered = datetime.now(UTC)
    st = sim.status(["gp-8"])["gp-8"]
    # Pending for 0.5 s: on a busy machine the first look may come after it started.
    if st.phase == PENDING:
        assert st.started_at is None and st.message == "slow start"
    running = reach(sim, "gp-8", RUNNING)
    start = timedelta(seconds=real(50))  # after the slow start, counted from the submission
    assert submitted + start - SLACK <= running.started_at <= answered + start + SLACK
    with pytest.raises(BackendError, match="409"):
        sim.slow_start("gp-8", 50)


def test_unknown_names_are_reported_lost(sim):
    sim.submit(spec("gp-9"))
    st = sim.status(["gp-9", "gp-404"])
    assert st["gp-404"].phase == LOST and st["gp-404"].started_at is None
    assert st["gp-9"].phase == RUNNING
    assert sim.status([]) == {}


def test_state_survives_kill_9_and_restart(sim, simserver):
    sim.submit(spec("gp-10"))
    sim.submit(spec("gp-11", workers=(("n2", (0,)),), duration=30))
    sim.set_node_state("n2", "cordoned")
    before = sim.status(["gp-10", "gp-11"])
    simserver.kill9()
    assert sim.health() != "ok"
    time.sleep(real(30) + 0.1)  # gp-11 ends while the server is down
    simserver.start()
    after = sim.status(["gp-10", "gp-11"])
    assert after["gp-10"] == before["gp-10"]  # still running, same start time
    assert after["gp-11"].phase == SUCCEEDED
    ran = (after["gp-11"].finished_at - after["gp-11"].started_at).total_seconds()
    assert ran == pytest.approx(real(30), abs=1e-3)
    assert {n.name: n.state for n in sim.list_nodes()} == {"n1": "ready", "n2": "cordoned"}
    sim.submit(spec("gp-10"))
    assert sorted(get_json(simserver, "/jobs")["jobs"]) == ["gp-10", "gp-11"]
    # no temporary file left behind: only the state and the jobs' logs
    assert sorted(p.name for p in simserver.state.parent.iterdir()) == ["logs", simserver.state.name]


# ---------------------------------------------------------------- metrics

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{(.*)\} (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"(,|$)')


def parse_exposition(text: str):
    """Prometheus text format 0.0.4, line by line: HELP and TYPE before a family's samples."""
    assert text.endswith("\n")
    helps, types, samples = {}, {}, []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[7:].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[7:].partition(" ")
            assert kind in {"gauge", "counter", "untyped", "summary", "histogram"}
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            name, raw_labels, value = m.groups()
            assert name in helps and name in types, f"{name} sample before its HELP/TYPE"
            labels = {k: v for k, v, _ in LABEL.findall(raw_labels)}
            assert ",".join(f'{k}="{v}"' for k, v in labels.items()) == raw_labels
            samples.append((name, labels, float(value)))
    return helps, types, samples


def series(samples, metric):
    return [(labels, value) for name, labels, value in samples if name == metric]


def test_metrics_are_dcgm_exporter_text_with_job_labels(sim):
    sim.submit(spec("gp-busy", workers=(("n1", (0, 1)),)))
    sim.submit(spec("gp-idle", workers=(("n1", (2,)),), command="jupyter lab  # idle notebook"))
    helps, types, samples = parse_exposition(sim.metrics())
    assert set(helps) == set(types) == METRIC_NAMES
    assert set(types.values()) == {"gauge"}
    util = series(samples, "DCGM_FI_DEV_GPU_UTIL")
    assert len(util) == 8  # every GPU of both nodes, one job per GPU
    for labels, _ in util:
        assert {"gpu", "UUID", "device", "modelName", "Hostname"} <= set(labels)
        assert re.fullmatch(r"GPU-[0-9a-f-]{36}", labels["UUID"])
        assert labels.get("job") == labels.get("hpc_job")
    by_gpu = {(lb["Hostname"], lb["gpu"]): (lb, v) for lb, v in util}
    assert len({lb["UUID"] for lb, _ in util}) == 8
    assert by_gpu[("n1", "0")][0]["job"] == by_gpu[("n1", "1")][0]["job"] == "gp-busy"
    assert by_gpu[("n1", "2")][0]["job"] == "gp-idle"
    assert "job" not in by_gpu[("n1", "3")][0] and "job" not in by_gpu[("n2", "0")][0]
    assert by_gpu[("n1", "0")][1] > 5 and by_gpu[("n1", "1")][1] > 5
    assert by_gpu[("n1", "2")][1] < 5
    assert by_gpu[("n1", "3")][1] == 0
    used = {(lb["Hostname"], lb["gpu"]): v for lb, v in series(samples, "DCGM_FI_DEV_FB_USED")}
    free = {(lb["Hostname"], lb["gpu"]): v for lb, v in series(samples, "DCGM_FI_DEV_FB_FREE")}
    assert used[("n1", "0")] > 0 and used[("n1", "3")] == 0
    assert used[("n1", "0")] + free[("n1", "0")] == free[("n1", "3")] == 80 * 1024
    # UUIDs are stable from scrape to scrape, and ?node= narrows to one exporter
    _, _, again = parse_exposition(sim.metrics(node="n2"))
    n2 = {lb["gpu"]: lb["UUID"] for lb, _ in series(again, "DCGM_FI_DEV_GPU_UTIL")}
    assert {lb["Hostname"] for _, lb, _ in again} == {"n2"}
    assert n2 == {g: by_gpu[("n2", g)][0]["UUID"] for g in "0123"}


def test_shared_requests_pack_two_jobs_on_one_gpu(sim):
    sim.submit(spec("gp-s1", milli=500))
    sim.submit(spec("gp-s2", milli=500))
    st = sim.status(["gp-s1", "gp-s2"])
    assert st["gp-s1"].phase == st["gp-s2"].phase == RUNNING
    _, _, samples = parse_exposition(sim.metrics(node="n1"))
    on_gpu0 = {lb["job"] for lb, _ in series(samples, "DCGM_FI_DEV_GPU_UTIL") if lb["gpu"] == "0"}
    assert on_gpu0 == {"gp-s1", "gp-s2"}
    sim.submit(spec("gp-s3", milli=500))  # the GPU is full: waits like an unschedulable pod
    st = sim.status(["gp-s3"])["gp-s3"]
    assert st.phase == PENDING and st.message == "waiting for GPUs"
    crashed = sim.crash("gp-s1")
    started = reach(sim, "gp-s3", RUNNING)
    assert started.started_at == crashed.finished_at


def test_unreachable_or_refusing_simulator_raises_backend_error(sim):
    dead = SimulatorBackend(f"http://127.0.0.1:{_free_port()}", timeout=1)
    with pytest.raises(BackendError):
        dead.status(["gp-1"])
    assert dead.health() != "ok"
    with pytest.raises(BackendError, match="400"):
        sim.set_node_state("n1", "melting")


def test_resize_moves_a_running_job_to_its_new_placement(sim):
    sim.submit(spec("gp-71", workers=(("n1", (0,)), ("n1", (1,)))))
    reach(sim, "gp-71", RUNNING)
    sim.submit(spec("gp-72", workers=(("n2", (0,)),)))
    grown = spec("gp-71", workers=(("n1", (0,)), ("n1", (1,)), ("n2", (1,)), ("n2", (2,))))
    sim.resize(grown)
    view = sim.view("gp-71")
    assert view["workers"] == 4 and view["phase"] == RUNNING and view["resized_at"]
    assert view["nodes"] == ["n1", "n2"]
    sim.resize(grown)  # idempotent
    assert sim.view("gp-71")["workers"] == 4
    with pytest.raises(BackendError, match="409"):  # gp-72 runs on n2's GPU 0
        sim.resize(spec("gp-71", workers=(("n1", (0,)), ("n2", (0,)))))
    sim.resize(spec("gp-71", workers=(("n1", (0,)),)))  # scaled down to one worker
    assert sim.view("gp-71")["workers"] == 1
    # what it released is free: a job needing it starts at once
    sim.submit(spec("gp-73", workers=(("n1", (1,)), ("n2", (1,)))))
    reach(sim, "gp-73", RUNNING)


def test_resize_of_a_finished_or_unknown_job(sim):
    sim.submit(spec("gp-74", duration=1))
    reach(sim, "gp-74", SUCCEEDED)
    sim.resize(spec("gp-74", workers=(("n1", (0,)), ("n1", (1,)))))  # nothing to resize: no error
    assert sim.view("gp-74")["workers"] == 1
    with pytest.raises(BackendError, match="404"):
        sim.resize(spec("gp-75"))


def test_an_injected_xid_error_is_the_gpus_last_xid_until_cleared(sim):
    sim.submit(spec("gp-xid", workers=(("n1", (3,)),)))
    sim.set_xid("n1", 3, 79)

    def xids():
        return {(labels["Hostname"], labels["gpu"]): value
                for labels, value in series(parse_exposition(sim.metrics())[2], "DCGM_FI_DEV_XID_ERRORS")}

    assert xids()[("n1", "3")] == 79
    assert {key: v for key, v in xids().items() if v} == {("n1", "3"): 79}  # that GPU only
    assert sim.status(["gp-xid"])["gp-xid"].phase == "running"  # the job runs on: the portal decides
    with pytest.raises(BackendError):
        sim.set_xid("n1", 9, 79)  # no such GPU
    sim.set_xid("n1", 3, 0)
    assert not any(xids().values())
