"""The Slurm backend against a real cluster: slurmctld, slurmdbd (on the machine's MariaDB) and four
fake-GPU slurmd nodes, started by deploy/slurm/start.sh in a temporary RUN_DIR for this module and
stopped (accounting purged) at its end.

Where Slurm cannot be installed or started the tests skip, except under CI (``CI`` set), where a
missing cluster fails the run.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobs.clusters.backends.base import (
    CANCELLED,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BackendError,
    JobSpec,
    Slot,
)
from jobs.clusters.backends.slurm import SlurmBackend, _time, expand_hostlist, node_state
from tests.waiting import settle, wait_until

pytestmark = pytest.mark.slurm

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
NODES = [f"gpu-a100-{i}" for i in range(1, 5)]


@dataclass
class Cluster:
    run_dir: Path
    conf: str
    env: dict[str, str]
    start_args: list[str]

    def scontrol(self, *args: str) -> str:
        return _sh(["scontrol", *args], self.env).stdout


def _sh(args: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, check=True)


def _free_port_base(span: int) -> int:
    """A base port with ``span`` free ports above it, so this cluster clashes with no other one."""
    for _ in range(50):
        base = random.randrange(20000, 32000, 100)  # below the kernel's ephemeral ports
        try:
            for port in range(base, base + span):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range")


def _unavailable(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@contextmanager
def slurm_cluster(
    nodes: int, gpus: int, *extra: str, prefix: str = "gp-slurm-", cpu_nodes: int = 0
) -> Iterator[Cluster]:
    """A real cluster from deploy/slurm/start.sh (``gpus`` per node; ``cpu_nodes`` GPU-less nodes in
    partition ``cpu``; ``extra``: more of its options), stopped and its accounting purged at the
    end; skipped where Slurm cannot start (failed under CI)."""
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))  # short: slurmd puts unix sockets under it
    env = {**os.environ, "SLURM_PORT_BASE": str(_free_port_base(10 + nodes + cpu_nodes + 1))}
    sizes = ["--nodes", str(nodes), "--gpus-per-node", str(gpus)]
    if cpu_nodes:
        sizes += ["--cpu-nodes", str(cpu_nodes)]
    args = [str(DEPLOY / "start.sh"), str(run_dir), *sizes, *extra]
    try:
        _sh([str(DEPLOY / "install.sh")], env, timeout=900)
        started = time.monotonic()
        out = _sh(args, env).stdout
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        subprocess.run([str(DEPLOY / "stop.sh"), str(run_dir), "--purge"], env=env, check=False)
        shutil.rmtree(run_dir, ignore_errors=True)
        _unavailable(f"no Slurm cluster: {exc}\n{getattr(exc, 'stderr', '')}")
    conf = out.strip().splitlines()[-1].removeprefix("export SLURM_CONF=")
    print(f"slurm cluster up in {time.monotonic() - started:.1f}s")
    env["SLURM_CONF"] = conf
    try:
        yield Cluster(run_dir, conf, env, args)
    finally:
        subprocess.run([str(DEPLOY / "stop.sh"), str(run_dir), "--purge"], env=env, check=False, timeout=120)
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with slurm_cluster(len(NODES), 8) as started:
        yield started


@pytest.fixture
def backend(cluster) -> SlurmBackend:
    return SlurmBackend(cluster.conf, timeout=30)


def wait_for(check: Callable[[], object], what: str):
    """tests/waiting.py's wait, looking every 0.3 s: each look runs Slurm's commands."""
    return wait_until(check, what, interval=0.3)


_ids = iter(range(1000, 100000))


def make_spec(command: str, *, nodes=("gpu-a100-1",), gpus: int = 1, **kw) -> JobSpec:
    job_id = next(_ids)
    return JobSpec(
        job_id=job_id,
        name=f"gp-{job_id}",
        kind="training",
        image="pytorch:2",
        command=command,
        flavor="A100-80G",
        k8s_resource="nvidia.com/gpu",
        slurm_gres="gpu:a100",
        workers=len(nodes),
        gpus_per_worker=gpus,
        gpu_milli=None,
        placement=tuple(tuple(Slot(node, g, 1000) for g in range(gpus)) for node in nodes),
        labels={"job": str(job_id), "project": "pa", "department": "A", "user": "alice"},
        **kw,
    )


def phase_of(backend: SlurmBackend, name: str, *phases: str):
    st = backend.status([name])[name]
    return st if st.phase in phases else None


def squeue_ids(cluster: Cluster, name: str) -> list[str]:
    return _sh(["squeue", "-h", "-t", "all", "--name", name, "-o", "%i"], cluster.env).stdout.split()


def test_inventory_has_four_nodes_with_eight_gpus_and_topology(backend):
    nodes = backend.list_nodes()
    assert [n.name for n in nodes] == NODES
    assert {(n.flavor_hint, n.gpus, n.state, n.zone, n.spine) for n in nodes} == {
        ("gpu:a100", 8, "ready", "z1", "s1")
    }
    assert [n.leaf for n in nodes] == ["l1", "l1", "l2", "l2"]
    assert backend.health() == "ok"


def test_gang_job_runs_on_its_placement_and_reports_back(backend, cluster):
    # Not the first nodes Slurm would pick by itself: the node list must come from the placement.
    spec = make_spec(
        'echo "$SLURM_PROCID $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES" > rank-$SLURM_PROCID.txt; sleep 2',
        nodes=("gpu-a100-2", "gpu-a100-4"),
        gpus=2,
    )
    # Slurm stamps whole seconds: the job's times lie between these two, in UTC.
    before = datetime.now(UTC).replace(microsecond=0)
    job_id = backend.submit(spec)
    # It ran (its ranks wrote their files below), so no poll needs to catch it RUNNING.
    st = wait_for(lambda: phase_of(backend, spec.name, SUCCEEDED, FAILED, CANCELLED), "the gang to end")
    after = datetime.now(UTC)
    assert st.phase == SUCCEEDED and st.exit_code == 0 and not st.node_failure
    assert st.nodes == ("gpu-a100-2", "gpu-a100-4")
    assert st.started_at.tzinfo is not None
    assert before <= st.started_at <= st.finished_at <= after  # right zone, not only aware
    assert (st.finished_at - st.started_at).total_seconds() >= 2
    workdir = cluster.run_dir / "jobs" / spec.name
    ranks = sorted((workdir / f"rank-{r}.txt").read_text().split() for r in range(2))
    assert ranks == [["0", "gpu-a100-2", "0,1"], ["1", "gpu-a100-4", "0,1"]]
    job = cluster.scontrol("show", "job", job_id)
    assert "NumNodes=2" in job and "gres/gpu:a100=4" in job and "Comment=department=A,job=" in job


def test_failed_job_reports_its_exit_code(backend):
    spec = make_spec("exit 3")
    backend.submit(spec)
    st = wait_for(lambda: phase_of(backend, spec.name, FAILED, SUCCEEDED), "the job to end")
    assert st.phase == FAILED and st.exit_code == 3 and st.finished_at is not None


def test_submit_twice_makes_one_slurm_job_and_cancel_reaches_slurm(backend, cluster):
    spec = make_spec("sleep 3600")  # it runs until cancelled, however slow the machine
    first = backend.submit(spec)
    assert backend.submit(spec) == first
    assert squeue_ids(cluster, spec.name) == [first]
    wait_for(lambda: phase_of(backend, spec.name, RUNNING), "the job to run")
    backend.cancel(spec.name)
    st = wait_for(lambda: phase_of(backend, spec.name, CANCELLED, FAILED, SUCCEEDED), "the job to end")
    assert st.phase == CANCELLED and st.finished_at is not None
    backend.cancel(spec.name)  # idempotent
    assert squeue_ids(cluster, spec.name) == [first]


def test_grace_period_signals_then_cancels(backend, cluster):
    # The job notes the signal and keeps running (``alive`` is its last moment): the kill comes
    # when the grace period is over. Each note is written aside and renamed: the kill may land in
    # the middle of a write, and a rename is all or nothing (a plain ``>`` left an empty file).
    note = "date +%s.%N > {0}.tmp && mv {0}.tmp {0}"
    spec = make_spec(
        f"trap '{note.format('signalled')}' USR1; touch ready; "
        f"while :; do {note.format('alive')}; sleep 0.1; done",
        checkpointing=True,
        max_runtime_seconds=3600,
    )
    workdir = cluster.run_dir / "jobs" / spec.name
    job_id = backend.submit(spec)
    assert "TimeLimit=01:00:00" in cluster.scontrol("show", "job", job_id)
    wait_for(lambda: (workdir / "ready").exists(), "the trap to be set")
    asked = time.time()
    backend.cancel(spec.name, grace_seconds=3)
    st = wait_for(lambda: phase_of(backend, spec.name, CANCELLED, FAILED, SUCCEEDED), "the job to end")
    assert st.phase == CANCELLED
    signalled = float((workdir / "signalled").read_text())  # the signal came first …
    assert asked <= signalled < float((workdir / "alive").read_text())  # … and the job ran on
    assert st.finished_at.timestamp() >= asked + 2  # not before the grace period (Slurm: whole seconds)


def test_job_that_exits_after_the_signal_still_reports_cancelled(backend, cluster):
    # A checkpointing job saves and exits 0 on the signal; Slurm says COMPLETED, the portal must
    # not read a preempted job as succeeded.
    spec = make_spec("trap 'exit 0' USR1; touch ready; while :; do sleep 0.1; done", checkpointing=True)
    backend.submit(spec)
    wait_for(lambda: (cluster.run_dir / "jobs" / spec.name / "ready").exists(), "the trap to be set")
    backend.cancel(spec.name, grace_seconds=30)
    st = wait_for(lambda: phase_of(backend, spec.name, CANCELLED, FAILED, SUCCEEDED), "the job to end")
    assert st.phase == CANCELLED and st.exit_code == 0 and "COMPLETED" in st.message


def test_drained_node_is_cordoned(backend, cluster):
    cluster.scontrol("update", "NodeName=gpu-a100-4", "State=DRAIN", "Reason=XID-79")
    try:
        states = {n.name: n.state for n in backend.list_nodes()}
        assert states["gpu-a100-4"] == "cordoned" and states["gpu-a100-1"] == "ready"
    finally:
        cluster.scontrol("update", "NodeName=gpu-a100-4", "State=RESUME")
    # A resumed node shows "idle*" (not responding) until the controller has pinged it again.
    wait_for(lambda: {n.name: n.state for n in backend.list_nodes()}["gpu-a100-4"] == "ready", "a100-4 ready")


def test_the_portal_drains_a_node_with_a_running_job_and_resumes_it(backend, cluster):
    """``set_node_schedulable`` reaches slurmctld: DRAIN with the reason lets the running job go
    on (the node is draining) and keeps new work off; RESUME takes it back; resuming a node that
    is not drained is a no-op."""
    spec = make_spec("sleep 3600", nodes=("gpu-a100-3",))
    backend.submit(spec)
    wait_for(lambda: phase_of(backend, spec.name, RUNNING), "the job to run")
    try:
        backend.set_node_schedulable("gpu-a100-3", False, reason="XID 79 on GPU 3 (gpupool)")
        shown = cluster.scontrol("show", "node", "gpu-a100-3")
        assert "DRAIN" in shown and "Reason=XID 79 on GPU 3 (gpupool)" in shown
        sinfo = _sh(["sinfo", "-h", "-n", "gpu-a100-3", "-o", "%T"], cluster.env).stdout.strip()
        assert sinfo == "draining"  # the job runs on
        assert phase_of(backend, spec.name, RUNNING) is not None
        assert {n.name: n.state for n in backend.list_nodes()}["gpu-a100-3"] == "cordoned"
        backend.set_node_schedulable("gpu-a100-3", False, reason="again")  # idempotent
    finally:
        backend.cancel(spec.name)
        backend.set_node_schedulable("gpu-a100-3", True)
    assert "DRAIN" not in cluster.scontrol("show", "node", "gpu-a100-3")
    wait_for(lambda: {n.name: n.state for n in backend.list_nodes()}["gpu-a100-3"] == "ready", "a100-3 ready")
    backend.set_node_schedulable("gpu-a100-3", True)  # not drained: nothing to resume, no error


def _node_down(cluster: Cluster, node: str) -> None:
    cluster.scontrol("update", f"NodeName={node}", "State=DOWN", "Reason=test-node-down")


def _node_back(cluster: Cluster, node: str) -> None:
    # ReturnToService=2 brings a DOWN node back as soon as its slurmd registers again; make sure.
    resume = ["scontrol", "update", f"NodeName={node}", "State=RESUME"]
    subprocess.run(resume, env=cluster.env, check=False, capture_output=True)  # fails if already back
    sinfo = ["sinfo", "-h", "-n", node, "-o", "%T"]
    wait_for(lambda: "idle" in _sh(sinfo, cluster.env).stdout, f"{node} to be idle")


def _started(cluster: Cluster, spec: JobSpec) -> None:
    # RUNNING only means the batch script started: a node that goes down before srun has started
    # the worker leaves that worker running on (this fake) node until it ends by itself.
    wait_for(lambda: (cluster.run_dir / "jobs" / spec.name / "ready").exists(), "the worker to start")


def test_node_down_fails_its_job_with_node_failure(backend, cluster):
    spec = make_spec("touch ready; sleep 60", nodes=("gpu-a100-3",))
    backend.submit(spec)
    _started(cluster, spec)
    _node_down(cluster, "gpu-a100-3")
    try:
        st = wait_for(lambda: phase_of(backend, spec.name, FAILED, CANCELLED, SUCCEEDED, PENDING), "its end")
        assert st.phase == FAILED and st.node_failure
        assert "NODE_FAIL" in st.message and st.finished_at is not None
    finally:
        _node_back(cluster, "gpu-a100-3")


def test_with_slurm_requeue_a_node_failure_requeues_the_job(cluster):
    # What Slurm 22.05 itself does with a requeueable batch job (not our default): it puts the job
    # back to PENDING (Restarts=1, held for ~2 min by a BeginTime) — reported as pending.
    backend = SlurmBackend(cluster.conf, requeue=True)
    spec = make_spec("touch ready; sleep 60", nodes=("gpu-a100-3",))
    job_id = backend.submit(spec)
    _started(cluster, spec)
    _node_down(cluster, "gpu-a100-3")
    try:
        st = wait_for(lambda: phase_of(backend, spec.name, PENDING, FAILED, CANCELLED), "the job requeued")
        assert st.phase == PENDING and not st.node_failure
        assert "Restarts=1" in cluster.scontrol("show", "job", job_id)
    finally:
        backend.cancel(spec.name)
        _node_back(cluster, "gpu-a100-3")


def test_killed_slurmd_takes_its_node_down_and_fails_its_job(backend, cluster):
    # SIGKILL, like a crashed host: the controller notices only when SlurmdTimeout passes (start.sh
    # sets it low; about 17 s here).
    spec = make_spec("touch ready; sleep 120", nodes=("gpu-a100-2",))
    backend.submit(spec)
    _started(cluster, spec)
    os.kill(int((cluster.run_dir / "slurmd-gpu-a100-2.pid").read_text()), 9)
    try:
        st = wait_for(
            lambda: phase_of(backend, spec.name, FAILED, CANCELLED, SUCCEEDED, PENDING), "the node failure"
        )
        assert st.phase == FAILED and st.node_failure and "NODE_FAIL" in st.message
        assert {n.name: n.state for n in backend.list_nodes()}["gpu-a100-2"] == "down"
    finally:
        _sh(cluster.start_args, cluster.env)  # idempotent: starts only the missing slurmd
    # The restarted slurmd is told to end the job's orphaned worker.
    wait_for(lambda: not _job_steps(cluster), "no job steps left")
    assert {n.name: n.state for n in backend.list_nodes()}["gpu-a100-2"] == "ready"


def test_without_slurmdbd_finished_jobs_come_from_the_controller(backend, cluster):
    spec = make_spec("exit 0")
    backend.submit(spec)
    wait_for(lambda: phase_of(backend, spec.name, SUCCEEDED, FAILED), "the job to end")
    pid = int((cluster.run_dir / "slurmdbd.pid").read_text())
    os.kill(pid, 15)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), f"process {pid} to exit")
    try:
        assert backend.health().startswith("slurmdbd unreachable")
        st = backend.status([spec.name])[spec.name]  # squeue keeps it for MinJobAge
        assert st.phase == SUCCEEDED and st.exit_code == 0 and st.finished_at is not None
        with pytest.raises(BackendError):  # not known to the controller: lost or not, nobody can say
            backend.status([spec.name, "gp-999998"])
    finally:
        _sh(cluster.start_args, cluster.env)  # idempotent: starts only slurmdbd
    assert backend.health() == "ok"


def test_unknown_name_is_lost(backend):
    assert backend.status(["gp-999999"])["gp-999999"].phase == "lost"


def _job_steps(cluster: Cluster) -> list[str]:
    """Our slurmstepd processes (they inherit SLURM_CONF from our slurmds)."""
    steps = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if (proc / "comm").read_text().strip() == "slurmstepd" and (
                f"SLURM_CONF={cluster.conf}".encode() in (proc / "environ").read_bytes().split(b"\0")
            ):
                steps.append(proc.name)
        except OSError:  # gone meanwhile, or a zombie
            continue
    return steps


def test_calls_raise_backend_error_when_the_controller_is_down(backend, cluster):
    # Steps still winding down would retry their completion message for a minute or more while
    # the controller is away: let earlier tests' jobs finish first.
    wait_for(lambda: not _job_steps(cluster), "no job steps left")
    pid = int((cluster.run_dir / "slurmctld.pid").read_text())
    os.kill(pid, 15)
    wait_for(lambda: not Path(f"/proc/{pid}").exists(), f"process {pid} to exit")
    try:
        assert backend.health().startswith("slurmctld unreachable")
        calls = [
            lambda: backend.status(["gp-1"]),
            backend.list_nodes,
            lambda: backend.submit(make_spec("true")),
            lambda: backend.cancel("gp-1"),
        ]
        with ThreadPoolExecutor(len(calls)) as pool:  # each client retries for ~MessageTimeout
            errors = list(pool.map(_error_of, calls))
        assert all(isinstance(e, BackendError) for e in errors), errors
    finally:
        _sh(cluster.start_args, cluster.env)  # idempotent: starts only the controller again
    assert backend.health() == "ok"


def _error_of(call: Callable[[], object]) -> Exception | None:
    try:
        call()
    except Exception as exc:
        return exc
    return None


def test_parsers():
    # Epoch seconds (SLURM_TIME_FORMAT=%s), and ISO without zone from a client that ignores it.
    assert _time("1767225600") == _time("2026-01-01T00:00:00") == datetime(2026, 1, 1, tzinfo=UTC)
    assert _time("Unknown") is None and _time("None") is None
    assert expand_hostlist("gpu-a100-[1-2,4],n[08-10]") == (
        "gpu-a100-1",
        "gpu-a100-2",
        "gpu-a100-4",
        "n08",
        "n09",
        "n10",
    )
    assert expand_hostlist("None assigned") == ()
    assert [node_state(s) for s in ("idle", "mixed", "drained", "draining", "down*", "idle*", "down")] == [
        "ready",
        "ready",
        "cordoned",
        "cordoned",
        "down",
        "down",
        "down",
    ]


# -- through the portal ------------------------------------------------------------------------


@pytest.fixture
def portal_on_slurm(cluster, db):
    """The portal's view of the Slurm cluster: inventory synced from sinfo, one project with
    quota for all 32 GPUs."""
    from jobs.clusters.inventory import sync_inventory
    from quotas.models import Cluster as PortalCluster
    from tests import factories as fx

    flavor = fx.flavor("A100-slurm")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    portal_cluster = PortalCluster.objects.create(
        name="slurm-test", kind="slurm", config={"slurm_conf": cluster.conf}
    )
    counts = sync_inventory(portal_cluster)
    assert counts["created"] == len(NODES), counts
    dept = fx.department("S")
    project = fx.project("s1", dept)
    fx.quota(flavor, dept, 32)
    fx.quota(flavor, project, 32)
    return flavor, portal_cluster, project


def test_a_gang_submitted_through_the_portal_runs_on_slurm_and_flows_back(portal_on_slurm):
    from jobs.clusters import dispatch
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    job = fx.submit(project, flavor, workers=2, gpus=8, name="gang", command="sleep 2")
    assert schedule_once().admitted == 1
    job.refresh_from_db()
    placed = {node for worker in job.placement for node, _gpu, _milli in worker}
    assert len(placed) == 2  # a worker of 8 GPUs fills a node: a 2-node gang
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal_cluster, job, {"succeeded"})
    transitions = list(job.events.filter(kind="transition").values_list("to_state", flat=True))
    assert transitions == ["queued", "admitted", "running", "succeeded"]
    assert job.started_at <= job.finished_at and job.exit_code == 0


def test_preemption_and_cancel_through_the_portal_reach_slurm(portal_on_slurm):
    from jobs.clusters import dispatch
    from jobs.scheduling.cycle import schedule_once
    from jobs.services import job_cancel
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    low = fx.submit(
        project, flavor, workers=4, gpus=8, name="low", command="sleep 300", prio=fx.priority("low", 10)
    )
    schedule_once()
    dispatch.dispatch_job(low.pk)
    settle(portal_cluster, low, {"running"})
    high = fx.submit(
        project, flavor, workers=1, gpus=8, name="high", command="sleep 300", prio=fx.priority("high", 500)
    )
    assert schedule_once().preempted == 1  # rule 6: a higher priority in the same project
    assert dispatch.stop_job(low.pk) == "stopping"
    settle(portal_cluster, low, {"queued"})
    assert list(low.events.filter(kind="transition").values_list("to_state", flat=True))[-2:] == [
        "preempted",
        "queued",
    ]
    assert dispatch.dispatch_job(high.pk) == "dispatched"
    settle(portal_cluster, high, {"running"})
    job_cancel(actor=fx.platform_admin(), job=high)
    dispatch.stop_job(high.pk)
    settle(portal_cluster, high, {"cancelled"})
    assert (
        SlurmBackend(portal_cluster.config["slurm_conf"]).status([f"gp-{high.pk}"])[f"gp-{high.pk}"].phase
        == CANCELLED
    )


def test_a_slurm_node_failure_requeues_every_job_on_the_node(portal_on_slurm, cluster):
    from jobs.clusters import dispatch
    from jobs.models import Job
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    plain = fx.submit(project, flavor, workers=1, gpus=8, name="plain", command="sleep 300")
    ckpt = fx.submit(project, flavor, workers=1, gpus=8, name="ckpt", command="sleep 300", checkpointing=True)
    schedule_once()
    for job in (plain, ckpt):
        dispatch.dispatch_job(job.pk)
        settle(portal_cluster, job, {"running"})
    nodes = {node.name for job in (plain, ckpt) for node in _placed_nodes(job)}
    try:
        for name in nodes:
            cluster.scontrol("update", f"NodeName={name}", "State=DOWN", "Reason=test-failure")
        settle(portal_cluster, plain, {"queued"})  # not its fault: started again (DESIGN §17)
        settle(portal_cluster, ckpt, {"queued"})
    finally:
        for name in nodes:  # ReturnToService=2 may have brought it back already
            subprocess.run(
                ["scontrol", "update", f"NodeName={name}", "State=RESUME"],
                env=cluster.env,
                capture_output=True,
                check=False,
            )
    for job in (plain, ckpt):
        assert list(job.events.filter(kind="transition").values_list("to_state", flat=True))[-2:] == [
            "lost",
            "queued",
        ]
    assert not Job.objects.filter(pk__in=[plain.pk, ckpt.pk], state__in=["admitted", "running"]).exists()


def _sacct_times(cluster: Cluster, name: str) -> tuple[datetime, datetime]:
    """Start and End as sacct prints them by default (ISO, the client's zone — UTC here), read
    independently of the backend's parser."""
    env = {**cluster.env, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    out = _sh(["sacct", "-X", "-n", "-P", "-a", "-S", "now-1days", "--name", name, "-o", "Start,End"], env)
    start, end = out.stdout.strip().splitlines()[-1].split("|")
    return tuple(datetime.fromisoformat(t).replace(tzinfo=UTC) for t in (start, end))


def test_the_portal_records_and_bills_sacct_start_and_end_however_late_it_polls(portal_on_slurm, cluster):
    """Issue 19, "The portal bills by its own clock": the running and ended events are Slurm's
    Start/End (time source slurm), and the ledger's card-seconds per job are exactly those of
    sacct — the portal looks only after the jobs have ended."""
    from django.db.models import Sum
    from django.utils import timezone

    from billing.meter import usage_meter
    from billing.models import UsageRecord
    from jobs.clusters import dispatch
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    jobs = [fx.submit(project, flavor, workers=1, gpus=8, name=f"j{i}", command="sleep 2") for i in range(2)]
    assert schedule_once().admitted == 2
    for job in jobs:
        assert dispatch.dispatch_job(job.pk) == "dispatched"
    backend = SlurmBackend(cluster.conf)
    for job in jobs:  # Slurm's own word that they ended; the portal has not looked yet
        wait_for(lambda j=job: phase_of(backend, f"gp-{j.pk}", SUCCEEDED), "the job to end in Slurm")
    time.sleep(1.5)  # and it looks late: a poll interval that must not matter
    dispatch.sync_cluster(portal_cluster.pk)
    usage_meter(now=timezone.now() + timedelta(days=1))
    for job in jobs:
        job.refresh_from_db()
        start, end = _sacct_times(cluster, f"gp-{job.pk}")
        running = job.events.get(kind="transition", to_state="running")
        done = job.events.get(kind="transition", to_state="succeeded")
        assert (running.occurred_at, running.time_source) == (start, "slurm")
        assert (done.occurred_at, done.time_source) == (end, "slurm")
        assert (job.started_at, job.finished_at) == (start, end)
        assert done.recorded_at > end  # recorded at the late poll, billed at Slurm's End
        billed = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
        assert billed == 8 * flavor.card_fraction * int((end - start).total_seconds())


def _placed_nodes(job):
    from quotas.models import Node

    return Node.objects.filter(pk__in={n for worker in job.placement for n, _g, _m in worker})


def test_a_portal_job_sees_its_mounts_and_checkpoint_dir_and_the_portal_shows_its_log(
    portal_on_slurm, tmp_path
):
    """DESIGN §13 through the portal on real Slurm: the project's storages reach the job as paths
    on the shared file system (it reads one, writes its checkpoint dir), and the portal shows the
    tail of its output while it runs and the whole log after."""
    from rest_framework.test import APIClient

    from jobs.clusters import dispatch
    from jobs.clusters.logs import job_log_stream, job_log_tail
    from jobs.models import ProjectStorage
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    data, work = tmp_path / "data", tmp_path / "work"
    data.mkdir()
    work.mkdir()
    (data / "input.txt").write_text("forty-two\n")
    ProjectStorage.objects.create(
        project=project, name="data", kind="hostpath", host_path=str(data), mount_path="/data", read_only=True
    )
    ProjectStorage.objects.create(
        project=project,
        name="work",
        kind="hostpath",
        host_path=str(work),
        mount_path="/work",
        checkpoints=True,
    )
    release = tmp_path / "release"
    command = (
        'echo "read $(cat "$GPUPOOL_MOUNT_DATA/input.txt")"; '
        'echo 7 > "$GPUPOOL_CHECKPOINT_DIR/step"; echo "first line"; '
        f"while [ ! -e {release} ]; do sleep 0.2; done; "
        'echo "last line"; echo "to stderr" >&2'
    )
    job = fx.submit(
        project,
        flavor,
        workers=1,
        gpus=1,
        name="env",
        command=command,
        mounts=["data"],
        env=[{"name": "LR", "value": "0.1"}],
    )
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal_cluster, job, {"running"})
    tail = wait_for(
        lambda: (t := job_log_tail(job, max_bytes=4096)).text and "first line" in t.text and t,
        "the first lines in the portal's tail",
    )
    assert "read forty-two" in tail.text and "last line" not in tail.text
    reader = APIClient()
    reader.force_authenticate(fx.platform_admin())
    shown = reader.get(f"/api/v1/jobs/{job.pk}/log/", {"tail_bytes": 4096}).json()
    assert "first line" in shown["text"] and not shown["missing"], shown
    checkpoint = work / ".gpupool" / "checkpoints" / str(job.pk) / "step"
    assert checkpoint.read_text() == "7\n"  # the job wrote its checkpoint dir; the test reads it
    release.touch()
    settle(portal_cluster, job, {"succeeded"})
    whole = b"".join(job_log_stream(job)).decode()
    assert whole.index("read forty-two") < whole.index("first line") < whole.index("last line")
    assert "to stderr" in whole


def test_a_drain_through_the_portal_reaches_slurmctld_and_survives_the_sync(portal_on_slurm, cluster):
    """The node map's service (jobs.clusters.nodes) on a real cluster: the drain and its reason reach
    slurmctld, the inventory sync keeps the node draining, return to service resumes it."""
    from jobs.clusters.inventory import sync_inventory
    from jobs.clusters.nodes import node_drain, node_return
    from quotas.models import Node, NodeEvent
    from tests import factories as fx

    _flavor, portal_cluster, _project = portal_on_slurm
    node = Node.objects.get(cluster=portal_cluster, name="gpu-a100-2")
    admin = fx.platform_admin()
    try:
        out = node_drain(actor=admin, node=node, reason="XID 79 via the portal", requeue=False)
        assert out.node.state == "draining"
        shown = cluster.scontrol("show", "node", "gpu-a100-2")
        assert "DRAIN" in shown and "Reason=XID 79 via the portal" in shown
        sync_inventory(portal_cluster)
        assert Node.objects.get(pk=node.pk).state == "draining"
    finally:
        node_return(actor=admin, node=Node.objects.get(pk=node.pk), reason="fixed")
    assert "DRAIN" not in cluster.scontrol("show", "node", "gpu-a100-2")
    assert Node.objects.get(pk=node.pk).state == "ready"
    events = NodeEvent.objects.filter(node=node).order_by("at", "id")
    assert list(events.values_list("action", flat=True)) == ["drain", "return"]
    states = lambda: {n.name: n.state for n in SlurmBackend(cluster.conf).list_nodes()}  # noqa: E731
    wait_for(lambda: states()["gpu-a100-2"] == "ready", "a100-2 ready")
