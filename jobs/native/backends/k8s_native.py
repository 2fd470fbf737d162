"""Pods users created directly in Kubernetes (``kubectl apply``), read as external jobs
(DESIGN §11). Pure: raw pod objects (the API server's JSON, as a list or a watch event carries
them) in, :class:`~jobs.native.backends.external.ExternalRecord` out; no client, no Django.

A pod counts when it asks for an accelerator resource of a flavor (``nvidia.com/gpu``,
``nvidia.com/mig-1g.10gb`` …) and the portal did not create it (its pods carry
``app.kubernetes.io/managed-by: gpupool``). What it holds is Kubernetes' *effective request* of
that resource (the scheduler's own rule, below). Times are the kubelet's: the pod runs from its
first container's start (``state.running.startedAt``, or ``state.terminated.startedAt`` once it
ended; init containers included — the devices are the pod's from then) to its last container's
``state.terminated.finishedAt``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from jobs.clusters.backends.base import FAILED, PENDING, RUNNING, SUCCEEDED
from jobs.native.backends.external import UNKNOWN_DEVICE, ExternalRecord

PROJECT_LABEL = "gpupool.io/project"  # on a namespace: the code of the project it belongs to
MANAGED_BY = "app.kubernetes.io/managed-by"
NOT_PORTAL = f"{MANAGED_BY}!=gpupool"  # label selector: every pod the portal did not create
PHASES = {"Pending": PENDING, "Running": RUNNING, "Succeeded": SUCCEEDED, "Failed": FAILED}


def parse_time(text: str | None) -> datetime | None:
    """An RFC 3339 time as the API server writes it (``2024-05-01T10:00:00Z``), aware."""
    return datetime.fromisoformat(text) if text else None


def is_portal_pod(pod: dict[str, Any]) -> bool:
    return ((pod.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == "gpupool"


def container_request(container: dict[str, Any], resource: str, scale: Decimal = Decimal(1)) -> int:
    """What one container asks of a resource, × ``scale`` and rounded down: its request, or its
    limit when it gives only a limit (the API server defaults the request to the limit).
    Extended resources are whole numbers (the API server refuses fractions); cpu is counted in
    millicores (``scale`` 1000), memory in MiB (``scale`` 1/2²⁰)."""
    resources = container.get("resources") or {}
    for part in ("requests", "limits"):
        value = (resources.get(part) or {}).get(resource)
        if value is not None:
            return int(parse_quantity(str(value)) * scale)
    return 0


# The machine's resources an external pod holds, as Job fields (DESIGN §15).
MACHINE = (("cpu", "cpu_millicores", Decimal(1000)), ("memory", "memory_mib", 1 / Decimal(2**20)))


def machine_requests(spec: dict[str, Any]) -> dict[str, int | None]:
    """The pod's effective cpu (millicores) and memory (MiB) requests; None where it asks none."""
    out: dict[str, int | None] = {}
    for resource, field_, scale in MACHINE:
        asked = effective_request(spec, resource, scale)
        out[field_] = asked or None
    return out


def effective_request(spec: dict[str, Any], resource: str, scale: Decimal = Decimal(1)) -> int:
    """The pod's effective request, as the scheduler computes it (Kubernetes' PodRequests, see
    https://kubernetes.io/docs/concepts/workloads/pods/init-containers/#resource-sharing-within-containers
    and the sidecar containers page): init containers run one after another, each alongside the
    sidecars (init containers with ``restartPolicy: Always``) started before it; the app
    containers all run together, alongside every sidecar. The pod needs the larger of the two
    peaks, plus its ``overhead``."""
    sidecars = 0
    init_peak = 0
    for container in spec.get("initContainers") or []:
        asked = container_request(container, resource, scale)
        if container.get("restartPolicy") == "Always":
            sidecars += asked
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + asked)
    app = sum(container_request(c, resource, scale) for c in spec.get("containers") or []) + sidecars
    overhead = (spec.get("overhead") or {}).get(resource)
    return max(app, init_peak) + (int(parse_quantity(str(overhead)) * scale) if overhead is not None else 0)


def accelerator(spec: dict[str, Any], resources: Iterable[str]) -> tuple[str, int] | None:
    """The accelerator resource the pod asks most of (ties: by name), with its count; None
    for a pod without one. A pod asking for two kinds is recorded as the larger."""
    asked = sorted((-effective_request(spec, r), r) for r in set(resources))
    if not asked or asked[0][0] == 0:
        return None
    count, resource = asked[0]
    return resource, -count


