"""Whole-machine requests on a real Slurm cluster (DESIGN §15, issue 33): what the portal asks of a
node besides GPUs reaches slurmctld (cores per task, memory and tmp per node), the shipped
configuration (deploy/slurm/start.sh: 96 cores, 1 TiB of which MemSpecLimit keeps 32 GiB, 3.75 TiB
TmpDisk, CR_Core_Memory, DefMemPerCPU) makes memory a consumable resource, and the inventory sync
reads each node's machine from ``scontrol show node``.

Two fake 8-GPU nodes, started for this module (tests/backends/test_slurm.py's ``slurm_cluster``)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from jobs.clusters.backends.base import FAILED, PENDING, RUNNING, SUCCEEDED
from jobs.clusters.backends.slurm import SlurmBackend, node_machine, scontrol_fields
from tests.backends.test_slurm import Cluster, make_spec, phase_of, slurm_cluster, wait_for
from tests.waiting import settle

pytestmark = pytest.mark.slurm

NODE_MIB = 1048576  # RealMemory of the shipped configuration
SPEC_MIB = 32768  # MemSpecLimit: the node keeps it for itself
ALLOCATABLE_MIB = NODE_MIB - SPEC_MIB
PER_GPU_MIB = ALLOCATABLE_MIB // 8
TMP_GIB = 3932160 // 1024


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with slurm_cluster(2, 8, prefix="gp-slurm-res-") as started:
        yield started


@pytest.fixture
def backend(cluster) -> SlurmBackend:
    return SlurmBackend(cluster.conf, timeout=30)


def shown(mib: int) -> str:
    """Memory as scontrol shows it: whole GiB in G, else M."""
    return f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"


def job_fields(cluster: Cluster, job_id: str) -> dict[str, str]:
    return scontrol_fields(cluster.scontrol("show", "job", "-o", job_id))


def sbatch(cluster: Cluster, *args: str) -> str:
    out = subprocess.run(
        ["sbatch", "--parsable", "-o", "/dev/null", *args], env=cluster.env, cwd=cluster.run_dir,
        capture_output=True, text=True, timeout=60, check=True,
    )
    return out.stdout.strip().split(";")[0]


def state_of(cluster: Cluster, job_id: str) -> tuple[str, str]:
    fields = job_fields(cluster, job_id)
    return fields["JobState"], fields.get("Reason", "")


def cancel(cluster: Cluster, *job_ids: str) -> None:
    subprocess.run(["scancel", *job_ids], env=cluster.env, check=False, timeout=60)


def test_the_inventory_reads_each_nodes_machine(backend):
    nodes = backend.list_nodes()
    assert [n.name for n in nodes] == ["gpu-a100-1", "gpu-a100-2"]
    node = nodes[0]
    assert (node.cpu_millicores, node.cpu_millicores_capacity) == (96_000, 96_000)
    assert (node.memory_mib, node.memory_mib_capacity) == (ALLOCATABLE_MIB, NODE_MIB)
    assert (node.local_disk_gib, node.local_disk_gib_capacity) == (TMP_GIB, TMP_GIB)
    assert (node.driver_version, node.cuda_version) == ("535.104.05", "12.2")
    assert ("leaf-l1", "") in node.labels and ("cuda-12.2", "") in node.labels
    assert (node.gpus, node.zone, node.leaf) == (8, "z1", "l1")


def test_a_workers_cores_memory_and_tmp_reach_slurmctld_and_the_job_runs(backend, cluster):
    spec = make_spec(
        'echo "$SLURM_CPUS_PER_TASK" > cpus-$SLURM_PROCID.txt',
        gpus=1, cpu_millicores=11_500, memory_mib=PER_GPU_MIB, local_disk_gib=480,
    )
    job_id = backend.submit(spec)
    fields = job_fields(cluster, job_id)
    # 11.5 cores: Slurm allocates whole cores, so 12 (never fewer than asked).
    assert fields["NumCPUs"] == "12" and fields["CPUs/Task"] == "12"
    assert fields["MinMemoryNode"] == shown(PER_GPU_MIB) and fields["MinTmpDiskNode"] == "480G"
    assert f"mem={shown(PER_GPU_MIB)}" in fields["TRES"]
    st = wait_for(lambda: phase_of(backend, spec.name, SUCCEEDED, FAILED), "the job to end")
    assert st.phase == SUCCEEDED
    # The worker's step runs on all its cores (22.05's srun is told them: it no longer inherits them).
    assert (cluster.run_dir / "jobs" / spec.name / "cpus-0.txt").read_text().strip() == "12"


def test_two_workers_on_one_node_ask_the_node_for_both(backend, cluster):
    spec = make_spec("true", nodes=("gpu-a100-2", "gpu-a100-2"), gpus=2,
                     cpu_millicores=8_000, memory_mib=10_240, local_disk_gib=50)
    fields = job_fields(cluster, backend.submit(spec))
    # --mem and --tmp are per node in Slurm: the node holds two workers' worth.
    assert fields["NumTasks"] == "2" and fields["CPUs/Task"] == "8" and fields["NumCPUs"] == "16"
    assert fields["MinMemoryNode"] == "20G" and fields["MinTmpDiskNode"] == "100G"
    st = wait_for(lambda: phase_of(backend, spec.name, SUCCEEDED, FAILED), "the job to end")
    assert st.phase == SUCCEEDED


def test_two_jobs_of_half_a_nodes_memory_share_it_and_a_third_waits(backend, cluster):
    half = ALLOCATABLE_MIB // 2
    specs = [make_spec("sleep 3600", gpus=1, cpu_millicores=1000, memory_mib=half) for _ in range(3)]
    try:
        for spec in specs[:2]:
            backend.submit(spec)
            wait_for(lambda s=spec: phase_of(backend, s.name, RUNNING), "a half-memory job to run")
        third = backend.submit(specs[2])
        # Six GPUs and 94 cores are free on the node: only memory holds the third back, for as long
        # as the two run (its reason reads "None" until the scheduler has looked at it).
        wait_for(lambda: state_of(cluster, third)[1] != "None", "slurmctld to consider the third job")
        assert state_of(cluster, third) == ("PENDING", "Resources")
        assert backend.status([specs[2].name])[specs[2].name].phase == PENDING
        node = scontrol_fields(cluster.scontrol("show", "node", "-o", "gpu-a100-1"))
        assert node["AllocMem"] == str(2 * half) and node["CPUAlloc"] == "2"
    finally:
        for spec in specs:
            backend.cancel(spec.name)


def test_a_direct_sbatch_without_mem_does_not_take_the_whole_node(cluster):
    """A native user's job that asks no memory gets DefMemPerCPU per core, not the node: a job
    asking all the rest of the node's memory still runs beside it."""
    plain = sbatch(cluster, "-w", "gpu-a100-2", "--gres=gpu:a100:1", "--wrap", "sleep 3600")
    try:
        fields = job_fields(cluster, plain)
        assert fields["MinMemoryCPU"] == "2G" and "mem=2G" in fields["TRES"]
        rest = sbatch(cluster, "-w", "gpu-a100-2", f"--mem={ALLOCATABLE_MIB - 2048}M", "--wrap", "sleep 3600")
        wait_for(lambda: state_of(cluster, rest)[0] == "RUNNING", "the job beside it to run")
        assert state_of(cluster, plain)[0] == "RUNNING"
        # More than the node's allocatable memory (RealMemory − MemSpecLimit) is refused outright.
        with pytest.raises(subprocess.CalledProcessError) as refused:
            sbatch(cluster, "-w", "gpu-a100-1", f"--mem={ALLOCATABLE_MIB + 1}M", "--wrap", "true")
        assert "Requested node configuration is not available" in refused.value.stderr
    finally:
        cancel(cluster, plain)
        cancel(cluster, *re.findall(r"\d+", locals().get("rest", "")))


