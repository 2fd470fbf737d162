"""A Kubernetes cluster as a :class:`~jobs.backends.base.Backend`, through the official ``kubernetes``
client (the classic 36.x generator). Plain Python, no Django.

A portal job becomes one object named ``spec.name`` (``gp-<id>``) in the configured namespace:

* training  -> an Indexed ``batch/v1`` Job (one completion per worker, no retries);
* inference -> an ``apps/v1`` Deployment (one replica per worker);
* dev       -> a bare ``v1`` Pod.

The manifests are built by the pure functions :func:`build_manifest` and friends, so they can be
validated offline against the official schemas.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from kubernetes.utils.quantity import parse_quantity

from jobs.backends.base import (
    CANCELLED,
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    BackendError,
    JobSpec,
    JobStatus,
    NodeInfo,
)

MANAGED_BY = "app.kubernetes.io/managed-by"
NAME_LABEL = "gpupool.io/name"
LABEL_KEYS = {"job": "gpupool.io/job", "project": "gpupool.io/project", "department": "gpupool.io/department"}
GPU_MILLI_ANNOTATION = "gpupool.io/gpu-milli"
MANAGED_SELECTOR = f"{MANAGED_BY}=gpupool"

# Extended resources counted as accelerators, in the order a node's capacity is searched.
GPU_RESOURCES = ("nvidia.com/gpu", "huawei.com/Ascend910", "cambricon.com/mlu", "hygon.com/dcu")
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

T = TypeVar("T")


# -- manifests (pure)


def _label_value(value: Any) -> str:
    """A valid label value: at most 63 of [A-Za-z0-9_.-], starting and ending alphanumeric."""
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value))[:63]
    return text.strip("-_.")


def labels_for(spec: JobSpec) -> dict[str, str]:
    labels = {MANAGED_BY: "gpupool", NAME_LABEL: spec.name}
    values = {"job": str(spec.job_id), **spec.labels}
    for key, label in LABEL_KEYS.items():
        if key in values:
            labels[label] = _label_value(values[key])
    return labels


def annotations_for(spec: JobSpec) -> dict[str, str]:
    return {GPU_MILLI_ANNOTATION: str(spec.gpu_milli)} if spec.gpu_milli else {}


def placement_nodes(spec: JobSpec) -> list[str]:
    return sorted({slot.node for worker in spec.placement for slot in worker})


def node_affinity(nodes: Iterable[str]) -> dict[str, Any] | None:
    values = sorted(set(nodes))
    if not values:
        return None
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def resources_for(spec: JobSpec) -> dict[str, dict[str, str]]:
    # A shared (gpu_milli) request takes one whole device resource; the share travels as an annotation.
    count = 1 if spec.gpu_milli else spec.gpus_per_worker
    if count <= 0:
        return {}
    quantity = {spec.k8s_resource: str(count)}
    return {"limits": dict(quantity), "requests": dict(quantity)}


def pod_spec(spec: JobSpec, *, restart_policy: str, deadline: bool) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": spec.image,
        "command": ["/bin/sh", "-c", spec.command],
        "env": [
            {"name": "GPUPOOL_JOB_ID", "value": str(spec.job_id)},
            {"name": "GPUPOOL_WORKERS", "value": str(spec.workers)},
        ],
    }
    resources = resources_for(spec)
    if resources:
        container["resources"] = resources
    result: dict[str, Any] = {"restartPolicy": restart_policy, "containers": [container]}
    affinity = node_affinity(placement_nodes(spec))
    if affinity:
        result["affinity"] = affinity
    if deadline and spec.max_runtime_seconds:
        result["activeDeadlineSeconds"] = int(spec.max_runtime_seconds)
    return result


def _metadata(spec: JobSpec, namespace: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": spec.name, "namespace": namespace, "labels": labels_for(spec)}
    annotations = annotations_for(spec)
    if annotations:
        meta["annotations"] = annotations
    return meta


def _template(spec: JobSpec, pod: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels_for(spec)}
    annotations = annotations_for(spec)
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": pod}


def build_training_job(spec: JobSpec, namespace: str = "gpupool") -> dict[str, Any]:
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimit": 0,
        "template": _template(spec, pod_spec(spec, restart_policy="Never", deadline=False)),
    }
    if spec.max_runtime_seconds:
        job_spec["activeDeadlineSeconds"] = int(spec.max_runtime_seconds)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(spec, namespace), "spec": job_spec}


def build_deployment(spec: JobSpec, namespace: str = "gpupool") -> dict[str, Any]:
    # Deployment pods restart forever, so no activeDeadlineSeconds (the API server rejects it there).
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec, namespace),
        "spec": {
            "replicas": spec.workers,
            "selector": {"matchLabels": {MANAGED_BY: "gpupool", NAME_LABEL: spec.name}},
            "template": _template(spec, pod_spec(spec, restart_policy="Always", deadline=False)),
        },
    }


def build_pod(spec: JobSpec, namespace: str = "gpupool") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(spec, namespace),
        "spec": pod_spec(spec, restart_policy="Never", deadline=True),
    }


BUILDERS: dict[str, Callable[[JobSpec, str], dict[str, Any]]] = {
    "training": build_training_job,
    "inference": build_deployment,
    "dev": build_pod,
}


def build_manifest(spec: JobSpec, namespace: str = "gpupool") -> dict[str, Any]:
    try:
        builder = BUILDERS[spec.kind]
    except KeyError:
        raise ValueError(f"unknown job kind {spec.kind!r}") from None
    return builder(spec, namespace)


# -- the backend


class KubernetesBackend:
    def __init__(
        self,
        host: str | None = None,
        namespace: str = "gpupool",
        token: str | None = None,
        kubeconfig: str | None = None,
        *,
        timeout: float = 10,
        **_ignored: Any,
    ):
        cfg = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        if host:
            cfg.host = host.rstrip("/")
        if token:
            cfg.api_key = {"authorization": f"Bearer {token}"}
        if not kubeconfig and not host:
            raise ValueError("KubernetesBackend needs a host or a kubeconfig")
        cfg.retries = 0  # the Celery task retries; a dead API server must fail fast
        self.namespace = namespace
        self.timeout = timeout
        self.api_client = client.ApiClient(cfg)
        self.batch = client.BatchV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.core = client.CoreV1Api(self.api_client)

    # -- Backend protocol

    def submit(self, spec: JobSpec) -> str:
        manifest = build_manifest(spec, self.namespace)
        read, create = {
            "training": (self.batch.read_namespaced_job, self.batch.create_namespaced_job),
            "inference": (self.apps.read_namespaced_deployment, self.apps.create_namespaced_deployment),
            "dev": (self.core.read_namespaced_pod, self.core.create_namespaced_pod),
        }[spec.kind]
        # Look before creating: a retried dispatch finds the object it already made.
        if self._call(read, spec.name, self.namespace, missing_ok=True) is not None:
            return spec.name
        try:
            create(self.namespace, manifest, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 409:  # 409 Conflict: created meanwhile, which is what we wanted
                raise _error("create", spec.name, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendError(f"kubernetes create {spec.name}: unreachable: {exc}") from exc
        return spec.name

    def cancel(self, name: str, *, grace_seconds: int = 0) -> None:
        # The kind is not known from the name alone: delete whichever exists (404 = already gone).
        for delete in (
            self.batch.delete_namespaced_job,
            self.apps.delete_namespaced_deployment,
            self.core.delete_namespaced_pod,
        ):
            self._call(
                delete,
                name,
                self.namespace,
                missing_ok=True,
                propagation_policy="Background",
                grace_period_seconds=max(0, int(grace_seconds)),
            )

    def status(self, names: list[str]) -> dict[str, JobStatus]:
        if not names:
            return {}
        ns, sel = self.namespace, MANAGED_SELECTOR
        jobs = {
            j.metadata.name: j
            for j in self._call(self.batch.list_namespaced_job, ns, label_selector=sel).items
        }
        deployments = {
            d.metadata.name: d
            for d in self._call(self.apps.list_namespaced_deployment, ns, label_selector=sel).items
        }
        pods = self._call(self.core.list_namespaced_pod, ns, label_selector=sel).items
        pods_of: dict[str, list[Any]] = {}
        for pod in pods:
            owner = (pod.metadata.labels or {}).get(NAME_LABEL) or pod.metadata.name
            pods_of.setdefault(owner, []).append(pod)
        result: dict[str, JobStatus] = {}
        for name in names:
            owned = pods_of.get(name, [])
            if name in jobs:
                result[name] = job_status(jobs[name], owned)
            elif name in deployments:
                result[name] = deployment_status(deployments[name], owned)
            else:
                bare = [p for p in owned if p.metadata.name == name]
                result[name] = pod_status(bare[0]) if bare else JobStatus(name, LOST, message="not found")
        return result

    def list_nodes(self) -> list[NodeInfo]:
        nodes = []
        for node in self._call(self.core.list_node).items:
            info = node_info(node)
            if info is not None:
                nodes.append(info)
        return nodes

    def health(self) -> str:
        try:
            version = self._call(client.VersionApi(self.api_client).get_code)
        except BackendError as exc:
            return str(exc)
        return (
            "ok"
            if getattr(version, "git_version", None)
            else "kubernetes /version answered without gitVersion"
        )

    # -- transport

    def _call(
        self, method: Callable[..., T], *args: Any, missing_ok: bool = False, **kwargs: Any
    ) -> T | None:
        what = getattr(method, "__name__", "call")
        try:
            return method(*args, _request_timeout=self.timeout, **kwargs)
        except ApiException as exc:
            if exc.status == 404 and missing_ok:
                return None
            raise _error(what, args[0] if args else "", exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:  # refused, reset, timeout, max retries
            raise BackendError(
                f"kubernetes API at {self.api_client.configuration.host} unreachable: {exc}"
            ) from exc


def _error(what: str, name: Any, exc: ApiException) -> BackendError:
    return BackendError(f"kubernetes {what} {name}: HTTP {exc.status} {exc.reason or ''}".rstrip())


# -- status mapping (pure, on the client's model objects)


def _conditions(obj: Any) -> dict[str, Any]:
    return {c.type: c for c in (getattr(obj.status, "conditions", None) or []) if c.status == "True"}


def _pod_node_failure(pod: Any) -> bool:
    status = pod.status
    if status is None:
        return False
    if status.reason in NODE_FAILURE_REASONS:
        return True
    return any(cond.type == "DisruptionTarget" and cond.status == "True" for cond in status.conditions or [])


def _exit_code(pods: Iterable[Any]) -> int | None:
    codes = []
    for pod in pods:
        for cs in (pod.status.container_statuses if pod.status else None) or []:
            terminated = cs.state.terminated if cs.state else None
            if terminated is not None and terminated.exit_code is not None:
                codes.append(terminated.exit_code)
    nonzero = [c for c in codes if c != 0]
    return nonzero[0] if nonzero else (codes[0] if codes else None)


def _nodes(pods: Iterable[Any]) -> tuple[str, ...]:
    return tuple(sorted({p.spec.node_name for p in pods if p.spec is not None and p.spec.node_name}))


def job_status(job: Any, pods: list[Any]) -> JobStatus:
    name, status = job.metadata.name, job.status
    started: datetime | None = status.start_time if status else None
    common = {"started_at": started, "nodes": _nodes(pods)}
    conditions = _conditions(job)
    if "Complete" in conditions or "SuccessCriteriaMet" in conditions:
        return JobStatus(name, SUCCEEDED, finished_at=status.completion_time, exit_code=0, **common)
    failed = conditions.get("Failed") or conditions.get("FailureTarget")
    if failed is not None:
        node_failure = failed.reason in NODE_FAILURE_REASONS or any(_pod_node_failure(p) for p in pods)
        return JobStatus(
            name,
            FAILED,
            finished_at=failed.last_transition_time,
            exit_code=_exit_code(pods),
            message=f"{failed.reason or ''}: {failed.message or ''}".strip(": "),
            node_failure=node_failure,
            **common,
        )
    if job.metadata.deletion_timestamp is not None:
        return JobStatus(name, CANCELLED, finished_at=job.metadata.deletion_timestamp, **common)
    running = bool(status and status.ready) or any(p.status and p.status.phase == "Running" for p in pods)
    return JobStatus(name, RUNNING if running else PENDING, **common)


def deployment_status(deployment: Any, pods: list[Any]) -> JobStatus:
    name, status = deployment.metadata.name, deployment.status
    nodes = _nodes(pods)
    if deployment.metadata.deletion_timestamp is not None:
        return JobStatus(name, CANCELLED, finished_at=deployment.metadata.deletion_timestamp, nodes=nodes)
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
        started = min(
            (
                c.last_transition_time
                for c in (status.conditions or [])
                if c.type == "Available" and c.status == "True" and c.last_transition_time
            ),
            default=None,
        )
        return JobStatus(name, RUNNING, started_at=started, nodes=nodes)
    return JobStatus(name, PENDING, nodes=nodes)


def pod_status(pod: Any) -> JobStatus:
    name, status = pod.metadata.name, pod.status
    phase = (status.phase if status else None) or "Pending"
    started = status.start_time if status else None
    nodes = _nodes([pod])
    finished = None
    for cs in (status.container_statuses if status else None) or []:
        if cs.state and cs.state.terminated and cs.state.terminated.finished_at:
            finished = cs.state.terminated.finished_at
    if phase == "Succeeded":
        return JobStatus(name, SUCCEEDED, started_at=started, finished_at=finished, exit_code=0, nodes=nodes)
    if phase == "Failed":
        message = f"{status.reason or ''}: {status.message or ''}".strip(": ")
        return JobStatus(
            name,
            FAILED,
            started_at=started,
            finished_at=finished,
            exit_code=_exit_code([pod]),
            message=message,
            nodes=nodes,
            node_failure=_pod_node_failure(pod),
        )
    if pod.metadata.deletion_timestamp is not None:
        return JobStatus(
            name, CANCELLED, started_at=started, finished_at=pod.metadata.deletion_timestamp, nodes=nodes
        )
    if phase == "Running":
        return JobStatus(name, RUNNING, started_at=started, nodes=nodes)
    if phase == "Pending":
        return JobStatus(name, PENDING, nodes=nodes)
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


def node_info(node: Any) -> NodeInfo | None:
    """The node as the portal sees it, or None for a node without accelerators."""
    found = gpu_resource(node.status.capacity if node.status else None)
    if found is None:
        return None
    resource, count = found
    ready = any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))
    if not ready:
        state = "down"
    elif node.spec is not None and node.spec.unschedulable:
        state = "cordoned"
    else:
        state = "ready"
    labels = node.metadata.labels or {}
    return NodeInfo(
        name=node.metadata.name,
        flavor_hint=resource,
        gpus=count,
        state=state,
        zone=labels.get("topology.kubernetes.io/zone", ""),
        spine=labels.get("gpupool.io/spine", ""),
        leaf=labels.get("gpupool.io/leaf", ""),
    )
