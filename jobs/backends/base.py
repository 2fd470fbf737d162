"""The one interface every cluster backend implements (simulator, Slurm, Kubernetes).

Backends are plain Python (no Django): the Celery tasks in ``jobs.tasks`` turn a ``Job`` row
into a :class:`JobSpec` and apply what :meth:`Backend.status` reports through the job services.

Idempotency: a backend object's name is derived from the portal's job id (``gp-<id>``), and
``submit`` looks before it creates, so a dispatch retried after a crash finds the job it
already created instead of starting a second one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


def backend_name(job_id: int) -> str:
    return f"gp-{job_id}"


@dataclass(frozen=True, slots=True)
class Slot:
    node: str  # the node's name in the backend (Slurm NodeName, Kubernetes node name)
    gpu: int  # GPU index on the node
    milli: int  # 1000 = the whole device; less for shared requests


@dataclass(frozen=True, slots=True)
class JobSpec:
    job_id: int
    name: str  # backend_name(job_id)
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


# Backend-neutral job phases reported by status().
PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST = (
    "pending", "running", "succeeded", "failed", "cancelled", "lost")

# Whose clock a status's ``started_at`` / ``finished_at`` are (``JobEvent.time_source``).
PORTAL_CLOCK = "portal"


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


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    flavor_hint: str  # GRES type / resource name / simulator flavor, mapped to a Flavor by the sync
    gpus: int
    state: str  # ready | cordoned | down
    zone: str = ""
    spine: str = ""
    leaf: str = ""


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

    def health(self) -> str:
        """'ok', or a short reason it is not."""
