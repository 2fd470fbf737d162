"""GPU sharing enforced by Slurm (DESIGN §14): a shared job (``gpu_milli``) asks for ``gres/shard``
of its node's GPU, on a real cluster of two nodes with one fake A100 each, 8 shards per GPU
(deploy/slurm/start.sh), started for this module and stopped (accounting purged) at its end.

One GPU per node makes "on one physical GPU" a fact of the node, not of Slurm's choice: node 1
shows two half-card jobs sharing its GPU, node 2 a whole-GPU job and a shard job never sharing.
Every job sleeps until cancelled, so the states waited for (RUNNING, PENDING for Resources) last.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobs.clusters.backends.base import CANCELLED, PENDING, RUNNING, JobSpec, Slot
from jobs.clusters.backends.slurm import SlurmBackend, shards_for
from jobs.native.backends.slurm_native import parse_sacct, parse_scontrol_gpus, sacct_args, to_record
from tests.backends.test_slurm import Cluster, _sh, phase_of, slurm_cluster
from tests.waiting import wait_until

pytestmark = pytest.mark.slurm

NODES = ["gpu-a100-1", "gpu-a100-2"]
FOREVER = "sleep 100000"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with slurm_cluster(len(NODES), 1, "--shards-per-gpu", "8", prefix="gp-shard-") as started:
        yield started


@pytest.fixture
def backend(cluster) -> SlurmBackend:
    return SlurmBackend(cluster.conf, timeout=30)


_ids = iter(range(5000, 100000))


def shared_spec(node: str, milli: int | None, command: str = FOREVER) -> JobSpec:
    """One worker on one GPU of ``node``: a share of ``milli`` thousandths, or the whole card (None)."""
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
        workers=1,
        gpus_per_worker=1,
        gpu_milli=milli,
        placement=((Slot(node, 0, milli or 1000),),),
        labels={"job": str(job_id), "project": "pa", "department": "A", "user": "alice"},
        sharing_mode="shard" if milli else "",
    )


def wait_for(check, what: str):
    return wait_until(check, what, interval=0.3)


def job_line(cluster: Cluster, job_id: str) -> str:
    return _sh(["scontrol", "-d", "-o", "show", "job", job_id], cluster.env).stdout


def pending_for_resources(backend: SlurmBackend, name: str):
    st = backend.status([name])[name]
    return st if st.phase == PENDING and "(Resources)" in st.message else None


def shard_tres_of(cluster: Cluster, ids: list[str]) -> list[str] | None:
    """Each job's AllocTRES from sacct, once accounting has all of them with their shards."""
    args = ["sacct", "-X", "-P", "-n", "-j", ",".join(ids), "-o", "AllocTRES"]
    tres = [t for t in _sh(args, cluster.env).stdout.split() if "gres/shard" in t]
    return tres if len(tres) == len(ids) else None


def cancel_all(backend: SlurmBackend, *specs: JobSpec) -> None:
    for spec in specs:
        backend.cancel(spec.name)
    for spec in specs:
        wait_for(lambda s=spec: phase_of(backend, s.name, CANCELLED), f"{spec.name} to be cancelled")


def test_shards_for_rounds_a_share_up_to_whole_shards():
    assert [shards_for(m, 8) for m in (1, 125, 126, 250, 500, 999)] == [1, 1, 2, 2, 4, 8]
    assert shards_for(None, 8) == shards_for(1000, 8) == 0  # whole cards take gres/gpu
    assert shards_for(500, 0) == 0  # a cluster without shards: the whole GPU, as before


def test_a_shared_job_asks_for_shards_of_its_gpu_type_and_a_whole_one_for_gpus(backend):
    half, whole = shared_spec("gpu-a100-1", 500), shared_spec("gpu-a100-1", None)
    assert backend._layout(half) == [
        "--nodes=1",
        "--ntasks-per-node=1",
        "--gres=shard:a100:4",
        "--nodelist=gpu-a100-1",
    ]
    assert "--gres=gpu:a100:1" in backend._layout(whole)
    mapped = SlurmBackend(backend.slurm_conf, gres_map={"gpu:a100": "gpu:nvidia_a100"})
    assert "--gres=shard:nvidia_a100:4" in mapped._layout(half)