def test_node_machine_parsing():
    line = (
        "NodeName=n1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUEfctv=94 CPUTot=96 "
        "AvailableFeatures=zone-z1,driver-550.54.15,cuda-12.4 "
        "ActiveFeatures=zone-z1,driver-550.54.15,cuda-12.4 "
        "OS=Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC RealMemory=1048576 AllocMem=0 MemSpecLimit=1024 TmpDisk=0 "
        "Reason=XID 79 fell off the bus [root@2026]"
    )
    fields = scontrol_fields(line)
    assert fields["OS"] == "Linux 6.1.0 #1 SMP PREEMPT_DYNAMIC" and fields["Reason"].startswith("XID 79 fell")
    machine = node_machine(fields)
    assert (machine["cpu_millicores"], machine["cpu_millicores_capacity"]) == (94_000, 96_000)
    assert (machine["memory_mib"], machine["memory_mib_capacity"]) == (1047552, 1048576)
    assert machine["local_disk_gib"] is None  # TmpDisk=0: not configured
    assert (machine["driver_version"], machine["cuda_version"]) == ("550.54.15", "12.4")
    unconfigured = node_machine(scontrol_fields("NodeName=n2 CPUTot=4 RealMemory=1 ActiveFeatures=(null)"))
    assert unconfigured["memory_mib"] is None and unconfigured["labels"] == ()


