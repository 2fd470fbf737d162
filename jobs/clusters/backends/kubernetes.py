"""A Kubernetes cluster as a :class:`~jobs.clusters.backends.base.Backend`, through the official
``kubernetes`` client (the classic 36.x generator). Plain Python, no Django.

A portal job becomes one object named ``spec.name`` (``gp-<id>``) in the configured namespace
(``gpupool-jobs`` by default; never the namespace that holds the portal's own secrets, see
:func:`quotas.queues.jobs_namespace_problem`):

* training  -> an Indexed ``batch/v1`` Job (one completion per worker, no retries), or with
  ``{"training_api": "volcano"}`` in the cluster's config a Volcano ``batch.volcano.sh/v1alpha1``
  Job (gang of ``minAvailable`` workers, see :mod:`jobs.clusters.backends.volcano`);
* inference -> an ``apps/v1`` Deployment (one replica per worker);
* dev       -> a bare ``v1`` Pod.

The manifests are built by the pure functions :func:`build_manifest` and friends, so they can be
validated offline against the official schemas. Statuses and nodes are mapped by
:mod:`jobs.clusters.backends.k8s_status`. The job's working environment (volumes, env, pull secret,
checkpoint; a dev port's Service + Ingress) comes from :mod:`jobs.clusters.backends.k8s_workenv`, and the
pod-log reading rules from :mod:`jobs.clusters.backends.k8s_logs`.

Resizing (the scheduler grew or the owner scaled a running job): a Deployment gets its
``replicas`` patched, and its pod template's node affinity when the node set changed (a rolling
update that replaces one pod at a time: ``maxSurge: 0`` never asks for a GPU beyond the
allocation). A training job's pod template is immutable (batch Job and Volcano Job alike), so
elastic training *restarts*: the object is deleted and created again with the new worker count
and nodes, and the workers resume from their checkpoint — only checkpointing training jobs are
resized (see docs/backends.md).
"""

from __future__ import annotations

import copy
import json
import re
import shlex
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from jobs.clusters.backends import k8s_logs, k8s_sharing, rendezvous, volcano
from jobs.clusters.backends.base import (
    LOG_CHUNK_BYTES,
    LOST,
    Access,
    BackendError,
    JobSpec,
    JobStatus,
    LogTail,
    NodeInfo,
)
from jobs.clusters.backends.k8s_sharing import Sharing
from jobs.clusters.backends.k8s_status import (  # noqa: F401 - re-exported: the backend's public mapping
    GPU_RESOURCE_PREFIXES,
    GPU_RESOURCES,
    NODE_FAILURE_REASONS,
    containers_finished,
    containers_started,
    deployment_status,
    exit_code_of,
    gpu_resource,
    job_status,
    node_info,
    nodes_of,
    pod_node_failure,
    pod_status,
)
from jobs.clusters.backends.k8s_workenv import (
    MANAGED_BY,
    NAME_LABEL,
    build_ingress,
    build_service,
    ingress_host,
    literal,
    owner_reference,
    with_working_environment,
)
from quotas import queues

LABEL_KEYS = {"job": "gpupool.io/job", "project": "gpupool.io/project", "department": "gpupool.io/department"}
GPU_MILLI_ANNOTATION = "gpupool.io/gpu-milli"
MANAGED_SELECTOR = f"{MANAGED_BY}=gpupool"
TRAINING_APIS = ("batch", "volcano")
SCHEDULER_INTEGRATIONS = (None, "kueue", "volcano", "yunikorn")
YUNIKORN_SCHEDULER = "yunikorn"  # k8shim pkg/common/constants: SchedulerName
YUNIKORN_APP_ID = "yunikorn.apache.org/app-id"  # k8shim: CanonicalLabelApplicationID
MERGE_PATCH = "application/merge-patch+json"
CORDON_REASON = "gpupool.io/cordon-reason"  # a node annotation: why the portal cordoned it
TIME_SOURCE = "kubernetes"

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