def test_the_inventory_counts_gpus_not_shards(backend):
    nodes = backend.list_nodes()
    assert [(n.name, n.flavor_hint, n.gpus, n.state) for n in nodes] == [
        (name, "gpu:a100", 1, "ready") for name in NODES
    ]


def test_two_half_card_jobs_share_the_one_gpu_of_a_node_and_sacct_shows_their_shards(backend, cluster):
    first, second = shared_spec("gpu-a100-1", 500), shared_spec("gpu-a100-1", 500)
    ids = [backend.submit(first), backend.submit(second)]
    try:
        for spec in (first, second):
            wait_for(lambda s=spec: phase_of(backend, s.name, RUNNING), f"{spec.name} to run")
        # Both at once on the node's single GPU (index 0), each holding 4 of its 8 shards.
        both = [backend.status([s.name])[s.name] for s in (first, second)]
        assert [(st.phase, st.nodes) for st in both] == [(RUNNING, ("gpu-a100-1",))] * 2
        lines = [job_line(cluster, job_id) for job_id in ids]
        assert all("GRES=shard:4(IDX:0)" in line and "gres/shard=4" in line for line in lines)
        assert parse_scontrol_gpus("\n".join(lines)) == {job_id: (("gpu-a100-1", 0),) for job_id in ids}
        # Accounting has the shards (slurmdbd gets them asynchronously: wait for the record).
        tres = wait_for(lambda: shard_tres_of(cluster, ids), "sacct to show both jobs' shard TRES")
        assert all("gres/shard=4" in t.split(",") for t in tres), tres
        assert all("gres/gpu" not in t for t in tres)  # no whole GPU was given out
        # Metering of jobs submitted outside the portal reads the same records: half a card each.
        # Slurm 22.05 accounts shards untyped (gres/shard=4, never gres/shard:a100): no GPU type.
        native = parse_sacct(_sh(sacct_args(job_ids=ids), cluster.env).stdout)
        assert [(j.gres_type, j.devices, j.gpu_milli, j.nodes) for j in native] == [
            ("gpu", 1, 500, ("gpu-a100-1",))
        ] * 2
        assert [to_record(j).devices for j in native] == [1, 1]
    finally:
        cancel_all(backend, first, second)


def test_a_whole_gpu_job_and_a_shard_job_never_share_a_gpu(backend, cluster):
    whole, shard = shared_spec("gpu-a100-2", None), shared_spec("gpu-a100-2", 250)
    backend.submit(whole)
    try:
        wait_for(lambda: phase_of(backend, whole.name, RUNNING), "the whole-GPU job to run")
        shard_id = backend.submit(shard)
        # The node has 8 free shards, but they are on the GPU the whole job holds: Slurm waits.
        st = wait_for(
            lambda: pending_for_resources(backend, shard.name), "the shard job to wait for Resources"
        )
        assert st.nodes == () and "TresPerNode=gres:shard:a100:2" in job_line(cluster, shard_id)
        assert phase_of(backend, whole.name, RUNNING)
        # Once the GPU is free, the same shard job runs there.
        cancel_all(backend, whole)
        wait_for(lambda: phase_of(backend, shard.name, RUNNING), "the shard job to run on the freed GPU")
        # And now the GPU is in shards, a whole-GPU job waits in its turn.
        second_whole = shared_spec("gpu-a100-2", None)
        backend.submit(second_whole)
        wait_for(lambda: pending_for_resources(backend, second_whole.name), "the whole-GPU job to wait")
        assert phase_of(backend, shard.name, RUNNING)
        cancel_all(backend, second_whole)
    finally:
        cancel_all(backend, whole, shard)
