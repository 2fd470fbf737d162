"""A tiny Kubernetes API stand-in (stdlib HTTP server in a thread) for the Kubernetes backend tests.

It serves what :mod:`jobs.backends.kubernetes` and :mod:`jobs.backends.queues` use: ``/version``,
namespaced create / read / list / delete / merge-patch / replace of batch/v1 Jobs, apps/v1
Deployments, v1 Pods, Volcano ``batch.volcano.sh/v1alpha1`` Jobs (a custom resource, stored as
``vcjobs``) and Kueue LocalQueues; the same verbs on the cluster-scoped custom resources of
``CLUSTER_RESOURCES`` (Kueue ResourceFlavors, ClusterQueues, Cohorts; Volcano Queues), stored
under namespace ``""``; and the cluster-wide v1 Node list (seeded by the tests). Objects are stored
as posted, with ``uid``, ``resourceVersion`` and ``creationTimestamp`` added; a duplicate create
answers 409, a missing object 404, a PUT with a stale ``resourceVersion`` 409. PATCH
takes only ``application/merge-patch+json`` (RFC 7386), as a dict body must be sent: anything else
answers 415, the way the API server refuses a JSON Patch content type with an object body.
Equality label selectors (``a=b,c=d``) are honoured. Every request is recorded as
``(method, path, query)``.

ConfigMaps (v1, namespaced: YuniKorn's queue configuration) are served like the other core
kinds; a merge patch that names a ``metadata.resourceVersion`` other than the stored one answers
409, as the API server's optimistic concurrency does for patches too.

Nothing here acts like a controller: the tests set statuses with :meth:`StandIn.set_status` and add
the pods a controller would start with :meth:`StandIn.add` — or, with their containers' start and
finish times as the kubelet reports them, :meth:`StandIn.pod_running` / :meth:`StandIn.pod_terminated`.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

# (group path, resource) -> (apiVersion, kind, the name objects are stored under)
RESOURCES = {
    ("/apis/batch/v1", "jobs"): ("batch/v1", "Job", "jobs"),
    ("/apis/apps/v1", "deployments"): ("apps/v1", "Deployment", "deployments"),
    ("/api/v1", "pods"): ("v1", "Pod", "pods"),
    ("/api/v1", "configmaps"): ("v1", "ConfigMap", "configmaps"),
    ("/apis/batch.volcano.sh/v1alpha1", "jobs"): ("batch.volcano.sh/v1alpha1", "Job", "vcjobs"),
    ("/apis/kueue.x-k8s.io/v1beta1", "localqueues"): ("kueue.x-k8s.io/v1beta1", "LocalQueue", "localqueues"),
}
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
NAMESPACED = re.compile(
    r"^(?P<group>/api/v1|/apis/[^/]+/[^/]+)/namespaces/(?P<ns>[^/]+)/(?P<res>[^/]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?/?$"
)
CLUSTER_SCOPED = re.compile(r"^(?P<group>/apis/[^/]+/[^/]+)/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?/?$")

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


def _matches(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in selector.split(","):
        key, _, value = term.partition("=")
        if labels.get(key.strip()) != value.lstrip("=").strip():
            return False
    return True


class StandIn:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (resource, ns, name) -> object
        self.nodes: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, dict[str, list[str]]]] = []
        self.authorization: list[str | None] = []  # the Authorization header of each request
        self.fail_with: int | None = None  # answer every request with this HTTP status (e.g. 503)
        self._versions = itertools.count(1)
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    # -- lifecycle

    def start(self) -> StandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    # -- helpers for tests

    def calls(self, method: str | None = None) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _ in self.requests if method is None or m == method]

    def get(self, resource: str, name: str, namespace: str = "gpupool") -> dict[str, Any] | None:
        return self.objects.get((resource, namespace, name))

    def add(self, resource: str, obj: dict[str, Any], namespace: str = "gpupool") -> dict[str, Any]:
        """Store an object directly, as a controller would (e.g. a Job's worker pods)."""
        with self._lock:
            return self._store(resource, namespace, copy.deepcopy(obj))

    def set_status(
        self, resource: str, name: str, status: dict[str, Any], namespace: str = "gpupool"
    ) -> None:
        with self._lock:
            obj = self.objects[(resource, namespace, name)]
            obj["status"] = copy.deepcopy(status)
            obj["metadata"]["resourceVersion"] = str(next(self._versions))

    def job_succeeded(self, name: str, namespace: str = "gpupool") -> None:
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
        self, name: str, reason: str = "BackoffLimitExceeded", message: str = "", namespace: str = "gpupool"
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
        self, pod: str, owner: str, node: str, started: datetime, namespace: str = "gpupool"
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
        namespace: str = "gpupool",
    ) -> None:
        """The same pod once its container ended: ``state.terminated.startedAt/finishedAt``."""
        ended = {"exitCode": exit_code, "startedAt": _stamp(started), "finishedAt": _stamp(finished)}
        state = {"terminated": ended}
        self._put_pod(pod, owner, node, "Succeeded" if exit_code == 0 else "Failed", state, namespace)

    def _put_pod(
        self, pod: str, owner: str, node: str, phase: str, state: dict[str, Any], namespace: str
    ) -> None:
        status = {
            "phase": phase,
            "containerStatuses": [
                {"name": "main", "image": "x", "imageID": "", "ready": phase == "Running",
                 "restartCount": 0, "state": state}
            ],
        }
        with self._lock:
            if (key := ("pods", namespace, pod)) not in self.objects:
                self._store("pods", namespace, {
                    "apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": pod, "labels": {"app.kubernetes.io/managed-by": "gpupool",
                                                         "gpupool.io/name": owner}},
                    "spec": {"nodeName": node, "containers": [{"name": "main", "image": "x"}]},
                })
            self.objects[key]["status"] = status
            self.objects[key]["metadata"]["resourceVersion"] = str(next(self._versions))

    def _store(self, resource: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj.setdefault("metadata", {})
        if namespace:  # cluster-scoped objects have none
            meta.setdefault("namespace", namespace)
        meta["uid"] = str(uuid.uuid4())
        meta["resourceVersion"] = str(next(self._versions))
        meta["creationTimestamp"] = _now()
        self.objects[(resource, namespace, meta["name"])] = obj
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
            found = self._route(path)
            if found is None:
                return 404, _status(
                    404, "NotFound", f"the server could not find the requested resource {path}"
                )
            (api_version, kind, stored), ns, name = found
            if method == "PATCH" and (content_type or "").split(";")[0].strip() != MERGE_PATCH:
                return 415, _status(415, "UnsupportedMediaType", f"the stand-in only merges {MERGE_PATCH}")
            return self._namespaced(method, stored, ns, name, api_version, kind, query, body)

    def _route(self, path: str) -> tuple[tuple[str, str, str], str, str | None] | None:
        """(resource entry, namespace — "" when cluster-scoped —, name) of a path, or None."""
        match = NAMESPACED.match(path)
        if match and (match["group"], match["res"]) in RESOURCES:
            return RESOURCES[(match["group"], match["res"])], match["ns"], match["name"]
        match = CLUSTER_SCOPED.match(path)
        if match and (match["group"], match["res"]) in CLUSTER_RESOURCES:
            return CLUSTER_RESOURCES[(match["group"], match["res"])], "", match["name"]
        return None

    def _namespaced(
        self,
        method: str,
        res: str,
        ns: str,
        name: str | None,
        api_version: str,
        kind: str,
        query: dict[str, list[str]],
        body: bytes,
    ) -> tuple[int, Any]:
        if name is None and method == "GET":
            selector = (query.get("labelSelector") or [None])[0]
            items = [
                copy.deepcopy(o)
                for (r, n, _), o in sorted(self.objects.items())
                if r == res and n == ns and _matches(o, selector)
            ]
            return 200, {
                "apiVersion": api_version,
                "kind": f"{kind}List",
                "metadata": {"resourceVersion": str(next(self._versions))},
                "items": items,
            }
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
            obj = _merge(self.objects[key], patch)
            obj["metadata"]["resourceVersion"] = str(next(self._versions))
            self.objects[key] = obj
            return 200, copy.deepcopy(obj)
        if method == "PUT":
            return self._replace(key, body)
        if method == "DELETE":
            del self.objects[key]
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
        meta["resourceVersion"] = str(next(self._versions))
        obj.setdefault("apiVersion", current.get("apiVersion"))
        obj.setdefault("kind", current.get("kind"))
        self.objects[key] = obj
        return 200, copy.deepcopy(obj)


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
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

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
