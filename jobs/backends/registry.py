"""Which backend serves a cluster. Connection settings come from ``Cluster.config`` (no secrets:
those stay in the environment)."""

from __future__ import annotations

import os

from .base import Backend


def backend_for(kind: str, config: dict) -> Backend:
    if kind == "simulator":
        from .simulator import SimulatorBackend

        return SimulatorBackend(
            config.get("url") or os.environ.get("GPUPOOL_SIMULATOR_URL", "http://127.0.0.1:9400")
        )
    if kind == "slurm":
        from .slurm import SlurmBackend

        return SlurmBackend(
            config.get("slurm_conf") or os.environ["SLURM_CONF"], partition=config.get("partition")
        )
    if kind == "kubernetes":
        from .kubernetes import KubernetesBackend

        return KubernetesBackend(**config)
    raise ValueError(f"no backend for cluster kind {kind!r}")
