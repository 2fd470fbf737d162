"""A tiny Kubernetes API stand-in (stdlib HTTP server in a thread) for the Kubernetes backend tests.

It serves what :mod:`jobs.clusters.backends.kubernetes` and :mod:`jobs.native.backends.queues` use:
``/version``,
namespaced create / read / list / delete / merge-patch / replace of batch/v1 Jobs, apps/v1
Deployments, v1 Pods, Volcano ``batch.volcano.sh/v1alpha1`` Jobs (a custom resource, stored as
``vcjobs``) and Kueue LocalQueues; the same verbs on the cluster-scoped custom resources of
``CLUSTER_RESOURCES`` (Kueue ResourceFlavors, ClusterQueues, Cohorts; Volcano Queues), stored
under namespace ``""``; and the cluster-wide v1 Node list (seeded by the tests), each node
read and merge-patched by name (cordon). Objects are stored
as posted, with ``uid``, ``resourceVersion`` and ``creationTimestamp`` added; a duplicate create
answers 409, a missing object 404, a PUT with a stale ``resourceVersion`` 409. PATCH
takes only ``application/merge-patch+json`` (RFC 7386), as a dict body must be sent: anything else
answers 415, the way the API server refuses a JSON Patch content type with an object body.
Label selectors with ``=``, ``==``, ``!=``, ``key`` and ``!key`` terms and field selectors on
``metadata.name``, ``metadata.namespace``, ``spec.nodeName`` and ``status.phase`` are honoured.
Every request is recorded as ``(method, path, query)``.

Namespaces (``/api/v1/namespaces``, cluster-scoped) and ResourceQuotas are served too, and pods
and ResourceQuotas are listed across namespaces (``/api/v1/pods``). Changes are kept as the API
server keeps them (https://kubernetes.io/docs/reference/using-api/api-concepts/, "Efficient
detection of changes" and "Resource versions"): every write takes the next ``resourceVersion``
of one cluster-wide counter (etcd's revision), which the object carries in
``metadata.resourceVersion``; a list carries the revision it was read at in its own
``metadata.resourceVersion``; ``?watch=true&resourceVersion=N`` streams every change after N
as JSON lines ``{"type": "ADDED"|"MODIFIED"|"DELETED", "object": …}`` (chunked, the format the
official client's ``watch.Watch`` reads; a DELETED event carries the object's last state), then
waits for new ones until ``timeoutSeconds`` ends the stream; with no ``resourceVersion`` (or
"0") it first sends the current objects as ADDED. The server keeps a limited history ("Clusters
using etcd3 preserve changes in the last 5 minutes by default"): after :meth:`StandIn.compact`
a watch from an older version gets the API server's answer, an ``ERROR`` event with a
``Status`` of code 410 ("too old resource version"), and the client must list again. With
``allowWatchBookmarks=true`` a ``BOOKMARK`` carrying the current version ends a timed-out watch
(the docs let a server send bookmarks at its discretion; clients may not rely on them).

ConfigMaps (v1, namespaced: YuniKorn's queue configuration) are served like the other core
kinds; a merge patch that names a ``metadata.resourceVersion`` other than the stored one answers
409, as the API server's optimistic concurrency does for patches too.

Services (``v1``) and Ingresses (``networking.k8s.io/v1``) are served like the other namespaced
kinds; a created Service of type ClusterIP gets a ``spec.clusterIP``, as the API server allocates
one. Pod logs (``GET …/pods/{name}/log``) answer what the tests appended with
:meth:`StandIn.append_log`, as text streamed in chunks of :data:`LOG_PIECE` bytes, with the
kubelet's ``tailLines`` (the last lines; an unterminated last line counts) and ``limitBytes``
(the first bytes of what is left) and the API server's refusals: 404 for a missing pod, 400 for
a pod not yet on a node, a container that has not started ("is waiting to start: <reason>"), a
container the pod does not have, or no ``container`` in a pod of several. A deleted pod's log
goes with it.

Nothing here acts like a controller (nor the garbage collector: owner references are stored, not
followed): the tests set statuses with :meth:`StandIn.set_status` and add
the pods a controller would start with :meth:`StandIn.add` — or, with their containers' start and
finish times as the kubelet reports them, :meth:`StandIn.pod_running` / :meth:`StandIn.pod_terminated`
(portal pods) and :meth:`StandIn.pod_started` / :meth:`StandIn.pod_finished` (any pod, e.g. one a
user created with :meth:`StandIn.user_pod`).
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from quotas.queues import JOBS_NAMESPACE

# (group path, resource) -> (apiVersion, kind, the name objects are stored under)
RESOURCES = {
    ("/apis/batch/v1", "jobs"): ("batch/v1", "Job", "jobs"),
    ("/apis/apps/v1", "deployments"): ("apps/v1", "Deployment", "deployments"),
    ("/api/v1", "pods"): ("v1", "Pod", "pods"),
    ("/api/v1", "configmaps"): ("v1", "ConfigMap", "configmaps"),
    ("/apis/batch.volcano.sh/v1alpha1", "jobs"): ("batch.volcano.sh/v1alpha1", "Job", "vcjobs"),
    ("/apis/kueue.x-k8s.io/v1beta1", "localqueues"): ("kueue.x-k8s.io/v1beta1", "LocalQueue", "localqueues"),
    ("/api/v1", "resourcequotas"): ("v1", "ResourceQuota", "resourcequotas"),
    ("/api/v1", "services"): ("v1", "Service", "services"),
    ("/apis/networking.k8s.io/v1", "ingresses"): ("networking.k8s.io/v1", "Ingress", "ingresses"),
}
# Core cluster-scoped resources, served at /api/v1/<plural>[/<name>] (stored under namespace "").
CORE_CLUSTER = {"namespaces": ("v1", "Namespace", "namespaces")}
# Namespaced resources also listed (and watched) across all namespaces at /api/v1/<plural>.
ALL_NAMESPACES = {"pods", "resourcequotas"}
FIELDS = {"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"}
LOG_PIECE = 16 * 1024  # the chunk size pod logs are streamed in
DEFAULT_WATCH_SECONDS = 60.0  # the API server picks 30-60 minutes; tests always pass timeoutSeconds
# Cluster-scoped custom resources (stored under namespace ""), served at /apis/<group>/<version>/<plural>.
CLUSTER_RESOURCES = {
    ("/apis/kueue.x-k8s.io/v1beta1", "resourceflavors"): (
        "kueue.x-k8s.io/v1beta1",
        "ResourceFlavor",
        "resourceflavors",
    ),
    ("/apis/kueue.x-k8s.io/v1beta1", "clusterqueues"): (
        "kueue.x-k8s.io/v1beta1",
        "ClusterQueue",
        "clusterqueues",
    ),
    ("/apis/kueue.x-k8s.io/v1alpha1", "cohorts"): ("kueue.x-k8s.io/v1alpha1", "Cohort", "cohorts"),
    ("/apis/scheduling.volcano.sh/v1beta1", "queues"): ("scheduling.volcano.sh/v1beta1", "Queue", "queues"),
}
MERGE_PATCH = "application/merge-patch+json"
NODE_PATH = re.compile(r"^/api/v1/nodes/([^/]+)/?$")
NAMESPACED = re.compile(
    r"^(?P<group>/api/v1|/apis/[^/]+/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<res>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status|log))?/?$"
)
CLUSTER_SCOPED = re.compile(r"^(?P<group>/apis/[^/]+/[^/]+)/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?/?$")
CORE_SCOPED = re.compile(r"^/api/v1/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?/?$")

VERSION = {
    "major": "1",
    "minor": "30",
    "gitVersion": "v1.30.0-standin",
    "gitCommit": "0" * 40,
    "gitTreeState": "clean",
    "buildDate": "2024-04-17T00:00:00Z",
    "goVersion": "go1.22.2",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _now() -> str:
    return _stamp(datetime.now(UTC))


def _stamp(at: datetime) -> str:
    """RFC 3339 in UTC, whole seconds: how the API server writes times."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure" if code >= 400 else "Success",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _terms(selector: str | None) -> list[tuple[str, str, str | None]]:
    """(key, op, value) of each term: op "=" (also written "=="), "!=", "exists" or "!exists"."""
    out: list[tuple[str, str, str | None]] = []
    for raw in (selector or "").split(","):
        term = raw.strip()
        if not term:
            continue
        if "!=" in term:
            key, value = term.split("!=", 1)
            out.append((key.strip(), "!=", value.strip()))
        elif "=" in term:
            key, value = term.split("=", 1)
            out.append((key.strip(), "=", value.lstrip("=").strip()))
        elif term.startswith("!"):
            out.append((term[1:].strip(), "!exists", None))
        else:
            out.append((term, "exists", None))
    return out


