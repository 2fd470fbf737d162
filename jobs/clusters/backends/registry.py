"""Which backend serves a cluster. Connection settings come from ``Cluster.config`` (no secrets:
those stay in the environment).

``{"simulated": true}`` in a Slurm or Kubernetes cluster's config serves it from the simulator
instead: the demo centre uses that, so all its clusters run jobs without real controllers."""

from __future__ import annotations

import os

from jobs.clusters.backends.base import Backend

DEFAULT_SIMULATOR_URL = "http://127.0.0.1:9400"
# Cluster.config keys a Slurm cluster passes on to SlurmBackend as they are.
SLURM_OPTIONS = ("secrets_dir", "login_host", "shards_per_gpu", "cpu_partition")


def is_simulated(kind: str, config: dict) -> bool:
    return kind == "simulator" or bool(config.get("simulated"))


def simulator_url(config: dict) -> str:
    return config.get("url") or os.environ.get("GPUPOOL_SIMULATOR_URL", DEFAULT_SIMULATOR_URL)


def backend_for(kind: str, config: dict) -> Backend:
    if is_simulated(kind, config):
        from jobs.clusters.backends.simulator import SimulatorBackend

        return SimulatorBackend(simulator_url(config))
    if kind == "slurm":
        from jobs.clusters.backends.slurm import SlurmBackend

        # secrets_dir: where the nodes keep secret values; login_host: the tunnel's login node.
        options = {key: config[key] for key in SLURM_OPTIONS if config.get(key)}
        return SlurmBackend(
            config.get("slurm_conf") or os.environ["SLURM_CONF"], partition=config.get("partition"), **options
        )
    if kind == "kubernetes":
        from jobs.clusters.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(**config)
    raise ValueError(f"no backend for cluster kind {kind!r}")