def _statuses(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]


def started_at(status: dict[str, Any]) -> datetime | None:
    starts = []
    for cs in _statuses(status):
        state = cs.get("state") or {}
        for part in ("running", "terminated"):
            at = parse_time((state.get(part) or {}).get("startedAt"))
            if at is not None:
                starts.append(at)
    return min(starts, default=None)


def finished_at(status: dict[str, Any]) -> datetime | None:
    """The last container's end, when every container that reports has ended; else None."""
    states = [cs.get("state") or {} for cs in status.get("containerStatuses") or []]
    ends = [parse_time((s.get("terminated") or {}).get("finishedAt")) for s in states]
    if not ends or any(e is None for e in ends):
        return None
    inits = [
        parse_time((cs.get("state", {}).get("terminated") or {}).get("finishedAt"))
        for cs in status.get("initContainerStatuses") or []
    ]
    return max([e for e in ends if e is not None] + [e for e in inits if e is not None])


def exit_code(status: dict[str, Any]) -> int | None:
    codes = [
        (cs.get("state") or {}).get("terminated", {}).get("exitCode")
        for cs in status.get("containerStatuses") or []
        if (cs.get("state") or {}).get("terminated")
    ]
    codes = [c for c in codes if c is not None]
    failed = [c for c in codes if c != 0]
    return failed[0] if failed else (codes[0] if codes else None)


def _reason(status: dict[str, Any]) -> str:
    """Why a pending pod waits (the scheduler's PodScheduled condition), or why it ended."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return ": ".join(p for p in (cond.get("reason"), cond.get("message")) if p)
    return ": ".join(p for p in (status.get("reason"), status.get("message")) if p)


def _last_transition(status: dict[str, Any]) -> datetime | None:
    """An ended pod whose containers report no end (evicted, its node lost): the last change of
    its conditions, still the cluster's clock."""
    times = [parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or []]
    return max((t for t in times if t is not None), default=None)


def _phase(status: dict[str, Any], started: datetime | None) -> str:
    phase = status.get("phase") or "Pending"
    if phase == "Unknown":  # the kubelet stopped reporting: it holds what it held
        return RUNNING if started is not None else PENDING
    return PHASES.get(phase, PENDING)


def pod_record(
    pod: dict[str, Any], resources: Iterable[str], *, deleted: bool = False
) -> ExternalRecord | None:
    """The pod as an external job, or None when it is not one (the portal's, or no accelerator).

    ``deleted``: the pod is gone (a watch's DELETED event). If its containers' end is known it
    ends then (Succeeded when every container exited 0, else Failed); otherwise the record keeps
    its last phase and the caller ends it at the deletion's observation (:func:`gone_without_end`)."""
    if is_portal_pod(pod):
        return None
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    found = accelerator(spec, resources)
    if found is None:
        return None
    resource, devices = found
    started = started_at(status)
    phase = _phase(status, started)
    if phase == RUNNING and started is None:
        started = parse_time(status.get("startTime"))  # running, no container time yet: the kubelet's
    finished = None
    if phase in (SUCCEEDED, FAILED):
        finished = finished_at(status) or (_last_transition(status) if started else None)
    elif deleted:
        finished = finished_at(status)
        if finished is not None:
            phase = SUCCEEDED if exit_code(status) == 0 else FAILED
    node = spec.get("nodeName") or ""
    slots = tuple((node, UNKNOWN_DEVICE) for _ in range(devices)) if phase == RUNNING and node else ()
    namespace = meta.get("namespace", "")
    return ExternalRecord(
        backend_id=meta.get("uid", ""),
        name=meta.get("name", ""),
        source=namespace,
        user=f"{namespace}/{spec.get('serviceAccountName') or 'default'}",
        resource=resource,
        devices=devices,
        phase=phase,
        submitted_at=parse_time(meta.get("creationTimestamp")) or started,  # type: ignore[arg-type]
        started_at=started,
        finished_at=finished,
        reason=_reason(status)[:500],
        slots=slots,
        priority=spec.get("priorityClassName") or "",
        exit_code=exit_code(status),
        **machine_requests(spec),
    )


def gone_without_end(record: ExternalRecord | None, deleted: bool) -> bool:
    """A deleted pod whose containers never reported an end: ended at the deletion's observation."""
    return deleted and record is not None and record.phase in (PENDING, RUNNING)
