"""A Slurm job's working environment (DESIGN §13) on a real cluster, started for this module as
tests/backends/test_slurm.py starts its own: storage and checkpoint directories as host paths,
variables and secrets files, the output file as the job's log (tail and whole), the tunnel."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from jobs.clusters.backends.base import (
    FAILED,
    LOG_CHUNK_BYTES,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BackendError,
    Checkpoint,
    EnvVar,
    Mount,
)
from jobs.clusters.backends.slurm import SlurmBackend
from jobs.clusters.backends.slurm_env import MISSING_SECRET_EXIT
from tests.backends.test_slurm import cluster, make_spec, phase_of, wait_for  # noqa: F401 - the cluster fixture

pytestmark = pytest.mark.slurm

ENDED = (SUCCEEDED, FAILED, "cancelled")


@pytest.fixture
def backend(cluster, tmp_path) -> SlurmBackend:  # noqa: F811 - the fixture's name
    return SlurmBackend(cluster.conf, secrets_dir=str(tmp_path / "secrets"), login_host="login.test")


def job_dir(cluster, name: str) -> Path:  # noqa: F811
    return cluster.run_dir / "jobs" / name


def output_file(cluster, name: str, job_id: str) -> Path:  # noqa: F811
    return job_dir(cluster, name) / f"slurm-{job_id}.out"


def ended(backend: SlurmBackend, name: str):
    return wait_for(lambda: phase_of(backend, name, *ENDED), f"{name} to end")


def test_the_tail_follows_a_running_job_and_the_stream_is_the_whole_log(backend, cluster):  # noqa: F811
    # It prints a line every 0.2 s (and one to stderr) until the test lets it finish.
    spec = make_spec(
        'echo "to stderr" >&2; i=0; while [ ! -e finish ]; do echo "line $i"; i=$((i+1)); sleep 0.2; done; '
        "echo done"
    )
    job_id = backend.submit(spec)
    text = wait_for(
        lambda: (t := backend.log_tail(spec.name, max_bytes=4096).text) and "line 2\n" in t
        and "to stderr\n" in t and t,
        "the first lines in the tail",
    )
    # stderr goes to the same file; slurmstepd reads stdout and stderr through two pipes, so where
    # the stderr line lands among stdout's lines is not fixed (on a busy machine "line 0" came first).
    assert _stdout_lines(text)[:3] == ["line 0", "line 1", "line 2"]
    # It cannot end before `finish` exists: it was running when the tail showed its lines.
    st = backend.status([spec.name])[spec.name]
    assert st.phase == RUNNING
    access = backend.access(spec.name, 8888, nodes=st.nodes, user="alice")
    assert access.command == "ssh -N -L 8888:gpu-a100-1:8888 alice@login.test"
    (job_dir(cluster, spec.name) / "finish").touch()
    assert ended(backend, spec.name).phase == SUCCEEDED
    whole = b"".join(backend.log_stream(spec.name))
    assert whole == output_file(cluster, spec.name, job_id).read_bytes()
    lines = whole.decode().splitlines()
    assert lines.count("to stderr") == 1
    assert _stdout_lines(whole.decode())[:3] == ["line 0", "line 1", "line 2"]
    assert lines[-1] == "done"
    end = backend.log_tail(spec.name, max_bytes=4096)
    assert end.text.endswith("done\n") and end.size == len(whole) and not end.missing


def _stdout_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line != "to stderr"]


def test_a_large_log_is_tailed_and_streamed_in_chunks(backend, cluster):  # noqa: F811
    spec = make_spec("yes 0123456789abcdef | head -c 3145728")  # 3 MiB
    job_id = backend.submit(spec)
    assert ended(backend, spec.name).phase == SUCCEEDED
    data = output_file(cluster, spec.name, job_id).read_bytes()
    assert len(data) == 3145728
    end = backend.log_tail(spec.name, max_bytes=4096)
    assert len(end.text.encode()) <= 4096 and end.truncated and end.size == len(data)
    assert end.text.encode() == data[-4096:]
    parts = list(backend.log_stream(spec.name))
    assert all(len(p) <= LOG_CHUNK_BYTES for p in parts) and len(parts) == 48
    assert b"".join(parts) == data


def test_storage_checkpoint_and_plain_variables_reach_the_job_and_a_requeue_resumes(
    backend,
    cluster,  # noqa: F811
    tmp_path,
):
    data = Mount("data", "hostpath", "/data", host_path=str(tmp_path / "data"))
    ref = Mount("ref", "nfs", "/ref", host_path=str(tmp_path / "ref"), read_only=True, nfs_server="nas")
    pvc = Mount("scratch", "pvc", "/scratch", claim_name="scratch")
    for mount in (data, ref):
        Path(mount.host_path).mkdir()
    (tmp_path / "ref" / "input.txt").write_text("reference data\n")
    greeting = 'it\'s "$(touch pwned)" `id`\nsecond line'
    spec = make_spec(
        'cat "$GPUPOOL_CHECKPOINT_DIR/state" 2>/dev/null; '
        'echo "run $SLURM_JOB_ID" >> "$GPUPOOL_CHECKPOINT_DIR/state"; '
        'cp "$GPUPOOL_MOUNT_REF/input.txt" "$GPUPOOL_MOUNT_DATA/copied-$SLURM_JOB_ID.txt"; '
        'printf %s "$GREETING" > "$GPUPOOL_WORKDIR/greeting"; env | grep ^GPUPOOL_ | sort',
        mounts=(data, ref, pvc),
        checkpoint=Checkpoint(data, "checkpoints/job-1"),
        env=(EnvVar("GREETING", greeting),),
    )
    first = backend.submit(spec)
    assert ended(backend, spec.name).phase == SUCCEEDED
    # The portal requeues a checkpointing job as a new Slurm job of the same spec.
    second = backend.submit(spec)
    assert second != first and ended(backend, spec.name).phase == SUCCEEDED
    checkpoint = tmp_path / "data" / "checkpoints" / "job-1"
    assert (checkpoint / "state").read_text() == f"run {first}\nrun {second}\n"  # the same dir
    assert (tmp_path / "data" / f"copied-{second}.txt").read_text() == "reference data\n"
    assert (tmp_path / "data" / "greeting").read_text() == greeting
    assert not (job_dir(cluster, spec.name) / "pwned").exists()
    log = backend.log_tail(spec.name, max_bytes=1 << 16).text.splitlines()
    assert f"run {first}" in log  # the second run read what the first saved
    assert f"GPUPOOL_MOUNT_DATA={tmp_path}/data" in log and f"GPUPOOL_MOUNT_REF={tmp_path}/ref" in log
    assert "GPUPOOL_MOUNT_REF_RO=1" in log and f"GPUPOOL_WORKDIR={tmp_path}/data" in log
    assert f"GPUPOOL_CHECKPOINT_DIR={checkpoint}" in log
    assert "gpupool: warning: storage scratch (pvc) is not available on Slurm nodes" in log


def test_a_secret_comes_from_its_file_on_the_nodes_and_never_into_the_script(backend, cluster, tmp_path):  # noqa: F811
    value = f"tok-{secrets.token_hex(12)}"
    secret_file = tmp_path / "secrets" / "pa" / "api" / "token"
    secret_file.parent.mkdir(parents=True)
    secret_file.write_text(value)
    data = Mount("data", "hostpath", "/data", host_path=str(tmp_path / "data"))
    # Two workers: the batch script reads the file once, srun hands the variable to each worker.
    spec = make_spec(
        'printf %s "$API_TOKEN" > "$GPUPOOL_CHECKPOINT_DIR/token-$SLURM_PROCID"',
        nodes=("gpu-a100-1", "gpu-a100-2"),
        checkpoint=Checkpoint(data, "ckpt"),
        env=(EnvVar("API_TOKEN", secret="api", key="token"),),
    )
    job_id = backend.submit(spec)
    assert ended(backend, spec.name).phase == SUCCEEDED
    for rank in (0, 1):
        assert (tmp_path / "data" / "ckpt" / f"token-{rank}").read_text() == value
    script = (job_dir(cluster, spec.name) / "job.sh").read_text()
    assert value not in script and str(secret_file) in script
    assert value not in output_file(cluster, spec.name, job_id).read_text()


def test_a_missing_secret_file_fails_the_job_with_the_reason_in_its_log(backend, cluster, tmp_path):  # noqa: F811
    spec = make_spec("touch ran", env=(EnvVar("API_TOKEN", secret="api", key="missing"),))
    backend.submit(spec)
    st = ended(backend, spec.name)
    assert st.phase == FAILED and st.exit_code == MISSING_SECRET_EXIT
    log = backend.log_tail(spec.name, max_bytes=4096)
    assert f"the secret file {tmp_path}/secrets/pa/api/missing for API_TOKEN is missing" in log.text
    assert not (job_dir(cluster, spec.name) / "ran").exists()


def test_no_log_says_why_and_a_requeued_job_shows_its_newest_run(backend, cluster):  # noqa: F811
    assert backend.log_tail("gp-999997", max_bytes=100).missing  # never submitted
    with pytest.raises(BackendError, match="no log for gp-999997"):
        backend.log_stream("gp-999997")
    spec = make_spec('echo "run $SLURM_JOB_ID"', nodes=("gpu-a100-4",))
    first = backend.submit(spec)
    assert ended(backend, spec.name).phase == SUCCEEDED
    assert backend.log_tail(spec.name, max_bytes=100).text == f"run {first}\n"
    # Requeued while its node is drained: the new run waits, and has no output yet.
    cluster.scontrol("update", "NodeName=gpu-a100-4", "State=DRAIN", "Reason=log-test")
    try:
        second = backend.submit(spec)
        assert wait_for(lambda: phase_of(backend, spec.name, PENDING), "the new run to wait").phase == PENDING
        waiting = backend.log_tail(spec.name, max_bytes=100)
        assert (waiting.text, waiting.missing) == ("", "the job has not started: no output yet")
    finally:
        cluster.scontrol("update", "NodeName=gpu-a100-4", "State=RESUME")
    assert ended(backend, spec.name).phase == SUCCEEDED
    assert backend.log_tail(spec.name, max_bytes=100).text == f"run {second}\n"
    output_file(cluster, spec.name, second).unlink()
    assert backend.log_tail(spec.name, max_bytes=100).missing == "the output file was removed"
    with pytest.raises(BackendError, match="the output file was removed"):
        backend.log_stream(spec.name)