def annotations_for(spec: JobSpec, sharing: Sharing = k8s_sharing.DEFAULT) -> dict[str, str]:
    annotations = {GPU_MILLI_ANNOTATION: str(spec.gpu_milli)} if spec.gpu_milli else {}
    return {**annotations, **k8s_sharing.device_annotations(spec, sharing)}


def placement_nodes(spec: JobSpec) -> list[str]:
    return sorted({slot.node for worker in spec.placement for slot in worker})


def node_affinity(nodes: Iterable[str]) -> dict[str, Any] | None:
    values = sorted(set(nodes))
    if not values:
        return None
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def resources_for(spec: JobSpec, sharing: Sharing = k8s_sharing.DEFAULT) -> dict[str, dict[str, str]]:
    """The device plugin's resources for the flavor's sharing mode
    (:mod:`jobs.clusters.backends.k8s_sharing`) and the worker's CPU, memory and local disk, each
    with its request equal to its limit: with cpu and memory so set the pod is Guaranteed QoS
    (the last evicted under memory pressure, its cores its own under the static CPU manager)."""
    # A CPU-only job's units are cores: its ``cpu`` is its request (machine_quantities), no device.
    resources = {} if spec.cpu_only else k8s_sharing.resources_for(spec, sharing)
    machine = machine_quantities(spec)
    if not machine:
        return resources
    return {kind: {**resources.get(kind, {}), **machine} for kind in ("limits", "requests")}


def machine_quantities(spec: JobSpec) -> dict[str, str]:
    """One worker's ``cpu`` (whole cores where it asks whole cores, else millicores), ``memory``
    (Mi) and ``ephemeral-storage`` (Gi), as Kubernetes quantities; what it does not ask is left out."""
    out = {}
    if spec.cpu_millicores:
        cpu = spec.cpu_millicores
        out["cpu"] = str(cpu // 1000) if cpu % 1000 == 0 else f"{cpu}m"
    if spec.memory_mib:
        out["memory"] = f"{spec.memory_mib}Mi"
    if spec.local_disk_gib:
        out["ephemeral-storage"] = f"{spec.local_disk_gib}Gi"
    return out


def pod_spec(
    spec: JobSpec, *, restart_policy: str, deadline: bool, sharing: Sharing = k8s_sharing.DEFAULT
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": spec.image,
        # Kubernetes expands $(VAR) in a command too: the user's shell command reaches the
        # shell as typed ("echo $$" prints the shell's pid, not "$").
        "command": ["/bin/sh", "-c", literal(spec.command)],
    }
    resources = resources_for(spec, sharing)
    if resources:
        container["resources"] = resources
    result: dict[str, Any] = {"restartPolicy": restart_policy, "containers": [container]}
    with_working_environment(result, container, spec)
    affinity = node_affinity(placement_nodes(spec))
    if affinity:
        result["affinity"] = affinity
    if deadline and spec.max_runtime_seconds:
        result["activeDeadlineSeconds"] = int(spec.max_runtime_seconds)
    return result


def _metadata(spec: JobSpec, namespace: str, sharing: Sharing) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": spec.name, "namespace": namespace, "labels": labels_for(spec)}
    annotations = annotations_for(spec, sharing)
    if annotations:
        meta["annotations"] = annotations
    return meta


def _template(spec: JobSpec, pod: dict[str, Any], sharing: Sharing) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels_for(spec)}
    annotations = annotations_for(spec, sharing)
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": pod}


