"""The one interface every cluster backend implements (simulator, Slurm, Kubernetes).

Backends are plain Python (no Django): the Celery tasks in ``jobs.clusters.tasks`` turn a ``Job`` row
into a :class:`JobSpec` and apply what :meth:`Backend.status` reports through the job services.

Idempotency: a backend object's name is derived from the portal's job id (``gp-<id>``), and
``submit`` looks before it creates, so a dispatch retried after a crash finds the job it
already created instead of starting a second one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Slot:
    node: str  # the node's name in the backend (Slurm NodeName, Kubernetes node name)
    gpu: int  # GPU index on the node
    milli: int  # 1000 = the whole device; less for shared requests


@dataclass(frozen=True, slots=True)
class Mount:
    """One storage of the job's project, as the job sees it (DESIGN §13). A snapshot taken at
    submission: editing the project's storage later does not move a submitted job's data.

    ``kind`` nfs | hostpath | pvc. Containers (Kubernetes) see it at ``mount_path``: an NFS
    volume (``nfs_server`` + ``nfs_path``), a hostPath volume (``host_path``) or a PVC
    (``claim_name``). Slurm jobs run on the nodes without containers and use ``host_path``: the
    path where the nodes see this storage on the shared file system (empty: not on Slurm nodes)."""

    name: str
    kind: str
    mount_path: str
    host_path: str = ""
    nfs_server: str = ""
    nfs_path: str = ""
    claim_name: str = ""
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class EnvVar:
    """An environment variable of the job: a plain ``value``, or a reference to a secret the
    portal never stores — ``secret`` + ``key`` name a Kubernetes Secret of the namespace (and, on
    Slurm, the file ``<secrets_dir>/<project>/<secret>/<key>`` on the nodes)."""

    name: str
    value: str = ""
    secret: str = ""
    key: str = ""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The job's checkpoint directory: ``subdir`` under ``mount`` (one of the project's storages).
    It depends on the job id only, so a preempted or requeued job resumes from the same one.
    Backends pass it as ``GPUPOOL_CHECKPOINT_DIR``: ``mount.mount_path/subdir`` in a container,
    ``mount.host_path/subdir`` on a Slurm node (and in the simulator)."""

    mount: Mount
    subdir: str

    @property
    def container_dir(self) -> str:
        return f"{self.mount.mount_path.rstrip('/')}/{self.subdir}"

    @property
    def host_dir(self) -> str:
        return f"{self.mount.host_path.rstrip('/')}/{self.subdir}" if self.mount.host_path else ""


@dataclass(frozen=True, slots=True)
class JobSpec:
    job_id: int
    name: str  # jobs.models.backend_name(job_id): "gp-<id>"
    kind: str  # training | inference | dev
    image: str
    command: str
    flavor: str
    k8s_resource: str  # e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb, huawei.com/Ascend910
    slurm_gres: str  # e.g. gpu:a100
    workers: int
    gpus_per_worker: int
    gpu_milli: int | None
    placement: tuple[tuple[Slot, ...], ...]  # one tuple of slots per worker
    max_runtime_seconds: int | None = None
    checkpointing: bool = False
    sim_duration_seconds: int | None = None
    labels: dict[str, str] = field(default_factory=dict)  # job, project, department, user
    min_workers: int | None = None  # the gang: the fewest workers the job runs with (None = workers)
    # The working environment (DESIGN §13).
    mounts: tuple[Mount, ...] = ()
    env: tuple[EnvVar, ...] = ()
    checkpoint: Checkpoint | None = None
    pull_secret: str = ""  # the project's image pull secret (a Kubernetes Secret name)
    expose_port: int | None = None  # a dev job's port (Jupyter, VS Code server, SSH)
    # How the flavor's cards are shared (DESIGN §14): "" whole cards, mig, shard, vgpu, vnpu; with
    # gpu_milli, the backend asks for that share in the mode's own resource (Slurm gres/shard,
    # HAMi vGPU memory/cores, time-sliced replicas, Ascend vNPU templates).
    sharing_mode: str = ""
    gpu_memory_mib: int = 0  # the flavor's memory per card (vGPU memory limits are a share of it)
    # What each worker asks of its node besides its GPUs (DESIGN §15), one task per node: Slurm
    # --cpus-per-task / --mem / --tmp, Kubernetes requests == limits (Guaranteed QoS). None: not asked
    # (the backend's defaults apply — jobs from before, nodes that report no CPU or memory).
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None
    # A job of a ``cpu`` flavor (DESIGN §15): its units are cores, asked as CPU (Slurm
    # --cpus-per-task, Kubernetes ``cpu``) and never as a device (no --gres, no device resource).
    cpu_only: bool = False
    # A task of an array (DESIGN §17): its index, GPUPOOL_ARRAY_INDEX in every worker's environment.
    array_index: int | None = None


# Backend-neutral job phases reported by status().
PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "lost",
)

