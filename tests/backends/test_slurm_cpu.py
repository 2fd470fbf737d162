"""CPU-only work on a real Slurm cluster (DESIGN §15, docs/resources.md "CPU-only work"): a GPU-less
node (deploy/slurm/start.sh --cpu-nodes: 128 cores, 512 GiB of which MemSpecLimit keeps 16 GiB, in
partition ``cpu``) is read by the inventory sync as a node of the ``cpu`` flavor, its units its
cores, and a portal job of that flavor reaches slurmctld as cores and memory — no GPU.

One fake 8-GPU node and one CPU node, started for this module (tests/backends/test_slurm.py's
``slurm_cluster``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from jobs.clusters.backends.base import CPU_HINT, FAILED, SUCCEEDED
from jobs.clusters.backends.slurm import SlurmBackend, scontrol_fields
from tests.backends.test_slurm import Cluster, make_spec, phase_of, slurm_cluster, wait_for
from tests.waiting import settle

pytestmark = pytest.mark.slurm

CPU_CORES = 128
CPU_NODE_MIB = 524288
CPU_SPEC_MIB = 16384
PER_CORE_MIB = (CPU_NODE_MIB - CPU_SPEC_MIB) // CPU_CORES  # 3968 MiB


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with slurm_cluster(1, 8, prefix="gp-slurm-cpu-", cpu_nodes=1) as started:
        yield started


@pytest.fixture
def backend(cluster) -> SlurmBackend:
    return SlurmBackend(cluster.conf, timeout=30, cpu_partition="cpu")


def job_fields(cluster: Cluster, job_id: str) -> dict[str, str]:
    return scontrol_fields(cluster.scontrol("show", "job", "-o", job_id))


def test_a_gpu_less_node_is_listed_as_a_cpu_node_of_its_cores(backend):
    by_name = {n.name: n for n in backend.list_nodes()}
    assert set(by_name) == {"gpu-a100-1", "cpu-1"}
    cpu = by_name["cpu-1"]
    assert (cpu.flavor_hint, cpu.gpus, cpu.state) == (CPU_HINT, CPU_CORES, "ready")
    assert (cpu.cpu_millicores, cpu.memory_mib) == (CPU_CORES * 1000, CPU_NODE_MIB - CPU_SPEC_MIB)
    assert (cpu.driver_version, cpu.cuda_version) == ("", "")
    assert (by_name["gpu-a100-1"].flavor_hint, by_name["gpu-a100-1"].gpus) == ("gpu:a100", 8)


def test_a_cpu_only_spec_asks_cores_in_the_cpu_partition_and_no_gres(backend, cluster):
    spec = make_spec('echo "$SLURM_CPUS_PER_TASK" > cpus.txt', nodes=("cpu-1",), gpus=6,
                     cpu_only=True, cpu_millicores=6000, memory_mib=6 * PER_CORE_MIB)
    fields = job_fields(cluster, backend.submit(spec))
    assert (fields["Partition"], fields["NumCPUs"], fields["CPUs/Task"]) == ("cpu", "6", "6")
    assert "gres" not in fields["TRES"] and fields.get("TresPerNode", "(null)") == "(null)"
    st = wait_for(lambda: phase_of(backend, spec.name, SUCCEEDED, FAILED), "the CPU job to end")
    assert st.phase == SUCCEEDED and st.nodes == ("cpu-1",)
    assert (cluster.run_dir / "jobs" / spec.name / "cpus.txt").read_text().strip() == "6"


# -- through the portal ------------------------------------------------------------------------


@pytest.fixture
def portal_on_slurm(cluster, db):
    from jobs.clusters.inventory import sync_inventory
    from quotas.models import Cluster as PortalCluster
    from quotas.models import Flavor, FlavorKind
    from tests import factories as fx

    gpu = fx.flavor("A100-slurm-cpu")
    gpu.slurm_gres = "gpu:a100"
    gpu.save()
    cpu = Flavor.objects.create(name="cpu-epyc", vendor="other", model="EPYC", memory_mib=0,
                                k8s_resource_name="cpu", kind=FlavorKind.CPU)
    portal_cluster = PortalCluster.objects.create(
        name="slurm-cpu", kind="slurm", config={"slurm_conf": cluster.conf, "cpu_partition": "cpu"}
    )
    assert sync_inventory(portal_cluster) == {"created": 2, "updated": 0, "missing": 0, "unknown_flavor": 0}
    dept = fx.department("C")
    project = fx.project("c1", dept)
    fx.quota(cpu, dept, 64)
    fx.quota(cpu, project, 64)
    return cpu, portal_cluster, project


def test_the_inventory_sync_reads_the_gpu_less_node_as_the_cpu_flavors(portal_on_slurm):
    cpu, portal_cluster, _project = portal_on_slurm
    node = portal_cluster.nodes.get(name="cpu-1")
    assert (node.flavor, node.gpu_count) == (cpu, CPU_CORES)
    assert (node.cpu_millicores, node.memory_mib) == (CPU_CORES * 1000, CPU_NODE_MIB - CPU_SPEC_MIB)
    assert portal_cluster.nodes.get(name="gpu-a100-1").flavor.name == "A100-slurm-cpu"


def test_a_portal_cpu_job_shows_its_cores_and_memory_and_no_gpu(portal_on_slurm, cluster):
    from jobs.clusters import dispatch
    from jobs.models import backend_name
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    cpu, portal_cluster, project = portal_on_slurm
    job = fx.submit(project, cpu, workers=1, gpus=16, name="prep", command="sleep 3600")
    try:
        assert schedule_once().admitted == 1
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        job = settle(portal_cluster, job, {"running"})
        ids = subprocess.run(["squeue", "-h", "--name", backend_name(job.pk), "-o", "%i"], env=cluster.env,
                             capture_output=True, text=True, check=True, timeout=60).stdout.split()
        fields = job_fields(cluster, ids[0])
        # Sixteen cores and their share of the node's memory (3968 MiB a core), on the CPU node.
        assert (fields["NumCPUs"], fields["CPUs/Task"], fields["NodeList"]) == ("16", "16", "cpu-1")
        assert fields["MinMemoryNode"] == f"{16 * PER_CORE_MIB // 1024}G"
        assert fields["Partition"] == "cpu" and "gres" not in fields["TRES"]
        assert fields["TRES"].startswith("cpu=16,mem=62G")
    finally:
        subprocess.run(["scancel", "--name", backend_name(job.pk)], env=cluster.env, check=False, timeout=60)