def _holds(values: dict[str, Any], key: str, op: str, value: str | None) -> bool:
    if op == "exists":
        return key in values
    if op == "!exists":
        return key not in values
    if op == "=":
        return values.get(key) == value
    return values.get(key) != value  # "!=": also true when the key is absent, as in Kubernetes


def _field_values(obj: dict[str, Any]) -> dict[str, Any]:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "status.phase": status.get("phase", ""),
    }


def _matches(obj: dict[str, Any], selector: str | None, fields: str | None = None) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    if not all(_holds(labels, *term) for term in _terms(selector)):
        return False
    values = _field_values(obj)
    return all(_holds(values, *term) for term in _terms(fields))


def _bad_fields(fields: str | None) -> str | None:
    for key, op, _ in _terms(fields):
        if key not in FIELDS or op not in ("=", "!="):
            return f'"{key}" is not a known field selector: only "{", ".join(sorted(FIELDS))}"'
    return None


def _flag(query: dict[str, list[str]], key: str) -> bool:
    """A boolean query parameter, read as the API server's Go code does (strconv.ParseBool:
    the official Python client sends "True")."""
    return (query.get(key) or [""])[0] in ("1", "t", "T", "true", "TRUE", "True")


@dataclass
class LogBody:
    """A pod log accepted by :meth:`StandIn.handle`, streamed as text by the request handler."""

    data: bytes


