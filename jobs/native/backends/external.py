"""A job the portal did not submit, as a backend reports it (DESIGN §11). Plain Python, no Django.

Importers (Slurm's ``squeue``/``sacct``, Kubernetes pods) turn what the backend prints into
``ExternalRecord``; ``jobs.native.external`` records them. Phases are the backend phases of
:mod:`jobs.clusters.backends.base` (pending, running, succeeded, failed, cancelled).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from datetime import datetime

from jobs.clusters.backends.base import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED

PHASES = frozenset({PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED})
ENDED = frozenset({SUCCEEDED, FAILED, CANCELLED})
# A slot's device index when the backend does not say which device (a pod's extended resource):
# recording takes the lowest index of that node no running job holds (jobs.native.external).
UNKNOWN_DEVICE = -1


@dataclass(frozen=True, slots=True)
class ExternalRecord:
    """One backend job. ``source``: the Slurm account or Kubernetes namespace that maps it to a
    project; ``resource``: what decides its flavor (Slurm GRES ``gpu:<type>``, or the Kubernetes
    resource name such as ``nvidia.com/gpu``); ``devices``: accelerators it holds in all;
    ``slots``: (node name, device index) it holds while running (empty once ended);
    ``priority``: the backend's priority name (Slurm QOS, pod priorityClassName), may be empty."""

    backend_id: str
    name: str
    source: str
    user: str
    resource: str
    devices: int
    phase: str
    submitted_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""
    slots: tuple[tuple[str, int], ...] = ()
    priority: str = ""
    exit_code: int | None = None
    # A share of each device (Slurm gres/shard, a vGPU): thousandths of a card, 1..999; None whole.
    gpu_milli: int | None = None
    # The CPU and memory it holds in all (Slurm AllocTRES, a pod's requests); None: not known.
    # One external job is one worker: these are its Job.cpu_millicores / memory_mib.
    cpu_millicores: int | None = None
    memory_mib: int | None = None
    # A task of a native array (Slurm ``123_4``, DESIGN §17): the array's backend id and the task's
    # index; the unstarted tasks of a pending array (``123_[5-9]``) have the array and no index yet.
    array_id: str = ""
    array_index: int | None = None

    def problem(self) -> str | None:
        """Why the record cannot be recorded as it is, or None. Times must be aware, ordered
        (submit ≤ start ≤ end) and present for the phase; a bad record is reported, never fixed up."""
        if self.phase not in PHASES:
            return f"unknown phase {self.phase!r}"
        if self.devices < 1:
            return "holds no accelerator"
        times = [t for t in (self.submitted_at, self.started_at, self.finished_at) if t is not None]
        if any(t.tzinfo is None for t in times):
            return "time without a zone"
        if self.phase == RUNNING and self.started_at is None:
            return "running without a start time"
        if self.phase in ENDED and self.started_at is not None and self.finished_at is None:
            return "ended without an end time"
        start, end = self.started_at, self.finished_at
        if start is not None and end is not None and end < start:
            return "ends before it starts"
        return None

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("submitted_at", "started_at", "finished_at"):
            out[key] = out[key].isoformat() if out[key] is not None else None
        out["slots"] = [list(s) for s in self.slots]
        return out

    @classmethod
    def from_json(cls, data: dict) -> ExternalRecord:
        values = dict(data)
        for key in ("submitted_at", "started_at", "finished_at"):
            values[key] = datetime.fromisoformat(values[key]) if values.get(key) else None
        values["slots"] = tuple((str(n), int(i)) for n, i in values.get("slots") or ())
        return cls(**values)


_NOT_NAME = re.compile(r"[^a-z0-9-]+")


def job_name(name: str, fallback: str) -> str:
    """A portal job name (lower-case letters, digits, '-', ≤ 63) close to the backend's name."""
    cleaned = _NOT_NAME.sub("-", name.lower()).strip("-")[:63].strip("-")
    return cleaned or fallback
