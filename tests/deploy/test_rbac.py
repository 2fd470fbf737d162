"""Least privilege, checked: the Kubernetes backend (batch and Volcano training, every job kind,
every protocol call) and the Kueue / Volcano queue sync are driven through the official client
against the API stand-in; every request they make is turned into the (API group, resource, verb)
RBAC would check, and the rules of deploy/kubernetes/base/rbac.yaml must be exactly that set —
nothing the portal does is missing, nothing it never does is granted."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.native.backends.queues import KINDS, QueueSync
from jobs.native.native_k8s import ResourceQuotaSync, import_pods
from quotas.models import Cluster
from tests import factories as fx
from tests.backends import k8s_standin
from tests.backends.test_kubernetes import make_spec
from tests.deploy.helpers import find, objects

pytestmark = [pytest.mark.deploy, pytest.mark.kubernetes]

k8s_api = k8s_standin.k8s_api

PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?"
    r"(?:/(?P<sub>log|status))?$"
)
VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}

Rule = tuple[str, str, str]  # (apiGroup, resource, verb)


def permission(method: str, path: str, query: dict) -> tuple[bool, Rule] | None:
    """(namespaced?, rule) RBAC checks for one request; None for a non-resource URL (/version)."""
    match = PATH.match(path)
    if match is None:
        assert path.rstrip("/") == "/version", path  # every identity may read it (system:public-info-viewer)
        return None
    if method == "GET":
        verb = "watch" if query.get("watch") else ("get" if match["name"] else "list")
    else:
        verb = VERBS[method] if match["name"] or method == "POST" else "deletecollection"
    resource = f"{match['res']}/{match['sub']}" if match["sub"] else match["res"]  # RBAC: "pods/log"
    return match["ns"] is not None, (match["group"] or "", resource, verb)


def used_namespaces(standin: k8s_standin.StandIn) -> set[tuple[str, str]]:
    """(namespace, resource) of every namespaced request."""
    found = set()
    for _method, path, _query in standin.requests:
        match = PATH.match(path)
        if match is not None and match["ns"] is not None:
            found.add((match["ns"], match["res"]))
    return found


def granted(role: dict) -> set[Rule]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def used(standin: k8s_standin.StandIn) -> tuple[set[Rule], set[Rule]]:
    namespaced: set[Rule] = set()
    cluster: set[Rule] = set()
    for method, path, query in standin.requests:
        found = permission(method, path, query)
        if found:
            (namespaced if found[0] else cluster).add(found[1])
    return namespaced, cluster


def drive_backend(backend: KubernetesBackend, standin: k8s_standin.StandIn) -> None:
    """Every call the dispatcher, the status sync, resizing and the inventory make."""
    specs = [
        make_spec(kind, job_id=n, workers=1 if kind == "dev" else 2)
        for n, kind in enumerate(("training", "inference", "dev"), start=1)
    ]
    specs[2] = replace(specs[2], expose_port=8888)  # a dev port: its Service and Ingress
    for spec in specs:
        backend.submit(spec)
        backend.submit(spec)  # a retried dispatch finds it
    backend.status([s.name for s in specs] + ["gp-404"])
    standin.pod_started("gpupool-jobs", specs[2].name, "gpu-a", datetime(2026, 1, 1, tzinfo=UTC))
    standin.append_log(specs[2].name, "hello\n")
    assert backend.log_tail(specs[2].name, max_bytes=100).text == "hello\n"
    assert b"".join(backend.log_stream(specs[2].name)) == b"hello\n"
    assert backend.log_tail(specs[0].name, max_bytes=100).missing  # no pod: is its Job there?
    for spec in specs[:2]:
        backend.resize(replace(spec, workers=3))
    for spec in specs:
        backend.cancel(spec.name, grace_seconds=5)
    backend.list_nodes()
    assert backend.health() == "ok"


def drive_queue_sync(backend: KubernetesBackend) -> None:
    """Create, replace and prune one object of every kind the queue sync manages."""

    def rendered(spec_value: int) -> dict[str, list[dict]]:
        formats: dict[str, list[dict]] = {"kueue": [], "volcano": []}
        for (api_version, kind), where in KINDS.items():
            fmt = "volcano" if where.group == "scheduling.volcano.sh" else "kueue"
            meta = {"name": f"gp-{kind.lower()}", "labels": {"app.kubernetes.io/managed-by": "gpupool"}}
            formats[fmt].append(
                {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": {"weight": spec_value}}
            )
        return formats

    sync = QueueSync(backend)
    for spec_value in (1, 2):
        for fmt, objs in rendered(spec_value).items():
            sync.apply(fmt, objs)
    for fmt in ("kueue", "volcano"):
        assert sync.apply(fmt, [])["deleted"] >= 1


def test_the_roles_grant_exactly_what_the_backend_and_the_queue_sync_use(k8s_api):
    k8s_api.nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-a", "labels": {}}})
    for training_api in ("batch", "volcano"):
        backend = KubernetesBackend(
            host=k8s_api.url,
            namespace="gpupool-jobs",
            token="t",
            training_api=training_api,
            ingress_domain="dev.example.org",
            portal_url="https://portal.example.org",
        )
        drive_backend(backend, k8s_api)
    drive_queue_sync(KubernetesBackend(host=k8s_api.url, namespace="gpupool-jobs", token="t"))
    namespaced, cluster = used(k8s_api)
    assert {ns for ns, _ in used_namespaces(k8s_api)} == {"gpupool-jobs"}  # never the portal's own
    assert granted(find(objects("jobs"), "Role", "gpupool-backend")) == namespaced
    assert granted(find(objects("base"), "ClusterRole", "gpupool-backend")) == cluster
    assert not [o for o in objects("base") if o["kind"] in ("Role", "RoleBinding")]
    # The drive reached every kind: a backend call that went unexercised would pass unnoticed.
    resources = {r[:2] for r in namespaced | cluster}
    assert {
        ("", "pods"),
        ("", "pods/log"),
        ("", "services"),
        ("networking.k8s.io", "ingresses"),
        ("batch", "jobs"),
        ("apps", "deployments"),
        ("batch.volcano.sh", "jobs"),
        ("", "nodes"),
    } | {(k.group, k.plural) for k in KINDS.values()} == resources


@pytest.mark.django_db
def test_the_native_role_grants_exactly_what_the_pod_import_and_the_quotas_use(k8s_api):
    config = {"host": k8s_api.url, "namespace": "gpupool-jobs", "native_import": True}
    cluster = Cluster.objects.create(name="k8s", kind="kubernetes", config=config)
    fx.flavor()
    fx.priority()
    k8s_api.namespace("team", {"gpupool.io/project": "no-such-project"})
    k8s_api.user_pod("team", "train", {"nvidia.com/gpu": "1"})
    import_pods(cluster, watch_seconds=1)  # the list
    import_pods(cluster, watch_seconds=1)  # a watch from its version
    sync = ResourceQuotaSync(KubernetesBackend(**cluster.config))
    for hard in ("1", "2"):
        labels = {"app.kubernetes.io/managed-by": "gpupool"}
        meta = {"name": "gpupool-quota", "namespace": "team", "labels": labels}
        sync.apply([{"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta,
                     "spec": {"hard": {"requests.nvidia.com/gpu": hard}}}])
    assert sync.apply([])["deleted"] == 1
    namespaced, cluster_wide = used(k8s_api)
    # Project namespaces are not the portal's: every rule is cluster-wide (a ClusterRole).
    assert granted(find(objects("base"), "ClusterRole", "gpupool-native")) == namespaced | cluster_wide
    assert ("", "pods", "watch") in cluster_wide and ("", "resourcequotas", "update") in namespaced


def test_the_bindings_give_the_roles_to_the_workers_account_only():
    rbac = objects("base") + objects("jobs")
    for kind, role, name in (("RoleBinding", "Role", "gpupool-backend"),
                             ("ClusterRoleBinding", "ClusterRole", "gpupool-backend"),
                             ("ClusterRoleBinding", "ClusterRole", "gpupool-native")):
        binding = find(rbac, kind, name)
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": role,
            "name": name,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "gpupool-backend", "namespace": "gpupool"}
        ]
    demo = find(objects("demo"), "ClusterRoleBinding", "gpupool-backend")
    assert demo["subjects"][0]["namespace"] == "gpupool-demo"  # follows the overlay's namespace
    # The jobs' Role lives in their own namespace, granted to the account in the portal's.
    assert find(rbac, "RoleBinding", "gpupool-backend")["metadata"]["namespace"] == "gpupool-jobs"
    assert find(rbac, "Namespace", "gpupool-jobs")


def test_a_request_maps_to_the_rbac_rule_the_api_server_checks():
    assert permission("GET", "/api/v1/namespaces/x/pods", {}) == (True, ("", "pods", "list"))
    assert permission("GET", "/api/v1/namespaces/x/pods/p", {}) == (True, ("", "pods", "get"))
    assert permission("PUT", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues/q", {}) == (
        False,
        ("kueue.x-k8s.io", "clusterqueues", "update"),
    )
    assert permission("DELETE", "/apis/apps/v1/namespaces/x/deployments", {}) == (
        True,
        ("apps", "deployments", "deletecollection"),
    )
    assert permission("GET", "/api/v1/nodes", {"watch": ["1"]}) == (False, ("", "nodes", "watch"))
    assert permission("GET", "/api/v1/namespaces/x/pods/p/log", {}) == (True, ("", "pods/log", "get"))
    assert permission("GET", "/version", {}) is None
