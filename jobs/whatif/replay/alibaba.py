"""Reader of the Alibaba GPU 2023 "openb" trace (cluster-trace-gpu-v2023), pure: no Django.

Public API::

    read_nodes(path) -> list[TraceNode]            # openb_node_list_*.csv (CPU-only nodes skipped)
    read_pods(path, *, gpu_only=True) -> list[TraceJob]   # openb_pod_list_*.csv
    read_node_rows(path) -> list[NodeRow]          # + cpu_milli / memory_mib (packing mode)
    read_pod_rows(path) -> list[PodRow]            # + cpu_milli / memory_mib, every pod

Mapping to :class:`~jobs.whatif.replay.trace.TraceJob`:

* ``job_id`` = ``name``; one pod = one worker (``workers=1``) of ``num_gpus = num_gpu`` GPUs;
* ``gpu_milli`` = the per-GPU share when ``num_gpu == 1`` and ``gpu_milli < 1000`` (a shared GPU),
  else 1000 (CPU-only pods, kept only with ``gpu_only=False``, have ``num_gpus == 0`` and
  ``gpu_milli == 0``);
* ``gpu_types`` = ``gpu_spec`` split on ``|`` (empty: any model);
* ``tenant`` = ``"<qos>/default"`` (the QoS class LS / BE / Burstable / Guaranteed is the tenant);
* ``cpu_milli`` / ``memory_mib`` = the pod's (one worker's) request, and a node's allocatable
  figures on :class:`TraceNode` (0 or missing: None, nothing asked / not reported);
* ``submit_time`` = ``creation_time``; ``duration`` = ``deletion_time - creation_time`` (None when
  the deletion time is missing); ``kind`` = ``"inference"`` for LS pods, else ``"training"``.

The files themselves stay in the shared traces folder (``jobs.whatif.replay.paths``); nothing here
copies them.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from jobs.whatif.replay.trace import TraceJob, TraceNode

__all__ = ["NodeRow", "PodRow", "read_node_rows", "read_nodes", "read_pod_rows", "read_pods"]

FULL = 1000


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class PodRow:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, 1000 for whole GPUs, 0 for CPU-only pods
    gpu_types: tuple[str, ...]
    qos: str
    phase: str
    creation_time: float | None
    deletion_time: float | None

    @property
    def gpu_demand_milli(self) -> int:
        """GPU demand in milli-GPUs (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli


def _int(text: str | None, default: int = 0) -> int:
    text = (text or "").strip()
    return int(float(text)) if text else default


def _float(text: str | None) -> float | None:
    text = (text or "").strip()
    return float(text) if text else None


def read_node_rows(path: str | Path) -> list[NodeRow]:
    """Every node of an ``openb_node_list_*.csv`` (CPU-only ones too, with ``gpus == 0``)."""
    with open(path, newline="") as fh:
        return [NodeRow(name=r["sn"], cpu_milli=_int(r.get("cpu_milli")),
                        memory_mib=_int(r.get("memory_mib")), gpus=_int(r.get("gpu")),
                        model=(r.get("model") or "").strip())
                for r in csv.DictReader(fh)]


def read_nodes(path: str | Path) -> list[TraceNode]:
    """The GPU nodes of an ``openb_node_list_*.csv`` (file order)."""
    return [TraceNode(name=n.name, gpus=n.gpus, model=n.model, cpu_milli=n.cpu_milli or None,
                      memory_mib=n.memory_mib or None)
            for n in read_node_rows(path) if n.gpus > 0]


def read_pod_rows(path: str | Path) -> list[PodRow]:
    """Every pod of an ``openb_pod_list_*.csv``, file order. The ``multigpu`` variants have only
    five columns: qos, phase and times are then empty / None."""
    rows = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            num = _int(r.get("num_gpu"))
            milli = _int(r.get("gpu_milli"), FULL) if num else 0
            if num and (milli <= 0 or milli >= FULL or num > 1):
                milli = FULL
            spec = (r.get("gpu_spec") or "").strip()
            rows.append(PodRow(
                name=r["name"], cpu_milli=_int(r.get("cpu_milli")), memory_mib=_int(r.get("memory_mib")),
                num_gpu=num, gpu_milli=milli,
                gpu_types=tuple(t.strip() for t in spec.split("|") if t.strip()),
                qos=(r.get("qos") or "").strip(), phase=(r.get("pod_phase") or "").strip(),
                creation_time=_float(r.get("creation_time")), deletion_time=_float(r.get("deletion_time")),
            ))
    return rows


def _job(p: PodRow) -> TraceJob:
    duration = None
    if p.creation_time is not None and p.deletion_time is not None:
        duration = max(0.0, p.deletion_time - p.creation_time)
    return TraceJob(job_id=p.name, submit_time=p.creation_time or 0.0, duration=duration,
                    num_gpus=p.num_gpu, gpu_milli=p.gpu_milli, gpu_types=p.gpu_types,
                    tenant=f"{p.qos or 'unknown'}/default",
                    kind="inference" if p.qos == "LS" else "training", workers=1,
                    cpu_milli=p.cpu_milli or None, memory_mib=p.memory_mib or None)


def read_pods(path: str | Path, *, gpu_only: bool = True) -> list[TraceJob]:
    """The pods as :class:`TraceJob` records, file order (= creation order in the openb files).
    ``gpu_only`` (default) drops the CPU-only pods (``num_gpu == 0``)."""
    return [_job(p) for p in read_pod_rows(path) if p.num_gpu > 0 or not gpu_only]
