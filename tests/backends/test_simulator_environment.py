"""The job's working environment in the simulated cluster (DESIGN §13): its log, its checkpoint
and a dev job's page, against a real simserver process (no DB)."""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import urllib.error
import urllib.request
from datetime import datetime

import pytest

from jobs.clusters.backends.base import (
    CANCELLED,
    FAILED,
    LOG_CHUNK_BYTES,
    RUNNING,
    SUCCEEDED,
    BackendError,
    Checkpoint,
    EnvVar,
    JobSpec,
    Mount,
    NodeInfo,
)
from tests.backends.test_simulator import reach, real, spec
from tests.simserver import SimServer, _free_port
from tests.waiting import wait_until

NODES = [NodeInfo("n1", "A100-80G", 4, "ready"), NodeInfo("n2", "A100-80G", 4, "ready")]
STEP = re.compile(r"^\S+ step (\d+)/(\d+) loss=(\d+\.\d+)$", re.MULTILINE)


@pytest.fixture
def sim(simserver):
    backend = simserver.backend()
    backend.set_inventory(NODES)
    return backend


def log_path(server: SimServer, name: str):
    return server.state.parent / "logs" / server.state.stem / f"{name}.log"


def steps(text: str) -> list[int]:
    return [int(m.group(1)) for m in STEP.finditer(text)]


def last_step(sim, name) -> int:
    found = steps(sim.log_tail(name, max_bytes=4096).text)
    return found[-1] if found else 0


def storage(tmp_path, job: str) -> Checkpoint:
    mount = Mount("ckpt", "hostpath", "/checkpoints", host_path=str(tmp_path / "shared" / "ckpt"))
    return Checkpoint(mount, f"pa/{job}")


def with_env(job: JobSpec, **changes) -> JobSpec:
    return dataclasses.replace(job, **changes)


def step_file(checkpoint: Checkpoint) -> int:
    path = f"{checkpoint.host_dir}/step"
    with open(path) as fh:
        return int(fh.read())


