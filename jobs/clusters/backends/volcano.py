"""Training jobs as Volcano ``batch.volcano.sh/v1alpha1`` Jobs, for Kubernetes clusters configured
with ``{"training_api": "volcano"}``. Pure functions (no client, no Django): the manifest builder
and the status mapping; :mod:`jobs.clusters.backends.kubernetes` sends them through ``CustomObjectsApi``.

Why Volcano: the portal already decides admission and placement, but on a cluster shared with
other schedulers a plain Indexed Job's pods are bound one by one; Volcano's gang
(``minAvailable``) binds a training job's workers all together or not at all, and its ``svc``
and ``env`` plugins give the workers the host list and task index distributed training needs.

Queue: one Volcano queue per department, ``gp-<department code>`` (lower-cased, anything but
``[a-z0-9-]`` becoming ``-``), so Volcano's own views and limits line up with the portal's
tenants; ``{"volcano_queue": "<name>"}`` puts every job in one existing queue instead. The
operator creates the queues (without a capability below the department's quota: the portal's
quota engine is the one that admits).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from jobs.clusters.backends.base import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, JobSpec, JobStatus

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
API_VERSION = f"{GROUP}/{VERSION}"
SCHEDULER = "volcano"
TASK = "worker"
QUEUE_PREFIX = "gp-"
# Volcano restarts a checkpointing job in place when a pod is evicted (it resumes from its
# checkpoint); anything else aborts the gang, and the portal decides (requeue or fail).
RETRIES_CHECKPOINTING = 3

_PHASES = {
    "Pending": PENDING,
    "Running": RUNNING,
    "Restarting": RUNNING,  # pods are being recreated: the job still holds its GPUs
    "Completing": RUNNING,
    "Completed": SUCCEEDED,
    "Aborting": FAILED,
    "Aborted": FAILED,
    "Terminating": FAILED,
    "Terminated": FAILED,
    "Failed": FAILED,
}
FINISHED = frozenset({"Completed", "Aborted", "Terminated", "Failed"})


def queue_name(spec: JobSpec, fixed: str | None = None) -> str:
    if fixed:
        return fixed
    department = spec.labels.get("department", "")
    label = re.sub(r"[^a-z0-9-]+", "-", department.lower()).strip("-")
    return f"{QUEUE_PREFIX}{label}"[:63].rstrip("-") if label else "default"


def policies(spec: JobSpec) -> list[dict[str, str]]:
    evicted = "RestartJob" if spec.checkpointing else "AbortJob"
    return [{"event": "PodEvicted", "action": evicted}, {"event": "PodFailed", "action": "AbortJob"}]


def build_volcano_job(
    spec: JobSpec, namespace: str, *, metadata: dict[str, Any], template: dict[str, Any], queue: str | None
) -> dict[str, Any]:
    """``metadata`` and ``template`` come from the Kubernetes builders, so a Volcano job's pods
    carry exactly the resources, node affinity, labels and annotations of the batch Job's."""
    gang = max(1, min(spec.min_workers or spec.workers, spec.workers))
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "schedulerName": SCHEDULER,
            "queue": queue_name(spec, queue),
            "minAvailable": gang,
            "maxRetry": RETRIES_CHECKPOINTING if spec.checkpointing else 0,
            "policies": policies(spec),
            "plugins": {"env": [], "svc": []},
            "tasks": [{"name": TASK, "replicas": spec.workers, "template": template}],
        },
    }


def _when(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def volcano_status(
    obj: dict[str, Any],
    *,
    nodes: tuple[str, ...],
    node_failure: bool,
    exit_code: int | None,
    started: datetime | None,
) -> JobStatus:
    """A Volcano Job (a dict from CustomObjectsApi) as a backend-neutral status. ``nodes``,
    ``node_failure``, ``exit_code`` and ``started`` are read from its pods by the caller."""
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    state = (obj.get("status") or {}).get("state") or {}
    phase = _PHASES.get(state.get("phase") or "Pending", PENDING)
    at = _when(state.get("lastTransitionTime"))
    if meta.get("deletionTimestamp") and phase != SUCCEEDED:
        return JobStatus(name, CANCELLED, finished_at=_when(meta["deletionTimestamp"]), nodes=nodes)
    if phase == PENDING:
        return JobStatus(name, PENDING, nodes=nodes)
    if phase == RUNNING:
        return JobStatus(name, RUNNING, started_at=started or at, nodes=nodes)
    if phase == SUCCEEDED:
        return JobStatus(name, SUCCEEDED, started_at=started, finished_at=at, exit_code=0, nodes=nodes)
    reason, message = state.get("reason") or "", state.get("message") or ""
    evicted = "evict" in f"{reason} {message}".lower()
    return JobStatus(
        name,
        FAILED,
        started_at=started,
        finished_at=at,
        exit_code=exit_code,
        message=f"{state.get('phase')}: {reason} {message}".strip(": "),
        nodes=nodes,
        node_failure=node_failure or evicted,
    )


def replicas_of(obj: dict[str, Any]) -> int:
    return sum(int(t.get("replicas") or 0) for t in (obj.get("spec") or {}).get("tasks") or [])


def hostnames_of(obj: dict[str, Any]) -> set[str]:
    """The node names a Volcano Job's pod template is pinned to."""
    found: set[str] = set()
    for task in (obj.get("spec") or {}).get("tasks") or []:
        found |= affinity_hosts(((task.get("template") or {}).get("spec") or {}).get("affinity"))
    return found


def affinity_hosts(affinity: dict[str, Any] | None) -> set[str]:
    terms: Iterable[dict[str, Any]] = (
        ((affinity or {}).get("nodeAffinity") or {})
        .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        .get("nodeSelectorTerms", [])
    )
    return {v for t in terms for e in t.get("matchExpressions", []) for v in e.get("values", [])}
