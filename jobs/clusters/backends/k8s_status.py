"""Kubernetes objects (the official client's model objects) mapped to backend-neutral statuses and
node records. Pure: no API calls, no Django.

Times: a job runs from its first container's start to its last container's finish (the pods'
``containerStatuses``); the owning object's times (Job ``startTime``/``completionTime``, condition
transitions, deletion) stand in only where no container reports one. All are the cluster's clock
(``time_source`` "kubernetes", set by the backend)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from jobs.clusters import topology
from jobs.clusters.backends.base import (
    CANCELLED,
    CPU_HINT,
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    JobStatus,
    NodeInfo,
    cpu_units,
)

# Extended resources counted as accelerators, in the order a node's capacity is searched.
# nvidia.com/gpu.shared: time-sliced replicas under the NVIDIA device plugin's renameByDefault.
GPU_RESOURCES = (
    "nvidia.com/gpu",
    "nvidia.com/gpu.shared",
    "huawei.com/Ascend910",
    "cambricon.com/mlu",
    "hygon.com/dcu",
)
# GPU Feature Discovery's count of physical cards: with time-slicing the node advertises
# cards × replicas of its resource, and the pool counts cards.
GFD_GPU_COUNT = "nvidia.com/gpu.count"
GPU_RESOURCE_PREFIXES = ("nvidia.com/mig-",)

# Pod / Job reasons meaning the node went away (lost, shut down, drained) rather than the program failing.
NODE_FAILURE_REASONS = frozenset(
    {
        "NodeLost",
        "NodeShutdown",
        "Shutdown",
        "Terminated",
        "Evicted",
        "NodeAffinity",
        "UnexpectedAdmissionError",
        "DeletionByTaintManager",
        "DeletionByPodGC",
        "TerminationByKubelet",
    }
)


def _conditions(obj: Any) -> dict[str, Any]:
    return {c.type: c for c in (getattr(obj.status, "conditions", None) or []) if c.status == "True"}


def pod_node_failure(pod: Any) -> bool:
    status = pod.status
    if status is None:
        return False
    if status.reason in NODE_FAILURE_REASONS:
        return True
    return any(cond.type == "DisruptionTarget" and cond.status == "True" for cond in status.conditions or [])


def exit_code_of(pods: Iterable[Any]) -> int | None:
    codes = []
    for pod in pods:
        for cs in (pod.status.container_statuses if pod.status else None) or []:
            terminated = cs.state.terminated if cs.state else None
            if terminated is not None and terminated.exit_code is not None:
                codes.append(terminated.exit_code)
    nonzero = [c for c in codes if c != 0]
    return nonzero[0] if nonzero else (codes[0] if codes else None)


def pending_reason(pods: Iterable[Any]) -> str:
    """Why the job's pods do not run yet, in the cluster's words (DESIGN §17, the start timeout):
    a container's waiting reason other than the normal ``ContainerCreating`` (``ImagePullBackOff``,
    ``ErrImagePull``, ``CreateContainerConfigError``) with its message, else a pod's
    ``PodScheduled`` condition that is False (``Unschedulable: 0/4 nodes are available…``); ""
    when no pod says anything (none created yet)."""
    pods = list(pods)
    for pod in pods:
        for cs in (pod.status.container_statuses if pod.status else None) or []:
            waiting = cs.state.waiting if cs.state else None
            if waiting is not None and waiting.reason and waiting.reason != "ContainerCreating":
                return f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
    for pod in pods:
        for cond in (pod.status.conditions if pod.status else None) or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return f"{cond.reason or 'Unschedulable'}: {cond.message}" if cond.message else (
                    cond.reason or "Unschedulable")
    return ""


def _container_states(pods: Iterable[Any]) -> list[Any]:
    return [
        cs.state
        for pod in pods
        for cs in (pod.status.container_statuses if pod.status else None) or []
        if cs.state is not None
    ]


def containers_started(pods: Iterable[Any]) -> datetime | None:
    """When the first container of the job's pods started (``state.running.startedAt``, or
    ``state.terminated.startedAt`` once it ended): the GPUs are in use from then — not from the
    object's creation or the pod's scheduling, which come before the image pull."""
    starts = []
    for state in _container_states(pods):
        for part in (state.running, state.terminated):
            if part is not None and part.started_at is not None:
                starts.append(part.started_at)
    return min(starts, default=None)


def containers_finished(pods: Iterable[Any]) -> datetime | None:
    """When the last container of the job's pods finished (``state.terminated.finishedAt``), if
    every container it reports has ended; None while one still runs or none reports."""
    states = _container_states(pods)
    if not states or any(s.terminated is None or s.terminated.finished_at is None for s in states):
        return None
    return max(s.terminated.finished_at for s in states)


def nodes_of(pods: Iterable[Any]) -> tuple[str, ...]:
    return tuple(sorted({p.spec.node_name for p in pods if p.spec is not None and p.spec.node_name}))


def job_status(job: Any, pods: list[Any]) -> JobStatus:
    name, status = job.metadata.name, job.status
    # Containers' own times first; the Job's (set by its controller) where no pod reports any.
    started: datetime | None = containers_started(pods) or (status.start_time if status else None)
    ended = containers_finished(pods)
    common = {"started_at": started, "nodes": nodes_of(pods)}
    conditions = _conditions(job)
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        return JobStatus(name, SUCCEEDED, finished_at=ended or status.completion_time, exit_code=0, **common)
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    if failed is not None:
        node_failure = failed.reason in NODE_FAILURE_REASONS or any(pod_node_failure(p) for p in pods)
        return JobStatus(
            name,
            FAILED,
            finished_at=ended or failed.last_transition_time,
            exit_code=exit_code_of(pods),
            message=f"{failed.reason or ''}: {failed.message or ''}".strip(": "),
            node_failure=node_failure,
            **common,
        )
    if job.metadata.deletion_timestamp is not None:
        return JobStatus(name, CANCELLED, finished_at=ended or job.metadata.deletion_timestamp, **common)
    running = bool(status and status.ready) or any(p.status and p.status.phase == "Running" for p in pods)
    if running:
        return JobStatus(name, RUNNING, **common)
    return JobStatus(name, PENDING, message=pending_reason(pods), **common)


def deployment_status(deployment: Any, pods: list[Any]) -> JobStatus:
    name, status = deployment.metadata.name, deployment.status
    nodes = nodes_of(pods)
    if deployment.metadata.deletion_timestamp is not None:
        ended = containers_finished(pods) or deployment.metadata.deletion_timestamp
        return JobStatus(name, CANCELLED, finished_at=ended, nodes=nodes)
    for cond in (status.conditions if status else None) or []:
        if (
            cond.type == "Progressing"
            and cond.status == "False"
            and cond.reason == "ProgressDeadlineExceeded"
        ):
            return JobStatus(
                name,
                FAILED,
                message=cond.message or cond.reason,
                nodes=nodes,
                finished_at=cond.last_transition_time,
            )
    wanted = deployment.spec.replicas if deployment.spec and deployment.spec.replicas is not None else 1
    available = (status.available_replicas if status else None) or 0
    if wanted > 0 and available >= wanted:
        started = containers_started(pods) or min(
            (
                c.last_transition_time
                for c in (status.conditions or [])
                if c.type == "Available" and c.status == "True" and c.last_transition_time
            ),
            default=None,
        )
        return JobStatus(name, RUNNING, started_at=started, nodes=nodes)
    return JobStatus(name, PENDING, nodes=nodes, message=pending_reason(pods))


def pod_status(pod: Any) -> JobStatus:
    name, status = pod.metadata.name, pod.status
    phase = (status.phase if status else None) or "Pending"
    started = containers_started([pod]) or (status.start_time if status else None)
    nodes = nodes_of([pod])
    finished = containers_finished([pod])
    if phase == "Succeeded":
        return JobStatus(name, SUCCEEDED, started_at=started, finished_at=finished, exit_code=0, nodes=nodes)
    if phase == "Failed":
        message = f"{status.reason or ''}: {status.message or ''}".strip(": ")
        return JobStatus(
            name,
            FAILED,
            started_at=started,
            finished_at=finished,
            exit_code=exit_code_of([pod]),
            message=message,
            nodes=nodes,
            node_failure=pod_node_failure(pod),
        )
    if pod.metadata.deletion_timestamp is not None:
        ended = finished or pod.metadata.deletion_timestamp
        return JobStatus(name, CANCELLED, started_at=started, finished_at=ended, nodes=nodes)
    if phase == "Running":
        return JobStatus(name, RUNNING, started_at=started, nodes=nodes)
    if phase == "Pending":
        return JobStatus(name, PENDING, nodes=nodes, message=pending_reason([pod]))
    # "Unknown": the kubelet stopped reporting, so the pod's fate is unknown.
    return JobStatus(
        name, LOST, started_at=started, nodes=nodes, node_failure=True, message=f"pod phase {phase}"
    )


# -- nodes


def gpu_resource(capacity: dict[str, Any] | None) -> tuple[str, int] | None:
    """The first known accelerator resource with a non-zero count in ``capacity``."""
    capacity = capacity or {}
    names = [r for r in GPU_RESOURCES if r in capacity]
    names += sorted(r for r in capacity if r.startswith(GPU_RESOURCE_PREFIXES))
    for resource in names:
        count = int(parse_quantity(str(capacity[resource])))
        if count > 0:
            return resource, count
    return None


# A control plane's node runs the cluster, not jobs (kubeadm taints it NoSchedule): never a CPU node.
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")


def node_info(node: Any) -> NodeInfo | None:
    """The node as the portal sees it: a node without accelerators is a CPU node (hint ``cpu``,
    its allocatable cores its units); None for a node without accelerators that is a control-plane
    node or reports no cores."""
    labels = node.metadata.labels or {}
    machine = machine_of(node.status, labels)
    found = gpu_resource(node.status.capacity if node.status else None)
    if found is None:
        cores = cpu_units(machine["cpu_millicores"], machine["cpu_millicores_capacity"])
        if cores < 1 or any(key in labels for key in CONTROL_PLANE_LABELS):
            return None  # no units to offer (no status yet), or the control plane
        found = CPU_HINT, cores
    resource, count = found
    cards = labels.get(GFD_GPU_COUNT, "")
    if (
        resource in ("nvidia.com/gpu", "nvidia.com/gpu.shared")
        and cards.isdigit()
        and 0 < int(cards) <= count
    ):
        count = int(cards)
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    if not ready:
        state = "down"
    elif node.spec is not None and node.spec.unschedulable:
        state = "cordoned"
    else:
        state = "ready"
    return NodeInfo(
        name=node.metadata.name,
        flavor_hint=resource,
        gpus=count,
        state=state,
        **_levels(labels),
        problem=node_problem(node.status.conditions if node.status else None),
        **machine,
    )


def _levels(labels: dict) -> dict[str, str]:
    """zone, spine, leaf and rack from the node's topology labels (jobs.clusters.topology)."""
    levels = topology.from_node_labels(labels)
    zone, spine, leaf = levels.engine()
    return {"zone": zone, "spine": spine, "leaf": leaf, "rack": levels.rack}