def build_training_job(
    spec: JobSpec, namespace: str = queues.JOBS_NAMESPACE, sharing: Sharing = k8s_sharing.DEFAULT
) -> dict[str, Any]:
    pod = pod_spec(spec, restart_policy="Never", deadline=False, sharing=sharing)
    if rendezvous.needed(spec.workers):
        # DESIGN §17: the Indexed Job names its pods <job>-<index>; with the headless Service of
        # the job's name as their subdomain each worker reaches worker 0 at <job>-0.<job>.
        pod["subdomain"] = spec.name
        container = pod["containers"][0]
        # The portal's variables win over the job's own of the same name.
        own = [e for e in container.get("env", []) if e["name"] not in rendezvous.VARIABLES]
        container["env"] = own + rendezvous.k8s_env(spec.name, spec.workers)
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimit": 0,
        "template": _template(spec, pod, sharing),
    }
    if spec.max_runtime_seconds:
        job_spec["activeDeadlineSeconds"] = int(spec.max_runtime_seconds)
    meta = _metadata(spec, namespace, sharing)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec}


def rendezvous_service(spec: JobSpec, namespace: str = queues.JOBS_NAMESPACE) -> dict[str, Any]:
    """The headless Service of a multi-worker training Job (its pods' ``subdomain``); ``cancel``
    deletes it with the job (a Service of the job's name)."""
    labels = labels_for(spec)
    selector = {MANAGED_BY: "gpupool", NAME_LABEL: spec.name}
    return rendezvous.k8s_service(spec.name, namespace, labels, selector)


def build_deployment(
    spec: JobSpec, namespace: str = queues.JOBS_NAMESPACE, sharing: Sharing = k8s_sharing.DEFAULT
) -> dict[str, Any]:
    # Deployment pods restart forever, so no activeDeadlineSeconds (the API server rejects it there).
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(spec, namespace, sharing),
        "spec": {
            "replicas": spec.workers,
            "selector": {"matchLabels": {MANAGED_BY: "gpupool", NAME_LABEL: spec.name}},
            # A resize that moves pods to other nodes replaces them one at a time, never
            # starting a pod beyond the replicas the portal allocated GPUs for.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": _template(
                spec, pod_spec(spec, restart_policy="Always", deadline=False, sharing=sharing), sharing
            ),
        },
    }


def build_pod(
    spec: JobSpec, namespace: str = queues.JOBS_NAMESPACE, sharing: Sharing = k8s_sharing.DEFAULT
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _metadata(spec, namespace, sharing),
        "spec": pod_spec(spec, restart_policy="Never", deadline=True, sharing=sharing),
    }


def build_volcano_job(
    spec: JobSpec,
    namespace: str = queues.JOBS_NAMESPACE,
    queue: str | None = None,
    sharing: Sharing = k8s_sharing.DEFAULT,
) -> dict[str, Any]:
    # Volcano Jobs have no job-level deadline: the pods carry activeDeadlineSeconds.
    template = _template(
        spec, pod_spec(spec, restart_policy="Never", deadline=True, sharing=sharing), sharing
    )
    return volcano.build_volcano_job(
        spec, namespace, metadata=_metadata(spec, namespace, sharing), template=template, queue=queue
    )


BUILDERS: dict[str, Callable[[JobSpec, str, Sharing], dict[str, Any]]] = {
    "training": build_training_job,
    "inference": build_deployment,
    "dev": build_pod,
}


def build_manifest(
    spec: JobSpec,
    namespace: str = queues.JOBS_NAMESPACE,
    *,
    training_api: str = "batch",
    queue: str | None = None,
    sharing: Sharing = k8s_sharing.DEFAULT,
) -> dict[str, Any]:
    if spec.kind == "training" and training_api == "volcano":
        return build_volcano_job(spec, namespace, queue, sharing)
    try:
        builder = BUILDERS[spec.kind]
    except KeyError:
        raise ValueError(f"unknown job kind {spec.kind!r}") from None
    return builder(spec, namespace, sharing)


