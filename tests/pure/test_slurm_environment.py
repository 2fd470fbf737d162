"""A Slurm job's working environment as its batch script says it, its log files and its tunnel
(jobs.clusters.backends.slurm_env, jobs.clusters.backends.logfile, SlurmBackend.access): no Slurm. The
script's
lines run in a real bash, so "exported literally" is what a shell does with them, not a reading
of the text."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jobs.clusters.backends.base import LOG_CHUNK_BYTES, BackendError, Checkpoint, EnvVar, JobSpec, Mount
from jobs.clusters.backends.logfile import chunks, tail
from jobs.clusters.backends.registry import backend_for
from jobs.clusters.backends.slurm import SlurmBackend
from jobs.clusters.backends.slurm_env import MISSING_SECRET_EXIT, environment_lines

HOSTILE = [
    "it's \"quoted\" and 'single'",
    "$(touch pwned) `touch pwned2` ${HOME}",
    "first line\nsecond line\n",
    "; rm -rf / # & | > out < in \\ \t",
    "ünïcödé 中文",
    "",
    "-n",
]


def spec(**kw) -> JobSpec:
    base = dict(
        job_id=7,
        name="gp-7",
        kind="training",
        image="pytorch:2",
        command="true",
        flavor="A100-80G",
        k8s_resource="nvidia.com/gpu",
        slurm_gres="gpu:a100",
        workers=1,
        gpus_per_worker=1,
        gpu_milli=None,
        placement=(),
        labels={"job": "7", "project": "pa", "department": "A", "user": "alice"},
    )
    return JobSpec(**{**base, **kw})


def run_bash(lines: list[str], tail_command: str, cwd: Path) -> subprocess.CompletedProcess:
    script = "\n".join([*lines, tail_command]) + "\n"
    return subprocess.run(
        ["/bin/bash", "-c", script],
        cwd=cwd,
        capture_output=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def exported(result: subprocess.CompletedProcess) -> dict[str, str]:
    """The environment a child process of the script sees (``env -0``)."""
    pairs = [item.decode() for item in result.stdout.split(b"\0") if item]
    return dict(pair.split("=", 1) for pair in pairs)


def test_hostile_values_are_exported_literally(tmp_path):
    env = tuple(EnvVar(f"V{i}", value) for i, value in enumerate(HOSTILE))
    result = run_bash(environment_lines(spec(env=env), secrets_dir="/nowhere"), "env -0", tmp_path)
    assert result.returncode == 0, result.stderr
    seen = exported(result)
    assert [seen[f"V{i}"] for i in range(len(HOSTILE))] == HOSTILE
    assert not list(tmp_path.iterdir())  # nothing ran: no pwned files


def test_the_whole_script_holds_the_values_only_quoted(tmp_path):
    backend = SlurmBackend(str(tmp_path / "etc" / "slurm.conf"))
    text = backend._script(spec(env=(EnvVar("EVIL", HOSTILE[1]),), command="echo hi"), tmp_path)
    assert "export EVIL='$(touch pwned) `touch pwned2` ${HOME}'" in text.splitlines()
    dev = backend._script(spec(kind="dev", expose_port=8888))  # the job learns which port to serve
    assert "export GPUPOOL_PORT=8888" in dev.splitlines() and "GPUPOOL_PORT" not in text
    assert text.startswith("#!/bin/bash\n") and text.rstrip().endswith("/bin/bash -c 'echo hi'")


@pytest.mark.parametrize("name", ["1ABC", "A-B", "A B", "A=B", "$(x)", "", "ÄB", "A\nB"])
def test_invalid_variable_names_are_refused(name):
    with pytest.raises(BackendError):
        environment_lines(spec(env=(EnvVar(name, "v"),)), secrets_dir="/s")


@pytest.mark.parametrize(
    "var,labels",
    [
        (EnvVar("T", secret="../etc", key="k"), None),
        (EnvVar("T", secret="s", key=".."), None),
        (EnvVar("T", secret="s", key="a/b"), None),
        (EnvVar("T", secret="s", key=""), None),
        (EnvVar("T", secret="", key="k"), None),
        (EnvVar("T", value="v", secret="s", key="k"), None),
        (EnvVar("T", secret="s", key="k"), {"job": "7"}),  # no project: no place to look
        (EnvVar("T", secret="s", key="k"), {"project": ".."}),
    ],
)
def test_secret_references_that_would_leave_the_secrets_dir_are_refused(var, labels):
    kw = {"labels": labels} if labels is not None else {}
    with pytest.raises(BackendError):
        environment_lines(spec(env=(var,), **kw), secrets_dir="/s")


def test_nul_bytes_are_refused():
    with pytest.raises(BackendError):
        environment_lines(spec(env=(EnvVar("A", "x\0y"),)), secrets_dir="/s")


def test_a_secret_is_read_from_its_file_when_the_job_starts(tmp_path):
    secrets = tmp_path / "secrets"
    (secrets / "pa" / "db").mkdir(parents=True)
    value = "p@ss 'word' $(touch pwned)"
    (secrets / "pa" / "db" / ".password").write_text(value + "\n")
    lines = environment_lines(
        spec(env=(EnvVar("DB_PASSWORD", secret="db", key=".password"),)), secrets_dir=str(secrets)
    )
    assert value not in "\n".join(lines) and f"{secrets}/pa/db/.password" in "\n".join(lines)
    result = run_bash(lines, "env -0", tmp_path)
    assert result.returncode == 0, result.stderr
    assert exported(result)["DB_PASSWORD"] == value  # the file's trailing newline dropped
    assert not (tmp_path / "pwned").exists()


def test_a_missing_secret_file_stops_the_script_before_the_command(tmp_path):
    lines = environment_lines(
        spec(env=(EnvVar("TOKEN", secret="api", key="token"),)), secrets_dir=str(tmp_path)
    )
    result = run_bash(lines, "touch ran", tmp_path)
    assert result.returncode == MISSING_SECRET_EXIT
    assert f"secret file {tmp_path}/pa/api/token for TOKEN is missing" in result.stderr.decode()
    assert not (tmp_path / "ran").exists()


def test_mounts_checkpoint_and_workdir(tmp_path):
    data = Mount("data", "hostpath", "/data", host_path=str(tmp_path / "data"))
    ref = Mount("ref-set.v2", "nfs", "/ref", host_path=str(tmp_path / "ref"), read_only=True, nfs_server="n")
    pvc = Mount("scratch", "pvc", "/scratch", claim_name="scratch-claim")
    job = spec(mounts=(ref, pvc, data), checkpoint=Checkpoint(data, "checkpoints/job-7"))
    result = run_bash(environment_lines(job, secrets_dir="/s"), "env -0", tmp_path)
    assert result.returncode == 0, result.stderr
    seen = exported(result)
    assert seen["GPUPOOL_MOUNT_DATA"] == str(tmp_path / "data") and "GPUPOOL_MOUNT_DATA_RO" not in seen
    assert (
        seen["GPUPOOL_MOUNT_REF_SET_V2"] == str(tmp_path / "ref")
        and seen["GPUPOOL_MOUNT_REF_SET_V2_RO"] == "1"
    )
    assert not any(key.startswith("GPUPOOL_MOUNT_SCRATCH") for key in seen)
    assert seen["GPUPOOL_WORKDIR"] == str(tmp_path / "data")  # the first writable one, not the first
    assert seen["GPUPOOL_CHECKPOINT_DIR"] == str(tmp_path / "data" / "checkpoints" / "job-7")
    assert (tmp_path / "data" / "checkpoints" / "job-7").is_dir()
    warnings = result.stderr.decode().splitlines()
    assert warnings == ["gpupool: warning: storage scratch (pvc) is not available on Slurm nodes"]


def test_the_checkpoint_dir_depends_on_the_spec_only():
    data = Mount("data", "hostpath", "/data", host_path="/shared/pa")
    first = environment_lines(spec(checkpoint=Checkpoint(data, "job-7")), secrets_dir="/s")
    again = environment_lines(spec(checkpoint=Checkpoint(data, "job-7")), secrets_dir="/s")
    assert first == again and "export GPUPOOL_CHECKPOINT_DIR=/shared/pa/job-7" in first


def test_storage_that_clashes_or_is_relative_is_refused():
    a = Mount("a-b", "hostpath", "/x", host_path="/x")
    with pytest.raises(BackendError):
        environment_lines(spec(mounts=(a, Mount("a_b", "hostpath", "/y", host_path="/y"))), secrets_dir="/s")
    with pytest.raises(BackendError):
        environment_lines(
            spec(mounts=(Mount("r", "hostpath", "/r", host_path="shared/r"),)), secrets_dir="/s"
        )


def test_tail_seeks_to_the_end_and_does_not_cut_a_character(tmp_path):
    log = tmp_path / "slurm-1.out"
    log.write_bytes(b"x" * 10_000 + "中文\n".encode())
    with log.open("rb") as handle:
        end = tail(handle, 5)  # "文\n" is 4 bytes; the 5th is the last byte of "中"
    assert end.text == "文\n" and end.size == 10_007 and end.truncated and not end.missing
    with log.open("rb") as handle:
        whole = tail(handle, 1 << 20)
    assert whole.text == log.read_text() and not whole.truncated


def test_chunks_cover_the_file(tmp_path):
    log = tmp_path / "big.out"
    log.write_bytes(bytes(range(256)) * 1000)
    parts = list(chunks(log.open("rb")))
    assert all(len(p) <= LOG_CHUNK_BYTES for p in parts) and b"".join(parts) == log.read_bytes()


def test_access_is_an_ssh_tunnel_through_the_login_node(tmp_path):
    backend = SlurmBackend(str(tmp_path / "etc" / "slurm.conf"), login_host="login1.hpc.example")
    access = backend.access("gp-7", 8888, nodes=("gpu-a100-2", "gpu-a100-3"), user="alice")
    assert access.command == "ssh -N -L 8888:gpu-a100-2:8888 alice@login1.hpc.example"
    assert "login1.hpc.example" in access.note and "localhost:8888" in access.note
    assert SlurmBackend(str(tmp_path / "slurm.conf")).access(
        "gp-7", 22, nodes=("n1",), user="bob"
    ).command == ("ssh -N -L 22:n1:22 bob@login")


@pytest.mark.parametrize(
    "port,nodes,user",
    [
        (8888, (), "alice"),
        (0, ("n1",), "alice"),
        (70000, ("n1",), "alice"),
        (8888, ("n1",), "a b"),
        (8888, ("n1",), "-oProxyCommand=x"),
        (8888, ("n1;x",), "alice"),
    ],
)
def test_access_refuses_what_cannot_make_a_plain_command(tmp_path, port, nodes, user):
    with pytest.raises(BackendError):
        SlurmBackend(str(tmp_path / "slurm.conf")).access("gp-7", port, nodes=nodes, user=user)


def test_the_registry_passes_secrets_dir_and_login_host(tmp_path):
    conf = str(tmp_path / "etc" / "slurm.conf")
    backend = backend_for(
        "slurm", {"slurm_conf": conf, "secrets_dir": "/srv/secrets", "login_host": "login2"}
    )
    assert (backend.secrets_dir, backend.login_host) == ("/srv/secrets", "login2")
    default = backend_for("slurm", {"slurm_conf": conf})
    assert (default.secrets_dir, default.login_host) == ("/etc/gpupool/secrets", "login")


def test_log_names_that_are_not_job_names_are_refused(tmp_path):
    backend = SlurmBackend(str(tmp_path / "etc" / "slurm.conf"))
    for name in ("../etc", "", "a/b", ".hidden"):
        with pytest.raises(BackendError):
            backend.log_tail(name, max_bytes=10)