def _log_tail(data: bytes, lines: int) -> bytes:
    """The last ``lines`` lines, as the kubelet reads them (an unterminated last line counts)."""
    if lines <= 0:
        return b""
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()  # the text after the last newline is not a line
        return b"\n".join(parts[-lines:]) + b"\n" if parts else b""
    return b"\n".join(parts[-lines:])


@dataclass
class WatchRequest:
    """A watch accepted by :meth:`StandIn.handle`, streamed by the request handler."""

    resource: str
    namespace: str | None  # None: every namespace
    selector: str | None
    fields: str | None
    after: int  # send changes with a resourceVersion above this
    deadline: float
    bookmarks: bool
    api_version: str
    kind: str
    initial: list[dict[str, Any]]  # events sent first (the current objects, or a 410 ERROR)


class StandIn:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (resource, ns, name) -> object
        self.nodes: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.authorization: list[str | None] = []  # the Authorization header of each request
        self.fail_with: int | None = None  # answer every request with this HTTP status (e.g. 503)
        # Every change, oldest first: (resourceVersion, type, resource, namespace, object as changed).
        self.history: list[tuple[int, str, str, str, dict[str, Any]]] = []
        self.compacted = 0  # changes up to this version are forgotten (a watch from before: 410)
        self.watched: list[list[tuple[str, str]]] = []  # per watch: the (type, name) of each event sent
        self.logs: dict[tuple[str, str], bytearray] = {}  # (namespace, pod) -> its container's log
        self._rv = 0
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._stopping = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    # -- lifecycle

    def start(self) -> StandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            self._stopping = True  # open watches end now, not at their timeout
            self._changed.notify_all()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    # -- helpers for tests

    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.requests if method is None or m == method]

    def get(self, resource: str, name: str, namespace: str = JOBS_NAMESPACE) -> dict[str, Any] | None:
        return self.objects.get((resource, namespace, name))

    def add(self, resource: str, obj: dict[str, Any], namespace: str = JOBS_NAMESPACE) -> dict[str, Any]:
        """Store an object directly, as a controller would (e.g. a Job's worker pods)."""
        with self._lock:
            return self._store(resource, namespace, copy.deepcopy(obj))

    def remove(self, resource: str, name: str, namespace: str = JOBS_NAMESPACE) -> None:
        """Delete an object as its owner would (kubectl delete; the kubelet confirming)."""
        with self._lock:
            self._delete((resource, namespace, name))

    def append_log(self, name: str, text: str | bytes, namespace: str = JOBS_NAMESPACE) -> None:
        """The pod's container wrote ``text`` (stdout and stderr, as the kubelet keeps them)."""
        with self._lock:
            data = text.encode() if isinstance(text, str) else text
            self.logs.setdefault((namespace, name), bytearray()).extend(data)

    def compact(self) -> None:
        """Forget the history so far, as etcd's compaction does: a watch from any version
        issued until now answers 410 Gone."""
        with self._lock:
            self.compacted = self._rv
            self.history.clear()

    def version(self) -> str:
        """The current resourceVersion (etcd's revision)."""
        return str(self._rv)

    def namespace(self, name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
        """Create a namespace, or set the labels of an existing one."""
        with self._lock:
            key = ("namespaces", "", name)
            if key in self.objects:
                self.objects[key]["metadata"]["labels"] = dict(labels or {})
                return self._modified(key)
            meta = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}
            return self._store("namespaces", "", {"apiVersion": "v1", "kind": "Namespace", "metadata": meta})

    def user_pod(
        self,
        namespace: str,
        name: str,
        requests: dict[str, str] | None = None,
        *,
        labels: dict[str, str] | None = None,
        init_containers: list[dict[str, Any]] | None = None,
        containers: list[dict[str, Any]] | None = None,
        service_account: str = "default",
        priority_class: str | None = None,
    ) -> dict[str, Any]:
        """A pending pod as ``kubectl apply`` creates it: one container asking ``requests``
        (also its limits, as extended resources require), or the given containers."""
        if containers is None:
            resources = {"requests": dict(requests or {}), "limits": dict(requests or {})}
            containers = [{"name": "main", "image": "x", "resources": resources}]
        spec: dict[str, Any] = {"containers": containers, "serviceAccountName": service_account}
        if init_containers:
            spec["initContainers"] = init_containers
        if priority_class:
            spec["priorityClassName"] = priority_class
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": spec,
            "status": {"phase": "Pending"},
        }
        return self.add("pods", pod, namespace)

    def pod_started(self, namespace: str, name: str, node: str, started: datetime) -> None:
        """The scheduler bound the pod to ``node`` and the kubelet started its containers."""
        with self._lock:
            key = ("pods", namespace, name)
            pod = self.objects[key]
            pod["spec"]["nodeName"] = node
            running = {"running": {"startedAt": _stamp(started)}}
            pod["status"] = {
                "phase": "Running",
                "startTime": _stamp(started),
                "containerStatuses": self._container_statuses(pod, running, True),
            }
            self._modified(key)

    def pod_waiting(self, namespace: str, name: str, node: str, reason: str = "ContainerCreating") -> None:
        """The scheduler bound the pod to ``node``; its container waits (pulling the image…)."""
        with self._lock:
            key = ("pods", namespace, name)
            pod = self.objects[key]
            pod["spec"]["nodeName"] = node
            waiting = {"waiting": {"reason": reason}}
            pod["status"] = {
                "phase": "Pending",
                "containerStatuses": self._container_statuses(pod, waiting, False),
            }
            self._modified(key)

    def pod_finished(self, namespace: str, name: str, finished: datetime, exit_code: int = 0) -> None:
        """Every container of the running pod ended at ``finished``: Succeeded or Failed."""
        with self._lock:
            key = ("pods", namespace, name)
            pod = self.objects[key]
            started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
            reason = "Completed" if exit_code == 0 else "Error"
            ended = {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": started,
                    "finishedAt": _stamp(finished),
                }
            }
            pod["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            pod["status"]["containerStatuses"] = self._container_statuses(pod, ended, False)
            self._modified(key)

    @staticmethod
    def _container_statuses(pod: dict[str, Any], state: dict[str, Any], ready: bool) -> list[dict[str, Any]]:
        return [
            {
                "name": c["name"],
                "image": c.get("image", "x"),
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "state": copy.deepcopy(state),
            }
            for c in pod["spec"]["containers"]
        ]

    def set_status(
        self, resource: str, name: str, status: dict[str, Any], namespace: str = JOBS_NAMESPACE
    ) -> None:
        with self._lock:
            obj = self.objects[(resource, namespace, name)]
            obj["status"] = copy.deepcopy(status)
            self._modified((resource, namespace, name))

    def job_succeeded(self, name: str, namespace: str = JOBS_NAMESPACE) -> None:
        now = _now()
        self.set_status(
            "jobs",
            name,
            {
                "startTime": now,
                "completionTime": now,
                "succeeded": 1,
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": now}],
            },
            namespace,
        )

    def job_failed(
        self,
        name: str,
        reason: str = "BackoffLimitExceeded",
        message: str = "",
        namespace: str = JOBS_NAMESPACE,
    ) -> None:
        now = _now()
        self.set_status(
            "jobs",
            name,
            {
                "startTime": now,
                "failed": 1,
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": reason,
                        "message": message,
                        "lastTransitionTime": now,
                    }
                ],
            },
            namespace,
        )

    def pod_running(
        self, pod: str, owner: str, node: str, started: datetime, namespace: str = JOBS_NAMESPACE
    ) -> None:
        """A worker pod of ``owner`` whose container runs since ``started`` (the kubelet's
        ``state.running.startedAt``), as a controller and the kubelet would report it."""
        self._put_pod(pod, owner, node, "Running", {"running": {"startedAt": _stamp(started)}}, namespace)

    def pod_terminated(
        self,
        pod: str,
        owner: str,
        node: str,
        started: datetime,
        finished: datetime,
        exit_code: int = 0,
        namespace: str = JOBS_NAMESPACE,
    ) -> None:
        """The same pod once its container ended: ``state.terminated.startedAt/finishedAt``."""
        ended = {"exitCode": exit_code, "startedAt": _stamp(started), "finishedAt": _stamp(finished)}
        state = {"terminated": ended}
        self._put_pod(pod, owner, node, "Succeeded" if exit_code == 0 else "Failed", state, namespace)

    def pod_pending(
        self, pod: str, owner: str, *, waiting: tuple[str, str] | None = None,
        unschedulable: str | None = None, namespace: str = JOBS_NAMESPACE,
    ) -> None:
        """A worker pod of ``owner`` that does not run: its container waits (``waiting``: the
        kubelet's reason and message, e.g. ImagePullBackOff), or the scheduler found no node
        (``unschedulable``: the PodScheduled condition's message)."""
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}} if waiting else {}
        self._put_pod(pod, owner, "", "Pending", state, namespace)
        if unschedulable is not None:
            with self._lock:
                key = ("pods", namespace, pod)
                status = self.objects[key]["status"]
                status["containerStatuses"] = []
                status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                         "message": unschedulable, "lastTransitionTime": _now()}]
                self._modified(key)

    def _put_pod(
        self, pod: str, owner: str, node: str, phase: str, state: dict[str, Any], namespace: str
    ) -> None:
        status = {
            "phase": phase,
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "x",
                    "imageID": "",
                    "ready": phase == "Running",
                    "restartCount": 0,
                    "state": state,
                }
            ],
        }
        with self._lock:
            if (key := ("pods", namespace, pod)) not in self.objects:
                self._store(
                    "pods",
                    namespace,
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": pod,
                            "labels": {"app.kubernetes.io/managed-by": "gpupool", "gpupool.io/name": owner},
                        },
                        "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
                    },
                )
            self.objects[key]["status"] = status
            self._modified(key)

    # -- the change log (callers hold the lock)

    def _bump(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _log(self, kind: str, key: tuple[str, str, str], obj: dict[str, Any]) -> None:
        self.history.append((self._rv, kind, key[0], key[1], copy.deepcopy(obj)))
        self._changed.notify_all()

    def _store(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if namespace:  # cluster-scoped objects have none
            meta.setdefault("namespace", namespace)
        meta["uid"] = str(uuid.uuid4())
        meta["resourceVersion"] = self._bump()
        meta["creationTimestamp"] = _now()
        key = (resource, namespace, meta["name"])
        self.objects[key] = obj
        self._log("ADDED", key, obj)
        return obj

    def _modified(self, key: tuple[str, str, str]) -> dict[str, Any]:
        obj = self.objects[key]
        obj["metadata"]["resourceVersion"] = self._bump()
        self._log("MODIFIED", key, obj)
        return obj

    def _delete(self, key: tuple[str, str, str]) -> dict[str, Any]:
        obj = self.objects.pop(key)
        if key[0] == "pods":
            self.logs.pop((key[1], key[2]), None)  # the kubelet removes the pod's log files
        obj["metadata"]["resourceVersion"] = self._bump()
        obj["metadata"].setdefault("deletionTimestamp", _now())
        self._log("DELETED", key, obj)
        return obj

    # -- request handling (called from the server threads)

    def handle(
        self,
        method: str,
        path: str,
        query: dict[str, list[str]],
        body: bytes,
        authorization: str | None = None,
        content_type: str | None = None,
    ) -> tuple[int, Any]:
        with self._lock:
            self.requests.append((method, path, query))
            self.authorization.append(authorization)
            if self.fail_with is not None:
                return self.fail_with, _status(self.fail_with, "InternalError", "stand-in told to fail")
            if path.rstrip("/") == "/version" and method == "GET":
                return 200, VERSION
            if path.rstrip("/") == "/api/v1/nodes" and method == "GET":
                return 200, {
                    "apiVersion": "v1",
                    "kind": "NodeList",
                    "metadata": {"resourceVersion": "1"},
                    "items": copy.deepcopy(self.nodes),
                }
            node = NODE_PATH.match(path)
            if node is not None:
                return self._node(method, node.group(1), body, content_type)
            found = self._route(path)
            if found is None:
                return 404, _status(
                    404, "NotFound", f"the server could not find the requested resource {path}"
                )
            (api_version, kind, stored), ns, name, sub = found
            if sub == "log":
                return self._pod_log(stored, ns, name, method, query)
            if method == "PATCH" and (content_type or "").split(";")[0].strip() != MERGE_PATCH:
                return 415, _status(415, "UnsupportedMediaType", f"the stand-in only merges {MERGE_PATCH}")
            bad = _bad_fields((query.get("fieldSelector") or [None])[0])
            if bad:
                return 400, _status(400, "BadRequest", bad)
            if name is None and method == "GET" and _flag(query, "watch"):
                return 200, self._watch(stored, ns, api_version, kind, query)
            if ns is None and not (name is None and method == "GET"):
                return 405, _status(405, "MethodNotAllowed", "only list and watch across namespaces")
            return self._namespaced(method, stored, ns, name, api_version, kind, query, body)

    def _node(self, method: str, name: str, body: bytes, content_type: str | None) -> tuple[int, Any]:
        """GET or merge-PATCH one seeded node (``kubectl cordon`` patches ``spec.unschedulable``)."""
        found = next((n for n in self.nodes if n["metadata"]["name"] == name), None)
        if found is None:
            return 404, _status(404, "NotFound", f'nodes "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(found)
        if method != "PATCH":
            return 405, _status(405, "MethodNotAllowed", "the stand-in only reads and patches nodes")
        if (content_type or "").split(";")[0].strip() != MERGE_PATCH:
            return 415, _status(415, "UnsupportedMediaType", f"the stand-in only merges {MERGE_PATCH}")
        try:
            patch = json.loads(body or b"{}")
        except ValueError:
            return 400, _status(400, "BadRequest", "the body is not JSON")
        merged = _merge(found, patch)
        merged["metadata"]["resourceVersion"] = self._bump()
        self.nodes[self.nodes.index(found)] = merged
        return 200, copy.deepcopy(merged)

    def _route(self, path: str) -> tuple[tuple[str, str, str], str | None, str | None, str | None] | None:
        """(resource entry, namespace — "" when cluster-scoped, None across namespaces —, name,
        subresource) of a path, or None."""
        match = NAMESPACED.match(path)
        if match and (match["group"], match["res"]) in RESOURCES:
            if match["sub"] == "log" and (match["res"] != "pods" or match["name"] is None):
                return None
            return RESOURCES[(match["group"], match["res"])], match["ns"], match["name"], match["sub"]
        match = CLUSTER_SCOPED.match(path)
        if match and (match["group"], match["res"]) in CLUSTER_RESOURCES:
            return CLUSTER_RESOURCES[(match["group"], match["res"])], "", match["name"], None
        match = CORE_SCOPED.match(path)
        if match and match["res"] in CORE_CLUSTER:
            return CORE_CLUSTER[match["res"]], "", match["name"], None
        if match and match["res"] in ALL_NAMESPACES and match["name"] is None:
            return RESOURCES[("/api/v1", match["res"])], None, None, None
        return None

    def _pod_log(
        self, res: str, ns: str | None, name: str | None, method: str, query: dict[str, list[str]]
    ) -> tuple[int, Any]:
        """``GET /api/v1/namespaces/{ns}/pods/{name}/log``, as the API server and kubelet answer."""
        if method != "GET":
            return 405, _status(405, "MethodNotAllowed", "the log is read with GET")
        pod = self.objects.get((res, ns or "", name or ""))
        if pod is None:
            return 404, _status(404, "NotFound", f'pods "{name}" not found')
        refused = _log_refusal(pod, (query.get("container") or [None])[0])
        if refused:
            return 400, _status(400, "BadRequest", refused)
        try:
            tail = int((query.get("tailLines") or ["-1"])[0])
            limit = int((query.get("limitBytes") or ["0"])[0])
        except ValueError:
            return 400, _status(400, "BadRequest", "tailLines and limitBytes are integers")
        data = bytes(self.logs.get((ns or "", name or ""), b""))
        if tail >= 0:
            data = _log_tail(data, tail)
        if limit > 0:
            data = data[:limit]
        return 200, LogBody(data)

    def _selected(self, res: str, ns: str | None, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        selector = (query.get("labelSelector") or [None])[0]
        fields = (query.get("fieldSelector") or [None])[0]
        return [
            copy.deepcopy(o)
            for (r, n, _), o in sorted(self.objects.items())
            if r == res and (ns is None or n == ns) and _matches(o, selector, fields)
        ]

    def _watch(
        self, res: str, ns: str | None, api_version: str, kind: str, query: dict[str, list[str]]
    ) -> WatchRequest:
        """A watch from ``resourceVersion`` (absent or "0": the current objects first, as ADDED)."""
        since = (query.get("resourceVersion") or [""])[0]
        timeout = float((query.get("timeoutSeconds") or [DEFAULT_WATCH_SECONDS])[0])
        request = WatchRequest(
            resource=res,
            namespace=ns,
            selector=(query.get("labelSelector") or [None])[0],
            fields=(query.get("fieldSelector") or [None])[0],
            after=self._rv,
            deadline=time.monotonic() + timeout,
            bookmarks=_flag(query, "allowWatchBookmarks"),
            api_version=api_version,
            kind=kind,
            initial=[],
        )
        if since in ("", "0"):
            request.initial = [{"type": "ADDED", "object": o} for o in self._selected(res, ns, query)]
        elif not since.isdigit() or int(since) < self.compacted:
            # What the API server sends for a compacted version: a 200 whose one event is an ERROR.
            message = f"too old resource version: {since} ({self.compacted})"
            request.initial = [{"type": "ERROR", "object": _status(410, "Expired", message)}]
            request.deadline = 0
        else:
            request.after = int(since)
        return request

    def watch_events(self, request: WatchRequest) -> Iterator[dict[str, Any]]:
        """The events of a watch as they happen, until its timeout (or the stand-in stops)."""
        sent: list[tuple[str, str]] = []
        self.watched.append(sent)
        for event in request.initial:
            sent.append((event["type"], event["object"].get("metadata", {}).get("name", "")))
            yield event
        while True:
            with self._lock:
                events = self._since(request)
                while not events and not self._stopping and time.monotonic() < request.deadline:
                    self._changed.wait(max(0.0, request.deadline - time.monotonic()))
                    events = self._since(request)
                version = self._rv
            for event in events:
                sent.append((event["type"], event["object"]["metadata"]["name"]))
                yield event
            if not events:
                break
        if request.bookmarks and request.deadline:
            meta = {"resourceVersion": str(version)}
            yield {
                "type": "BOOKMARK",
                "object": {"apiVersion": request.api_version, "kind": request.kind, "metadata": meta},
            }

    def _since(self, request: WatchRequest) -> list[dict[str, Any]]:
        events = []
        for rv, kind, res, ns, obj in self.history:
            if rv <= request.after or res != request.resource:
                continue
            if (request.namespace is None or ns == request.namespace) and _matches(
                obj, request.selector, request.fields
            ):
                events.append({"type": kind, "object": copy.deepcopy(obj)})
        if self.history:
            request.after = max(request.after, self.history[-1][0])
        return events

    def _namespaced(
        self,
        method: str,
        res: str,
        ns: str | None,
        name: str | None,
        api_version: str,
        kind: str,
        query: dict[str, list[str]],
        body: bytes,
    ) -> tuple[int, Any]:
        if name is None and method == "GET":
            return 200, {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(self._rv)},  # the revision the list was read at
                "items": self._selected(res, ns, query),
            }
        assert ns is not None
        if name is None and method == "POST":
            try:
                obj = json.loads(body or b"{}")
            except ValueError:
                return 400, _status(400, "BadRequest", "body is not JSON")
            obj_name = (obj.get("metadata") or {}).get("name")
            if not obj_name:
                return 422, _status(422, "Invalid", "metadata.name: Required value")
            if (res, ns, obj_name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{res} "{obj_name}" already exists')
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
            if res == "services" and (obj.get("spec") or {}).get("type", "ClusterIP") == "ClusterIP":
                obj["spec"].setdefault("clusterIP", f"10.96.0.{len(self.objects) % 250 + 2}")
            return 201, copy.deepcopy(self._store(res, ns, obj))
        key = (res, ns, name)
        if key not in self.objects:
            return 404, _status(404, "NotFound", f'{res} "{name}" not found')
        if method == "GET":
            return 200, copy.deepcopy(self.objects[key])
        if method == "PATCH":
            try:
                patch = json.loads(body or b"{}")
            except ValueError:
                return 400, _status(400, "BadRequest", "body is not JSON")
            sent = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
            if sent and sent != self.objects[key]["metadata"]["resourceVersion"]:
                return 409, _status(409, "Conflict", f'{res} "{name}": the object has been modified')
            self.objects[key] = _merge(self.objects[key], patch)
            return 200, copy.deepcopy(self._modified(key))
        if method == "PUT":
            return self._replace(key, body)
        if method == "DELETE":
            self._delete(key)
            return 200, {
                **_status(200, "", ""),
                "status": "Success",
                "details": {"name": name, "kind": res, "uid": "x"},
            }
        return 405, _status(405, "MethodNotAllowed", f"{method} not supported by the stand-in")

    def _replace(self, key: tuple[str, str, str], body: bytes) -> tuple[int, Any]:
        """PUT: the whole object is replaced; a stale ``resourceVersion`` answers 409, as the
        API server's optimistic concurrency does."""
        try:
            obj = json.loads(body or b"{}")
        except ValueError:
            return 400, _status(400, "BadRequest", "body is not JSON")
        current = self.objects[key]
        meta = obj.setdefault("metadata", {})
        if meta.get("name") != key[2]:
            return 400, _status(400, "BadRequest", "metadata.name does not match the URL")
        sent = meta.get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            return 409, _status(409, "Conflict", f'{key[0]} "{key[2]}": the object has been modified')
        for kept in ("uid", "creationTimestamp"):
            meta[kept] = current["metadata"][kept]
        if key[1]:
            meta["namespace"] = key[1]
        obj.setdefault("apiVersion", current.get("apiVersion"))
        obj.setdefault("kind", current.get("kind"))
        self.objects[key] = obj
        return 200, copy.deepcopy(self._modified(key))


def _log_refusal(pod: dict[str, Any], container: str | None) -> str | None:
    """Why the API server would answer 400 to reading this container's log, or None."""
    name = pod["metadata"]["name"]
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    if container is None:
        if len(names) != 1:
            return f"a container name must be specified for pod {name}, choose one of: {names}"
        container = names[0]
    if container not in names:
        return f"container {container} is not valid for pod {name}"
    if not (pod.get("spec") or {}).get("nodeName"):
        return f"pod {name} does not have a host assigned"
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    state = next((cs.get("state") or {} for cs in statuses if cs.get("name") == container), {})
    if "running" in state or "terminated" in state:
        return None
    reason = (state.get("waiting") or {}).get("reason") or "ContainerCreating"
    return f'container "{container}" in pod "{name}" is waiting to start: {reason}'


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, ``null`` deletes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _handler(standin: StandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out in separate writes

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            code, payload = standin.handle(
                self.command,
                parts.path,
                parse_qs(parts.query),
                body,
                self.headers.get("Authorization"),
                self.headers.get("Content-Type"),
            )
            if isinstance(payload, WatchRequest):
                self._stream(payload)
                return
            if isinstance(payload, LogBody):
                self._log(payload.data)
                return
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, request: WatchRequest) -> None:
            """One JSON event per line, each in its own chunk, as the API server streams a watch."""
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in standin.watch_events(request):
                line = json.dumps(event).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _log(self, data: bytes) -> None:
            """The log as text, in chunks, as the API server proxies it from the kubelet."""
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for start in range(0, len(data), LOG_PIECE):
                piece = data[start : start + LOG_PIECE]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    return Handler


@pytest.fixture
def k8s_api() -> Iterator[StandIn]:
    standin = StandIn().start()
    try:
        yield standin
    finally:
        standin.stop()