def with_kueue_queue(manifest: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """Kueue integration: the job names its project's LocalQueue, and its pods select the nodes
    of its flavor, so Kueue charges the ResourceFlavor the portal placed it on (several flavors
    share a resource name such as nvidia.com/gpu)."""
    result = copy.deepcopy(manifest)
    project = spec.labels.get("project", "")
    result["metadata"]["labels"][queues.KUEUE_QUEUE_LABEL] = queues.project_queue_name(project)
    pod = result["spec"] if result["kind"] == "Pod" else result["spec"]["template"]["spec"]
    pod.setdefault("nodeSelector", {})[queues.FLAVOR_LABEL] = queues.flavor_label_value(spec.flavor)
    return result


def with_yunikorn(manifest: dict[str, Any], spec: JobSpec) -> dict[str, Any]:
    """YuniKorn integration: the pods name YuniKorn as their scheduler and carry the job's own
    application id. Without one, YuniKorn's admission controller makes every pod of a namespace
    one application, and YuniKorn places and orders applications, not pods. Their queue is the
    portal namespace's leaf (placement rules of :mod:`quotas.yunikorn`)."""
    result = copy.deepcopy(manifest)
    result["metadata"]["labels"][YUNIKORN_APP_ID] = spec.name
    if result["kind"] == "Pod":
        meta, pod = result["metadata"], result["spec"]
    else:
        meta, pod = result["spec"]["template"]["metadata"], result["spec"]["template"]["spec"]
    meta.setdefault("labels", {})[YUNIKORN_APP_ID] = spec.name
    pod["schedulerName"] = YUNIKORN_SCHEDULER
    return result


def affinity_hosts(obj: dict[str, Any]) -> set[str]:
    """Node names the pod template of a Job / Deployment (as a dict) is pinned to."""
    template_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    return volcano.affinity_hosts(template_spec.get("affinity"))


# -- the backend


class KubernetesBackend:
    def __init__(
        self,
        host: str | None = None,
        namespace: str = queues.JOBS_NAMESPACE,
        token: str | None = None,
        kubeconfig: str | None = None,
        *,
        training_api: str = "batch",
        volcano_queue: str | None = None,
        scheduler_integration: str | None = None,
        timeout: float = 10,
        ingress_domain: str = "",
        ingress_class: str = "nginx",
        ingress_tls_secret: str = "",
        portal_url: str = "",
        time_slicing_replicas: int | None = None,
        vnpu_templates: dict[str, Any] | None = None,
        gpu_uuids: dict[str, list[str]] | None = None,
        **_ignored: Any,
    ):
        if training_api not in TRAINING_APIS:
            raise ValueError(f"training_api must be one of {', '.join(TRAINING_APIS)}, not {training_api!r}")
        if scheduler_integration not in SCHEDULER_INTEGRATIONS:
            raise ValueError(
                f"scheduler_integration must be kueue, volcano or yunikorn, not {scheduler_integration!r}"
            )
        if scheduler_integration == "yunikorn" and training_api == "volcano":
            raise ValueError("scheduler_integration yunikorn schedules the pods: training_api must be batch")
        cfg = client.Configuration()
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        if host:
            cfg.host = host.rstrip("/")
        if token:
            cfg.api_key = {"authorization": f"Bearer {token}"}
        if not kubeconfig and not host:
            raise ValueError("KubernetesBackend needs a host or a kubeconfig")
        if problem := queues.jobs_namespace_problem(namespace):
            # A pod may reference any Secret of its namespace by name (secretKeyRef, envFrom,
            # volumes): jobs in the portal's own namespace could read DATABASE_URL and SECRET_KEY.
            raise ValueError(problem)
        if ingress_domain and not portal_url:
            # A dev port behind an Ingress without the portal's sign-in would be open to anyone.
            raise ValueError("ingress_domain needs portal_url (the Ingress authenticates through the portal)")
        # The device plugins' settings (k8s_sharing); a bad table fails here, not at dispatch.
        self.sharing = k8s_sharing.sharing_from_config(time_slicing_replicas, vnpu_templates, gpu_uuids)
        cfg.retries = 0  # the Celery task retries; a dead API server must fail fast
        self.namespace = namespace
        self.timeout = timeout
        self.training_api = training_api
        self.volcano_queue = volcano_queue
        self.scheduler_integration = scheduler_integration
        self.ingress_domain = ingress_domain
        self.ingress_class = ingress_class
        self.ingress_tls_secret = ingress_tls_secret
        self.portal_url = portal_url
        self.api_client = client.ApiClient(cfg)
        self.batch = client.BatchV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.networking = client.NetworkingV1Api(self.api_client)

    @property
    def volcano(self) -> bool:
        return self.training_api == "volcano"

    def manifest(self, spec: JobSpec) -> dict[str, Any]:
        queue = self.volcano_queue
        if self.scheduler_integration == "volcano":
            # The project's leaf queue (quotas.queues): hierarchical Volcano queues admit jobs
            # only into leaves.
            queue = queues.project_queue_name(spec.labels.get("project", ""))
        manifest = build_manifest(
            spec, self.namespace, training_api=self.training_api, queue=queue, sharing=self.sharing
        )
        if self.scheduler_integration == "kueue":
            manifest = with_kueue_queue(manifest, spec)
        elif self.scheduler_integration == "yunikorn":
            manifest = with_yunikorn(manifest, spec)
        return manifest

    # -- Backend protocol

    def submit(self, spec: JobSpec) -> str:
        manifest = self.manifest(spec)
        read, create, _delete = self._verbs(spec.kind)
        # Look before creating: a retried dispatch finds the object it already made.
        current = self._call(read, spec.name, self.namespace, missing_ok=True)
        if current is None:
            current = self._create(create, spec.name, manifest)
        if manifest["apiVersion"] == "batch/v1" and rendezvous.needed(spec.workers):
            self._ensure(self.core.read_namespaced_service, self.core.create_namespaced_service,
                         rendezvous_service(spec, self.namespace))
        if spec.kind == "dev" and spec.expose_port:
            if current is None:  # created meanwhile (409): its uid is needed for the owner references
                current = self._call(read, spec.name, self.namespace, missing_ok=True)
            if current is not None:
                self._expose(spec, self.api_client.sanitize_for_serialization(current))
        return spec.name

    def cancel(self, name: str, *, grace_seconds: int = 0) -> None:
        # The kind is not known from the name alone: delete whichever exists (404 = already gone).
        deletes = [self.batch.delete_namespaced_job, self.apps.delete_namespaced_deployment]
        if self.volcano:
            deletes.append(self._vc_delete)
        # A dev port's Ingress and Service too (their owner reference to the pod would have the
        # garbage collector remove them anyway, but not before the pod is gone).
        deletes += [
            self.core.delete_namespaced_pod,
            self.networking.delete_namespaced_ingress,
            self.core.delete_namespaced_service,
        ]
        for delete in deletes:
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
        vcjobs: dict[str, dict[str, Any]] = {}
        if self.volcano:
            listed = self._call(self._vc_list, ns, label_selector=sel) or {}
            vcjobs = {o["metadata"]["name"]: o for o in listed.get("items") or []}
        pods = self._call(self.core.list_namespaced_pod, ns, label_selector=sel).items
        pods_of: dict[str, list[Any]] = {}
        for pod in pods:
            owner = (pod.metadata.labels or {}).get(NAME_LABEL) or pod.metadata.name
            pods_of.setdefault(owner, []).append(pod)
        result: dict[str, JobStatus] = {}
        for name in names:
            owned = pods_of.get(name, [])
            if name in vcjobs:
                result[name] = _volcano_status(vcjobs[name], owned)
            elif name in jobs:
                result[name] = job_status(jobs[name], owned)
            elif name in deployments:
                result[name] = deployment_status(deployments[name], owned)
            else:
                bare = [p for p in owned if p.metadata.name == name]
                result[name] = pod_status(bare[0]) if bare else JobStatus(name, LOST, message="not found")
        # Every time above is the cluster's clock (containers' or objects' own stamps).
        return {name: replace(st, time_source=TIME_SOURCE) for name, st in result.items()}

    def resize(self, spec: JobSpec) -> None:
        """Make the running object match ``spec.workers`` and ``spec.placement`` (idempotent)."""
        if spec.kind == "inference":
            self._resize_deployment(spec)
        elif spec.kind == "training":
            self._restart_resized(spec)
        else:
            raise BackendError(f"kubernetes resize {spec.name}: a {spec.kind} job has one worker")

    def list_nodes(self) -> list[NodeInfo]:
        nodes = []
        for node in self._call(self.core.list_node).items:
            info = node_info(node)
            if info is not None:
                nodes.append(info)
        return nodes

    def set_node_schedulable(self, name: str, schedulable: bool, *, reason: str = "") -> None:
        """``spec.unschedulable`` as ``kubectl cordon`` / ``uncordon`` set it (a merge patch), with
        the reason in the ``gpupool.io/cordon-reason`` annotation (removed on uncordon). Evicting
        pods is not done here: the portal requeues the jobs it wants off the node itself."""
        body = {
            "metadata": {"annotations": {CORDON_REASON: None if schedulable else (reason or "gpupool")}},
            "spec": {"unschedulable": None if schedulable else True},
        }
        self._call(self.core.patch_node, name, body, _content_type=MERGE_PATCH)

    def log_tail(self, name: str, *, max_bytes: int) -> LogTail:
        try:
            pod = self._log_pod(name)
            lines = k8s_logs.tail_lines(max_bytes)
            tail = k8s_logs.Tail(max_bytes, lines)
            for piece in self._log_pieces(self._open_log(pod, tail_lines=lines)):
                tail.feed(piece)
        except k8s_logs.LogMissing as missing:
            return LogTail("", missing=str(missing))
        text, truncated = tail.result()
        return LogTail(text, truncated=truncated)

    def log_stream(self, name: str) -> Iterator[bytes]:
        # The pod is found and the log opened now, so a missing log raises here, not at the
        # first piece the caller asks for.
        try:
            response = self._open_log(self._log_pod(name))
        except k8s_logs.LogMissing as missing:
            raise BackendError(f"kubernetes log {name}: {missing}") from None
        return self._log_pieces(response)

    def access(self, name: str, port: int, *, nodes: tuple[str, ...], user: str) -> Access:
        if self.ingress_domain:
            return Access(
                url=f"https://{ingress_host(name, self.ingress_domain)}/",
                note="Opens after signing in to the portal, for those who may see the job.",
            )
        ns = shlex.quote(self.namespace)
        return Access(
            command=f"kubectl -n {ns} port-forward pod/{shlex.quote(name)} {int(port)}",
            note=f"Needs kubectl access to namespace {self.namespace}; then open http://127.0.0.1:{int(port)}/.",
        )

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

    # -- resizing

    def _resize_deployment(self, spec: JobSpec) -> None:
        current = self._call(self.apps.read_namespaced_deployment, spec.name, self.namespace, missing_ok=True)
        if current is None:
            raise BackendError(f"kubernetes resize {spec.name}: the Deployment does not exist")
        obj = self.api_client.sanitize_for_serialization(current)
        hosts = placement_nodes(spec)
        body: dict[str, Any] = {"spec": {"replicas": spec.workers}}
        if set(hosts) != affinity_hosts(obj):
            # Merge patch: the hostname list is replaced whole, the rest of the template kept.
            body["spec"]["template"] = {"spec": {"affinity": node_affinity(hosts)}}
        elif (obj.get("spec") or {}).get("replicas") == spec.workers:
            return
        self._call(
            self.apps.patch_namespaced_deployment, spec.name, self.namespace, body, _content_type=MERGE_PATCH
        )

    def _restart_resized(self, spec: JobSpec) -> None:
        read, create, delete = self._verbs("training")
        current = self._call(read, spec.name, self.namespace, missing_ok=True)
        if current is not None:
            obj = self.api_client.sanitize_for_serialization(current)
            if _training_finished(obj, self.volcano):
                return  # ended meanwhile: the status sync records it; never start it again
            hosts = volcano.hostnames_of(obj) if self.volcano else affinity_hosts(obj)
            if _training_size(obj, self.volcano) == spec.workers and hosts == set(placement_nodes(spec)):
                return  # already resized (a retried task)
            self._call(delete, spec.name, self.namespace, missing_ok=True, propagation_policy="Background")
        self._create(create, spec.name, self.manifest(spec))

    # -- a dev job's port

    def _expose(self, spec: JobSpec, pod: dict[str, Any]) -> None:
        """The Service (and, with an ingress domain, the Ingress) of a dev job's port, each
        created only when missing."""
        labels, owner = labels_for(spec), owner_reference(pod)
        service = build_service(spec, self.namespace, labels=labels, owner=owner)
        self._ensure(self.core.read_namespaced_service, self.core.create_namespaced_service, service)
        if not self.ingress_domain:
            return
        ingress = build_ingress(
            spec,
            self.namespace,
            labels=labels,
            domain=self.ingress_domain,
            portal_url=self.portal_url,
            ingress_class=self.ingress_class,
            tls_secret=self.ingress_tls_secret,
            owner=owner,
        )
        net = self.networking
        self._ensure(net.read_namespaced_ingress, net.create_namespaced_ingress, ingress)

    def _ensure(self, read: Callable[..., Any], create: Callable[..., Any], manifest: dict[str, Any]) -> None:
        name = manifest["metadata"]["name"]
        if self._call(read, name, self.namespace, missing_ok=True) is None:
            self._create(create, name, manifest)

    # -- logs

    def _log_pod(self, name: str) -> str:
        """The name of the pod whose log is the job's; LogMissing says why there is none."""
        selector = f"{MANAGED_SELECTOR},{NAME_LABEL}={name}"
        pods = self._call(self.core.list_namespaced_pod, self.namespace, label_selector=selector).items
        pod = k8s_logs.first_pod(pods)
        if pod is None:
            exists = self._controller_exists(name)
            raise k8s_logs.LogMissing(k8s_logs.NOT_SCHEDULED if exists else k8s_logs.DELETED)
        reason = k8s_logs.not_started(pod)
        if reason:
            raise k8s_logs.LogMissing(reason)
        return pod.metadata.name

    def _controller_exists(self, name: str) -> bool:
        """A Job / Deployment / Volcano Job of that name that has no pod yet."""
        reads = [self.batch.read_namespaced_job, self.apps.read_namespaced_deployment]
        if self.volcano:
            reads.append(self._vc_read)
        return any(self._call(read, name, self.namespace, missing_ok=True) is not None for read in reads)

    def _open_log(self, pod: str, **params: Any) -> Any:
        """The pod log as an unread HTTP response (the official client's ``_preload_content=False``)."""
        try:
            return self.core.read_namespaced_pod_log(
                pod,
                self.namespace,
                container=k8s_logs.CONTAINER,
                _preload_content=False,
                # (connect, read): the read timeout bounds each wait for data, not the whole
                # download of a long log.
                _request_timeout=(self.timeout, self.timeout),
                **params,
            )
        except ApiException as exc:
            if exc.status == 404:  # deleted since it was listed
                raise k8s_logs.LogMissing(k8s_logs.DELETED) from None
            if exc.status == 400:  # the API server's "is waiting to start: ContainerCreating"
                raise k8s_logs.LogMissing(f"{k8s_logs.NOT_STARTED}: {_message(exc)}") from None
            raise _error("read_namespaced_pod_log", pod, exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendError(f"kubernetes log {pod}: unreachable: {exc}") from exc

    def _log_pieces(self, response: Any) -> Iterator[bytes]:
        done = False
        try:
            yield from response.stream(LOG_CHUNK_BYTES)
            done = True
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendError(f"kubernetes log: the stream broke off: {exc}") from exc
        finally:
            if not done:  # the reader stopped early: the rest is not read into a pooled connection
                response.close()
            response.release_conn()

    # -- transport

    def _verbs(self, kind: str) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any]]:
        if kind == "training" and self.volcano:
            return self._vc_read, self._vc_create, self._vc_delete
        return {
            "training": (
                self.batch.read_namespaced_job,
                self.batch.create_namespaced_job,
                self.batch.delete_namespaced_job,
            ),
            "inference": (
                self.apps.read_namespaced_deployment,
                self.apps.create_namespaced_deployment,
                self.apps.delete_namespaced_deployment,
            ),
            "dev": (
                self.core.read_namespaced_pod,
                self.core.create_namespaced_pod,
                self.core.delete_namespaced_pod,
            ),
        }[kind]

    def _vc_read(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self.custom.get_namespaced_custom_object(
            volcano.GROUP, volcano.VERSION, namespace, volcano.PLURAL, name, **kwargs
        )

    def _vc_create(self, namespace: str, body: dict[str, Any], **kwargs: Any) -> Any:
        return self.custom.create_namespaced_custom_object(
            volcano.GROUP, volcano.VERSION, namespace, volcano.PLURAL, body, **kwargs
        )

    def _vc_delete(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self.custom.delete_namespaced_custom_object(
            volcano.GROUP, volcano.VERSION, namespace, volcano.PLURAL, name, **kwargs
        )

    def _vc_list(self, namespace: str, **kwargs: Any) -> Any:
        return self.custom.list_namespaced_custom_object(
            volcano.GROUP, volcano.VERSION, namespace, volcano.PLURAL, **kwargs
        )

    def _create(self, create: Callable[..., Any], name: str, manifest: dict[str, Any]) -> Any:
        """The created object, or None when it had been created meanwhile."""
        try:
            return create(self.namespace, manifest, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status != 409:  # 409 Conflict: created meanwhile, which is what we wanted
                raise _error("create", name, exc) from exc
            return None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise BackendError(f"kubernetes create {name}: unreachable: {exc}") from exc

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


def _message(exc: ApiException) -> str:
    """The ``message`` of the API server's Status answer (else its HTTP reason)."""
    try:
        return str(json.loads(exc.body or b"{}").get("message") or exc.reason or "")
    except (ValueError, AttributeError):
        return str(exc.reason or "")


def _error(what: str, name: Any, exc: ApiException) -> BackendError:
    return BackendError(f"kubernetes {what} {name}: HTTP {exc.status} {exc.reason or ''}".rstrip())


def _volcano_status(obj: dict[str, Any], pods: list[Any]) -> JobStatus:
    starts = [p.status.start_time for p in pods if p.status is not None and p.status.start_time]
    status = volcano.volcano_status(
        obj,
        nodes=nodes_of(pods),
        node_failure=any(pod_node_failure(p) for p in pods),
        exit_code=exit_code_of(pods),
        started=containers_started(pods) or min(starts, default=None),
    )
    ended = containers_finished(pods)
    return replace(status, finished_at=ended) if ended and status.finished_at else status


def _training_size(obj: dict[str, Any], is_volcano: bool) -> int:
    if is_volcano:
        return volcano.replicas_of(obj)
    return int((obj.get("spec") or {}).get("parallelism") or 0)


def _training_finished(obj: dict[str, Any], is_volcano: bool) -> bool:
    status = obj.get("status") or {}
    if is_volcano:
        return (status.get("state") or {}).get("phase") in volcano.FINISHED
    done = {"Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"}
    return any(c.get("type") in done and c.get("status") == "True" for c in status.get("conditions") or [])
