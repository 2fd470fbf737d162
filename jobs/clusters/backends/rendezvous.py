"""Rendezvous of a multi-worker job (DESIGN §17): every worker gets ``MASTER_ADDR`` (worker 0's
host), ``MASTER_PORT``, ``WORLD_SIZE``, ``NNODES`` and ``NODE_RANK`` — what ``torchrun
--nnodes=$NNODES --node_rank=$NODE_RANK --master_addr=$MASTER_ADDR --master_port=$MASTER_PORT``
and ``torch.distributed``'s ``env://`` read. A worker is one node's share of the job (one task on
Slurm, one pod on Kubernetes), so ``WORLD_SIZE`` and ``NNODES`` are both the worker count; a
launcher that starts several processes per worker (torchrun's ``--nproc-per-node``) computes
its own world size from them. Plain Python, no Django.

* Slurm: the batch script (on worker 0's node: Slurm runs it on the allocation's first node, where
  task 0 runs) looks up that node's address (``NodeAddr``, else its name) and exports the
  variables; each task sets ``NODE_RANK`` from ``SLURM_PROCID``. Slurm jobs share nodes, so
  ``MASTER_PORT`` depends on the job id (``slurm_port``).
* Kubernetes: the training Job is Indexed; a headless Service named like the job and the pods'
  ``subdomain`` give each worker the stable name ``<job>-<index>.<job>``; ``NODE_RANK`` is the
  completion index (the pod annotation), ``MASTER_ADDR`` worker 0's name. Pods have their own
  network namespace: the port is the usual 29500.
* The simulator: worker 0's node name and the Kubernetes port; each worker's variables are in the
  job's log and its status (``rendezvous``).
"""

from __future__ import annotations

import shlex
from typing import Any

PORT = 29500  # torchrun's default, where each worker has its own network namespace
# Slurm workers share the node's network: a port per job, below Linux's ephemeral ports (32768…),
# from the job id. Two running jobs collide only when their ids differ by a multiple of 10,000
# and they share worker 0's node.
SLURM_PORT_BASE = 10000
SLURM_PORT_SPAN = 10000
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "NODE_RANK")


def needed(workers: int) -> bool:
    """A job of one worker has no peer to find: no variables."""
    return workers > 1


def slurm_port(job_id: int) -> int:
    return SLURM_PORT_BASE + job_id % SLURM_PORT_SPAN


def slurm_lines(job_id: int, workers: int) -> list[str]:
    """Lines of the batch script, before ``srun``: the shared variables, worker 0's address."""
    return [
        f"export MASTER_PORT={slurm_port(job_id)} WORLD_SIZE={workers} NNODES={workers}",
        'GPUPOOL_MASTER_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        # The node's address as Slurm reaches it (NodeAddr): its name need not resolve.
        "MASTER_ADDR=$(scontrol -o show node \"$GPUPOOL_MASTER_NODE\""
        " | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)",
        'export MASTER_ADDR="${MASTER_ADDR:-$GPUPOOL_MASTER_NODE}"',
    ]


def slurm_command(command: str) -> str:
    """The worker's command with its rank first (one task per worker: the task's rank)."""
    return 'export NODE_RANK="$SLURM_PROCID"\n' + command


def k8s_master(name: str) -> str:
    """Worker 0's stable name: ``<hostname>.<subdomain>`` (the namespace's search path does the rest)."""
    return f"{name}-0.{name}"


def k8s_env(name: str, workers: int) -> list[dict[str, Any]]:
    return [
        {"name": "MASTER_ADDR", "value": k8s_master(name)},
        {"name": "MASTER_PORT", "value": str(PORT)},
        {"name": "WORLD_SIZE", "value": str(workers)},
        {"name": "NNODES", "value": str(workers)},
        {"name": "NODE_RANK", "valueFrom": {"fieldRef": {"fieldPath": COMPLETION_INDEX}}},
    ]


def k8s_service(
    name: str, namespace: str, labels: dict[str, str], selector: dict[str, str]
) -> dict[str, Any]:
    """The headless Service behind the pods' ``subdomain``: DNS records for every worker, ready or
    not (workers look each other up before they are ready)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            "selector": dict(selector),
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "protocol": "TCP", "port": PORT, "targetPort": PORT}],
        },
    }


def simulated(nodes: list[str]) -> list[dict[str, str]]:
    """Each worker's variables on the simulator (``nodes``: each worker's node, in rank order)."""
    if not needed(len(nodes)):
        return []
    shared = {"MASTER_ADDR": nodes[0], "MASTER_PORT": str(PORT), "WORLD_SIZE": str(len(nodes)),
              "NNODES": str(len(nodes))}
    return [{**shared, "NODE_RANK": str(rank)} for rank in range(len(nodes))]


def describe(variables: dict[str, str]) -> str:
    return " ".join(f"{k}={shlex.quote(variables[k])}" for k in VARIABLES)
