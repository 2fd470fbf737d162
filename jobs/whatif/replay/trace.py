"""The records every trace reader produces (pure: no Django).

Times are seconds from the trace start; ``gpu_milli`` is per-GPU thousandths for a shared GPU
(``num_gpus == 1`` and ``gpu_milli < 1000``), else 1000; ``gpu_types`` lists the GPU models a job
may run on (empty: any); ``tenant`` is a ``/``-separated department/project path; ``cpu_milli`` /
``memory_mib`` are a worker's request and a node's allocatable CPU and memory (None: not in the
trace)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TraceJob:
    job_id: str
    submit_time: float
    duration: float | None  # None: never ends within the trace (e.g. still running at its end)
    num_gpus: int  # GPUs per worker
    gpu_milli: int = 1000
    gpu_types: tuple[str, ...] = ()
    tenant: str = "default/default"
    kind: str = "training"
    priority: int = 100
    workers: int = 1
    # What each worker asks of its node besides GPUs (DESIGN §15); None: nothing (the trace has none).
    cpu_milli: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    gpus: int
    model: str
    nodes_per_leaf: int = 16
    leaves_per_spine: int = 8
    # The node's real topology (an exported inventory, jobs/whatif/history.py); blank: numbered from
    # nodes_per_leaf / leaves_per_spine in list order (spec.engine_nodes).
    zone: str = ""
    spine: str = ""
    leaf: str = ""
    # Allocatable CPU and memory (Alibaba 2023's node list has them); None: not in the trace, only
    # GPUs are placed.
    cpu_milli: int | None = None
    memory_mib: int | None = None