# Whose clock a status's ``started_at`` / ``finished_at`` are (``JobEvent.time_source``).
PORTAL_CLOCK = "portal"
# The variable that gives a task of an array its index, on every backend (DESIGN §17).
ARRAY_INDEX_ENV = "GPUPOOL_ARRAY_INDEX"


@dataclass(frozen=True, slots=True)
class JobStatus:
    """``started_at`` / ``finished_at``: the instants the backend itself stamped (allocation start
    and end), timezone-aware, or None where it says nothing; ``time_source`` names that backend
    (simulator | slurm | kubernetes) — the portal meters by these (DESIGN §7)."""

    name: str
    phase: str  # one of the phases above
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    message: str = ""
    nodes: tuple[str, ...] = ()
    node_failure: bool = False  # ended because a node went down / was drained
    time_source: str = PORTAL_CLOCK


# The flavor hint of a node without accelerators (docs/resources.md "CPU-only work"): the inventory
# sync reads it as a node of a ``cpu`` flavor, its units its allocatable cores.
CPU_HINT = "cpu"


def cpu_units(cpu_millicores: int | None, capacity: int | None = None) -> int:
    """A GPU-less node's units: its whole allocatable cores (else its capacity's), 0 unknown."""
    figure = cpu_millicores if cpu_millicores is not None else capacity
    return (figure or 0) // 1000


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    flavor_hint: str  # GRES type / resource name / simulator flavor, mapped to a Flavor by the sync
    gpus: int  # units of its flavor: GPUs, slices — or, on a node without accelerators, its cores
    state: str  # ready | cordoned | down
    zone: str = ""
    spine: str = ""
    leaf: str = ""
    rack: str = ""  # its power rack when a label or feature names one (jobs.clusters.topology)
    # The whole machine (DESIGN §15) as the backend reports it; None: not reported. Allocatable is
    # capacity minus what the node keeps for itself (Slurm MemSpecLimit/CoreSpecCount, kubelet's
    # reservations).
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    local_disk_gib: int | None = None
    cpu_millicores_capacity: int | None = None
    memory_mib_capacity: int | None = None
    local_disk_gib_capacity: int | None = None
    driver_version: str = ""
    cuda_version: str = ""
    labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs: features, node labels
    # What the backend says is wrong with the node, in its words (Slurm's DOWN/FAIL/DRAIN with its
    # reason, a Kubernetes node condition); empty: nothing. A health signal (jobs.clusters.health).
    problem: str = ""


@dataclass(frozen=True, slots=True)
class LogTail:
    """The end of a job's log (stdout and stderr together). ``missing`` says why there is no
    log (not started yet, the pod is gone, the output file was removed) — then ``text`` is empty."""

    text: str
    size: int | None = None  # the whole log in bytes, where the backend knows it
    truncated: bool = False  # earlier output exists that ``text`` leaves out
    missing: str = ""


@dataclass(frozen=True, slots=True)
class Access:
    """How to reach a dev job's exposed port: a ``url`` the browser opens, or a ``command``
    (an SSH tunnel through the login node) for the user to run, and a ``note`` to read."""

    url: str = ""
    command: str = ""
    note: str = ""


LOG_CHUNK_BYTES = 64 * 1024  # the size of the pieces a whole log streams in


class BackendError(Exception):
    """The backend could not be reached or refused a call; the task retries later."""


class Backend(Protocol):
    def submit(self, spec: JobSpec) -> str:
        """Start the job (or find the one already started under ``spec.name``); its backend id."""

    def cancel(self, name: str, *, grace_seconds: int = 0) -> None:
        """Stop the job (signal, then kill after the grace period). Idempotent."""

    def status(self, names: list[str]) -> dict[str, JobStatus]:
        """Phases of the named jobs; a name the backend does not know is reported LOST."""

    def resize(self, spec: JobSpec) -> None:
        """Bring a running job to ``spec.workers`` workers on ``spec.placement`` (the scheduler
        grew it, or its owner scaled it). Idempotent; BackendError where jobs cannot resize."""

    def list_nodes(self) -> list[NodeInfo]: ...

    def set_node_schedulable(self, name: str, schedulable: bool, *, reason: str = "") -> None:
        """Stop placing new jobs on node ``name`` (its running jobs go on) with ``reason``, or
        take it back (``schedulable``): Slurm DRAIN / RESUME, Kubernetes ``spec.unschedulable``,
        the simulator's cordoned / ready. Idempotent; BackendError when the backend refuses."""

    def log_tail(self, name: str, *, max_bytes: int) -> LogTail:
        """The last ``max_bytes`` of the job's log (of its first worker where there are several)."""

    def log_stream(self, name: str) -> Iterator[bytes]:
        """The whole log, in chunks of at most LOG_CHUNK_BYTES, never all in memory. BackendError
        (with the reason) when there is none."""

    def access(self, name: str, port: int, *, nodes: tuple[str, ...], user: str) -> Access:
        """How ``user`` reaches ``port`` of the running job ``name`` (on ``nodes``)."""

    def health(self) -> str:
        """'ok', or a short reason it is not."""