# Conditions that mean trouble when True (the kubelet's pressure conditions, a node without its
# network); Ready means trouble when not True.
TROUBLE_CONDITIONS = ("MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")


def node_problem(conditions) -> str:
    """The node's troubled conditions in Kubernetes' words ("Ready=Unknown: Kubelet stopped posting
    node status", "DiskPressure=True"): a health signal (jobs.clusters.health); empty when none."""
    out = []
    for c in conditions or ():
        bad = c.status != "True" if c.type == "Ready" else c.type in TROUBLE_CONDITIONS and c.status == "True"
        if bad:
            out.append(f"{c.type}={c.status}" + (f": {c.message}" if c.message else ""))
    return "Kubernetes " + "; ".join(out) if out else ""


# GPU Feature Discovery's software labels: the driver's and the CUDA runtime's versions, whole
# (newer GFD: cuda.driver-version.full) or in parts (older GFD: cuda.driver.major/minor/rev).
GFD_DRIVER = (
    ("nvidia.com/cuda.driver-version.", ("full",)),
    ("nvidia.com/cuda.driver-version.", ("major", "minor", "revision")),
    ("nvidia.com/cuda.driver.", ("major", "minor", "rev")),
)
GFD_CUDA = (
    ("nvidia.com/cuda.runtime-version.", ("full",)),
    ("nvidia.com/cuda.runtime-version.", ("major", "minor")),
    ("nvidia.com/cuda.runtime.", ("major", "minor")),
)
MIB, GIB = 1024**2, 1024**3