def http_get(server: SimServer, raw_path: str) -> tuple[int, bytes]:
    """A GET with the path sent exactly as given (urllib would not send every hostile form)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request("GET", raw_path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# ---------------------------------------------------------------- logs


def test_the_log_grows_while_the_job_runs_and_names_its_environment_without_values(sim, simserver):
    job = with_env(
        spec("gp-21"),
        env=(EnvVar("MODE", value="plain-value-123"), EnvVar("HF_TOKEN", secret="hf", key="token")),
        mounts=(Mount("data", "hostpath", "/data", host_path="/srv/data", read_only=True),),
    )
    sim.submit(job)
    first = wait_until(lambda: last_step(sim, "gp-21"), "a first progress line", interval=0.02)
    wait_until(lambda: last_step(sim, "gp-21") > first, "a later step in the tail", interval=0.02)
    text = sim.log_tail("gp-21", max_bytes=10**6).text
    lines = text.splitlines()
    assert lines[0] == "== run 1 =="
    assert re.fullmatch(
        r"\S+ start gp-21 kind=training nodes=n1 gpus=1 env=\[MODE, HF_TOKEN=<from secret hf/token>\] "
        r"mounts=\[/data \(read-only\)\]",
        lines[1],
    ), lines[1]
    found = steps(text)
    assert found == list(range(1, len(found) + 1))  # one line per step, none twice
    assert all(m.group(2) == str(10**5) for m in STEP.finditer(text))  # 10⁶ s in steps of 10 s
    # Values stay out of the log and of the simulator's state file.
    for path in (log_path(simserver, "gp-21"), simserver.state):
        assert "plain-value-123" not in path.read_text()


def test_the_whole_log_after_the_end_is_the_raw_stream(sim):
    sim.submit(spec("gp-22", duration=55))
    reach(sim, "gp-22", SUCCEEDED)
    tail = sim.log_tail("gp-22", max_bytes=10**6)
    assert not tail.truncated and not tail.missing and tail.size == len(tail.text.encode())
    chunks = list(sim.log_stream("gp-22"))
    assert b"".join(chunks).decode() == tail.text
    assert steps(tail.text) == [1, 2, 3, 4, 5, 6]  # 55 s: the sixth step is the last 5 s
    last = tail.text.splitlines()[-1]
    assert re.fullmatch(r"\S+ end succeeded exit=0 step 6/6: completed", last), last
    losses = [float(m.group(3)) for m in STEP.finditer(tail.text)]
    assert losses[-1] < losses[0]  # it learns


def test_a_big_log_is_tailed_within_the_bound_and_streamed_in_chunks(tmp_path):
    # At 10⁶ simulated seconds per real second, every request finds far more than
    # LOG_LINES_PER_ADVANCE steps due: the log says how many it skipped, and stays bounded.
    server = SimServer(port=_free_port(), state=tmp_path / "fast.json", speed=10**6)
    server.start()
    try:
        sim = server.backend()
        sim.set_inventory(NODES)
        sim.submit(spec("gp-23", duration=10**12))
        big = 3 * LOG_CHUNK_BYTES
        wait_until(lambda: sim.log_tail("gp-23", max_bytes=1).size > big, "a log of 3 chunks", interval=0.02)
        sim.cancel("gp-23")
        reach(sim, "gp-23", CANCELLED)
        whole = log_path(server, "gp-23").read_bytes()
        tail = sim.log_tail("gp-23", max_bytes=4096)
        assert tail.truncated and tail.size == len(whole)
        assert 0 < len(tail.text.encode()) <= 4096
        assert whole.endswith(tail.text.encode())
        assert ("\n" + tail.text) in whole.decode()  # from the start of a line
        assert "progress lines skipped (1000 at most per request)" in whole.decode()
        chunks = list(sim.log_stream("gp-23"))
        assert len(chunks) >= 3 and all(len(c) <= LOG_CHUNK_BYTES for c in chunks)
        assert b"".join(chunks) == whole
    finally:
        server.stop()


def test_a_log_that_is_not_there_says_why(sim):
    assert sim.log_tail("gp-404", max_bytes=100).missing == "the simulator has no job gp-404"
    sim.slow_start("gp-24", 10**6)
    sim.submit(spec("gp-24"))
    tail = sim.log_tail("gp-24", max_bytes=100)
    assert (tail.text, tail.size, tail.missing) == ("", None, "not started yet")
    with pytest.raises(BackendError, match="not started yet"):
        sim.log_stream("gp-24")
    sim.cancel("gp-24")  # cancelled while pending: it never ran, so it never wrote a log
    assert sim.log_tail("gp-24", max_bytes=100).missing == "the job never started"


def test_hostile_log_names_never_reach_a_file_outside_the_logs(sim, simserver):
    secret = simserver.state.parent / "secret.txt"
    secret.write_text("top secret")
    sim.submit(spec("gp-25"))
    for path in (
        "/jobs/../log",
        "/jobs/%2e%2e/log/raw",
        "/jobs/..%2Fsecret.txt%00/log/raw",
        "/jobs/..%2F..%2Fsecret.txt/log",
        "/jobs/..%2Fsim-state.json/log/raw",
        "/jobs/.sim-state/log?tail_bytes=100",
        "/jobs/%2Fetc%2Fpasswd/log/raw",
    ):
        status, body = http_get(simserver, path)
        assert status in (400, 404), (path, status)
        assert b"top secret" not in body and b'"version"' not in body and b"root:" not in body
    with pytest.raises(BackendError, match="400"):
        sim.submit(spec("../gp-26"))  # a job's name becomes its log's file name
    with pytest.raises(BackendError, match="400"):
        sim.log_tail("../secret.txt", max_bytes=100)
    assert sorted(p.name for p in log_path(simserver, "x").parent.iterdir()) == ["gp-25.log"]


# ---------------------------------------------------------------- checkpoints


def test_a_preempted_checkpointing_job_resumes_from_its_step_when_requeued(sim, simserver, tmp_path):
    ckpt = storage(tmp_path, "gp-31")
    job = with_env(spec("gp-31"), checkpointing=True, checkpoint=ckpt)
    sim.submit(job)
    fresh = reach(sim, "gp-31", RUNNING)
    ends = sim.view("gp-31")["ends_at"]
    assert sim.view("gp-31")["resumed_from"] == 0
    wait_until(
        lambda: sim.status(["gp-31"]) and step_file(ckpt) >= 3,
        "step 3 checkpointed",
        interval=0.02,
        retry_on=FileNotFoundError,
    )
    sim.cancel("gp-31", grace_seconds=30)  # preempted: the job saves its checkpoint in the grace period
    reach(sim, "gp-31", CANCELLED)
    saved = step_file(ckpt)
    first = sim.log_tail("gp-31", max_bytes=10**6).text
    assert steps(first)[-1] == saved >= 3
    assert first.splitlines()[-1].endswith(f"end cancelled exit=143 step {saved}/100000: cancelled")

    sim.submit(job)  # the portal requeues it: the same name, the same checkpoint directory
    resumed = reach(sim, "gp-31", RUNNING)
    view = sim.view("gp-31")
    assert view["resumed_from"] == saved
    wait_until(
        lambda: sim.status(["gp-31"]) and step_file(ckpt) > saved, "the step counter rising", interval=0.02
    )
    text = sim.log_tail("gp-31", max_bytes=10**6).text
    second = text[len(first) :]
    assert text.startswith(first)  # appended to the same file
    assert second.splitlines()[0] == "== run 2 =="
    assert f"resumed from step {saved} (checkpoint {ckpt.host_dir}/step)" in second
    assert steps(second)[0] == saved + 1
    starts = [line for line in text.splitlines() if " start gp-31 " in line]
    assert len(starts) == 2 and all(
        line.endswith(f" GPUPOOL_CHECKPOINT_DIR={ckpt.host_dir}") for line in starts
    )
    # what is left to run: the steps after the checkpoint, not the whole job again
    fresh_run = (datetime.fromisoformat(ends) - fresh.started_at).total_seconds()
    resumed_run = (datetime.fromisoformat(view["ends_at"]) - resumed.started_at).total_seconds()
    assert fresh_run == pytest.approx(real(10**6), abs=1e-3)
    assert resumed_run == pytest.approx(real(10**6 - 10 * saved), abs=1e-3)


def test_a_resumed_run_finishes_what_the_first_one_left(sim, tmp_path):
    # The first run hits its time limit at 300 of 600 s (step 30, written as it ends); the
    # requeued run resumes there and completes in the 300 s that are left, within that limit.
    ckpt = storage(tmp_path, "gp-32")
    job = with_env(spec("gp-32", duration=600, max_runtime=300), checkpointing=True, checkpoint=ckpt)
    sim.submit(job)
    first = reach(sim, "gp-32", FAILED)
    assert first.message == "max runtime exceeded" and step_file(ckpt) == 30
    assert "end failed exit=- step 30/60: max runtime exceeded" in sim.log_tail("gp-32", max_bytes=10**6).text
    sim.submit(job)
    second = reach(sim, "gp-32", SUCCEEDED)
    assert step_file(ckpt) == 60
    ran = (second.finished_at - second.started_at).total_seconds()
    assert ran == pytest.approx(real(300), abs=1e-3)
    text = sim.log_tail("gp-32", max_bytes=10**6).text
    assert steps(text) == list(range(1, 61))  # each step once over the two runs
    assert "resumed from step 30" in text and text.count("== run ") == 2


def test_a_job_without_checkpointing_starts_over(sim, tmp_path):
    ckpt = storage(tmp_path, "gp-33")
    job = with_env(spec("gp-33", duration=600, max_runtime=300), checkpoint=ckpt)  # checkpointing off
    sim.submit(job)
    reach(sim, "gp-33", FAILED)
    assert not (tmp_path / "shared").exists()
    sim.submit(job)
    reach(sim, "gp-33", FAILED)
    text = sim.log_tail("gp-33", max_bytes=10**6).text
    assert "resumed" not in text and f"GPUPOOL_CHECKPOINT_DIR={ckpt.host_dir}" in text


# ---------------------------------------------------------------- the dev page


def test_a_dev_job_serves_its_page_on_its_port_while_it_runs(sim):
    dev = dataclasses.replace(spec("gp-41"), kind="dev", expose_port=8888)
    sim.submit(dev)
    reach(sim, "gp-41", RUNNING)
    access = sim.access("gp-41", 8888, nodes=("n1",), user="alice")
    assert access.url == f"{sim.base_url}/jobs/gp-41/port/8888/" and access.note == "simulated dev server"
    with urllib.request.urlopen(access.url, timeout=5) as response:
        page = response.read().decode()
        assert response.headers["Content-Type"].startswith("text/html")
    assert "<title>gpupool dev job gp-41</title>" in page
    assert "port 8888" in page and "dev job" in page
    for wrong in ("/jobs/gp-41/port/8889/", "/jobs/gp-41/port/x/", "/jobs/gp-404/port/8888/"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(sim.base_url + wrong, timeout=5)
        assert refused.value.code == 404
    sim.cancel("gp-41")
    reach(sim, "gp-41", CANCELLED)
    with pytest.raises(urllib.error.HTTPError) as gone:
        urllib.request.urlopen(access.url, timeout=5)
    assert gone.value.code == 404


# ---------------------------------------------------------------- restarts


def test_logs_and_checkpoints_carry_on_after_a_kill_9(sim, simserver, tmp_path):
    ckpt = storage(tmp_path, "gp-51")
    sim.submit(with_env(spec("gp-51"), checkpointing=True, checkpoint=ckpt))
    wait_until(lambda: last_step(sim, "gp-51") >= 2, "step 2 in the log", interval=0.02)
    simserver.kill9()
    # Lines a killed server wrote after its last save are cut, and the replay writes them again.
    with open(log_path(simserver, "gp-51"), "a") as fh:
        fh.write("half a li")
    simserver.start()
    before = last_step(sim, "gp-51")
    wait_until(lambda: last_step(sim, "gp-51") > before, "a later step after the restart", interval=0.02)
    text = sim.log_tail("gp-51", max_bytes=10**6).text
    assert "half a li" not in text and text.count("== run ") == 1
    found = steps(text)
    assert found == list(range(1, len(found) + 1))
    assert sim.view("gp-51")["step"] >= step_file(ckpt) >= before


def test_a_state_file_from_before_logs_still_loads(tmp_path):
    state = tmp_path / "old.json"
    server = SimServer(port=_free_port(), state=state)
    server.start()
    try:
        server.backend().set_inventory(NODES)
        server.backend().submit(spec("gp-61"))
    finally:
        server.stop()
    old = json.loads(state.read_text())  # as the simulator saved it before issue 22
    old.pop("logs")
    new_keys = (
        "duration",
        "steps_total",
        "env",
        "mounts",
        "checkpoint_dir",
        "checkpointing",
        "expose_port",
        "start_step",
        "log_step",
        "run",
    )
    for job in old["jobs"].values():
        for key in new_keys:
            job.pop(key)
    state.write_text(json.dumps(old))
    (tmp_path / "logs").rename(tmp_path / "logs-before")
    server.start()
    try:
        sim = server.backend()
        assert sim.status(["gp-61"])["gp-61"].phase == RUNNING
        wait_until(lambda: last_step(sim, "gp-61") >= 1, "a progress line", interval=0.02)
        lines = sim.log_tail("gp-61", max_bytes=10**6).text.splitlines()
        assert lines[0] == "== run 1 ==" and " start gp-61 kind=training " in lines[1]
    finally:
        server.stop()