# -- through the portal ------------------------------------------------------------------------


@pytest.fixture
def portal_on_slurm(cluster, db):
    from jobs.clusters.inventory import sync_inventory
    from quotas.models import Cluster as PortalCluster
    from tests import factories as fx

    flavor = fx.flavor("A100-slurm-res")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    portal_cluster = PortalCluster.objects.create(
        name="slurm-res", kind="slurm", config={"slurm_conf": cluster.conf}
    )
    assert sync_inventory(portal_cluster)["created"] == 2
    dept = fx.department("R")
    project = fx.project("r1", dept)
    fx.quota(flavor, dept, 16)
    fx.quota(flavor, project, 16)
    return flavor, portal_cluster, project


def test_the_inventory_sync_stores_the_nodes_machine(portal_on_slurm):
    _flavor, portal_cluster, _project = portal_on_slurm
    node = portal_cluster.nodes.get(name="gpu-a100-1")
    assert (node.cpu_millicores, node.memory_mib, node.local_disk_gib) == (96_000, ALLOCATABLE_MIB, TMP_GIB)
    assert (node.cpu_millicores_capacity, node.memory_mib_capacity) == (96_000, NODE_MIB)
    assert (node.driver_version, node.cuda_version) == ("535.104.05", "12.2")
    assert node.labels["spine-s1"] == ""


def _dispatched(portal_cluster, job):
    from jobs.clusters import dispatch
    from jobs.scheduling.cycle import schedule_once

    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    return settle(portal_cluster, job, {"running"})


def _slurm_job(cluster: Cluster, job) -> dict[str, str]:
    from jobs.models import backend_name

    ids = subprocess.run(["squeue", "-h", "--name", backend_name(job.pk), "-o", "%i"], env=cluster.env,
                         capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert len(ids) == 1
    return job_fields(cluster, ids[0])


def test_a_portal_job_that_asks_nothing_gets_its_gpus_share(portal_on_slurm, cluster):
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    job = fx.submit(project, flavor, workers=1, gpus=2, name="defaults", command="sleep 3600")
    try:
        job = _dispatched(portal_cluster, job)
        fields = _slurm_job(cluster, job)
        # Two GPUs' share of a 96-core, 992 GiB, 3840 GiB node of eight.
        assert fields["CPUs/Task"] == "24" and fields["NumCPUs"] == "24"
        assert fields["MinMemoryNode"] == shown(2 * PER_GPU_MIB) and fields["MinTmpDiskNode"] == "960G"
    finally:
        subprocess.run(["scancel", "--name", f"gp-{job.pk}"], env=cluster.env, check=False, timeout=60)


def test_a_portal_job_gets_what_it_asked(portal_on_slurm, cluster):
    from jobs.models import Job
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    job = fx.submit(project, flavor, workers=1, gpus=1, name="asked", command="sleep 3600")
    Job.objects.filter(pk=job.pk).update(cpu_millicores=4_000, memory_mib=65_536, local_disk_gib=100)
    try:
        job = _dispatched(portal_cluster, job)
        fields = _slurm_job(cluster, job)
        assert fields["CPUs/Task"] == "4" and fields["MinMemoryNode"] == "64G"
        assert fields["MinTmpDiskNode"] == "100G"
    finally:
        subprocess.run(["scancel", "--name", f"gp-{job.pk}"], env=cluster.env, check=False, timeout=60)