def machine_of(status: Any, labels: dict[str, str]) -> dict[str, Any]:
    """The node's CPU, memory and ephemeral storage (allocatable: what the kubelet leaves to pods;
    capacity), its driver and CUDA versions (GFD labels) and its labels, as NodeInfo fields."""
    allocatable = (status.allocatable if status else None) or {}
    capacity = (status.capacity if status else None) or {}
    out: dict[str, Any] = {
        "driver_version": _version(labels, GFD_DRIVER),
        "cuda_version": _version(labels, GFD_CUDA),
        "labels": tuple(sorted({**labels, **_node_software(status)}.items())),
    }
    for suffix, figures in (("", allocatable), ("_capacity", capacity)):
        out["cpu_millicores" + suffix] = _amount(figures.get("cpu"), Decimal(1000))
        out["memory_mib" + suffix] = _amount(figures.get("memory"), 1 / Decimal(MIB))
        out["local_disk_gib" + suffix] = _amount(figures.get("ephemeral-storage"), 1 / Decimal(GIB))
    return out


# The node's software as the kubelet reports it (status.nodeInfo), kept beside its labels.
NODE_INFO = ("kernel_version", "os_image", "container_runtime_version", "kubelet_version", "architecture")
NODE_INFO_PREFIX = "status.nodeInfo."


def _node_software(status: Any) -> dict[str, str]:
    info = getattr(status, "node_info", None) if status else None
    if info is None:
        return {}
    out = {}
    for attr in NODE_INFO:
        value = getattr(info, attr, None)
        if value:
            camel = attr.split("_")[0] + "".join(w.title() for w in attr.split("_")[1:])
            out[NODE_INFO_PREFIX + camel] = str(value)
    return out


def _amount(quantity: Any, scale: Decimal) -> int | None:
    """A quantity in the unit ``scale`` gives (rounded down: never more than the node has)."""
    if quantity in (None, ""):
        return None
    try:
        return int(parse_quantity(quantity) * scale)
    except ValueError:
        return None


def _version(labels: dict[str, str], sources: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    for prefix, parts in sources:
        values = [labels.get(prefix + part, "") for part in parts]
        if values[0]:
            return ".".join(v for v in values if v)
    return ""
