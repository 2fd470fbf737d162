"""Apply rendered scheduler queues (:mod:`quotas.queues`) to a Kubernetes cluster through the
official client's ``CustomObjectsApi``. Plain Python, no Django.

Every object gpupool renders carries ``app.kubernetes.io/managed-by: gpupool``; a sync makes the
cluster's managed objects of each kind equal the rendered list: missing ones are created,
changed ones replaced (PUT with the read ``resourceVersion``, so a concurrent writer makes the
call fail and the next sync retry rather than lose its change), and managed objects no longer
rendered are deleted. Objects without the label are never touched.

``RULES`` lists exactly the API groups, resources and verbs used here (the RBAC the portal's
service account needs for the integration).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from jobs.clusters.backends.base import BackendError
from jobs.clusters.backends.kubernetes import MANAGED_SELECTOR, KubernetesBackend


@dataclass(frozen=True, slots=True)
class Kind:
    group: str
    version: str
    plural: str
    namespaced: bool = False


# (apiVersion, kind) → where it lives. Order: what others refer to comes first (created first,
# pruned last): flavors and cohorts before the ClusterQueues, those before the LocalQueues.
KINDS: dict[tuple[str, str], Kind] = {
    ("kueue.x-k8s.io/v1beta1", "ResourceFlavor"): Kind("kueue.x-k8s.io", "v1beta1", "resourceflavors"),
    ("kueue.x-k8s.io/v1alpha1", "Cohort"): Kind("kueue.x-k8s.io", "v1alpha1", "cohorts"),
    ("kueue.x-k8s.io/v1beta1", "ClusterQueue"): Kind("kueue.x-k8s.io", "v1beta1", "clusterqueues"),
    ("kueue.x-k8s.io/v1beta1", "LocalQueue"): Kind("kueue.x-k8s.io", "v1beta1", "localqueues", True),
    ("scheduling.volcano.sh/v1beta1", "Queue"): Kind("scheduling.volcano.sh", "v1beta1", "queues"),
}
KINDS_OF = {
    "kueue": [k for k in KINDS if k[0].startswith("kueue.")],
    "volcano": [("scheduling.volcano.sh/v1beta1", "Queue")],
}
HASH_ANNOTATION = "gpupool.io/spec-hash"
VERBS = ("list", "create", "update", "delete")  # update = PUT (replace_*_custom_object)
RULES = sorted({(kind.group, kind.plural) for kind in KINDS.values()})


class QueueSync:
    """Make one cluster's managed queue objects of one format equal a rendered list."""

    def __init__(self, backend: KubernetesBackend):
        self.backend = backend
        self.custom = backend.custom
        self.namespace = backend.namespace

    def apply(self, fmt: str, objects: list[dict[str, Any]]) -> dict[str, int]:
        kinds = KINDS_OF[fmt]
        wanted: dict[tuple[str, str], dict[str, dict[str, Any]]] = {k: {} for k in kinds}
        for obj in objects:
            key = (obj["apiVersion"], obj["kind"])
            if key not in wanted:
                raise BackendError(f"queue sync: {key[1]} is not a {fmt} kind")
            wanted[key][obj["metadata"]["name"]] = obj
        counts = {"created": 0, "replaced": 0, "unchanged": 0, "deleted": 0}
        existing = {k: self._list(KINDS[k]) for k in kinds}
        for key in kinds:
            for name, obj in wanted[key].items():
                counts[self._put(KINDS[key], obj, existing[key].get(name))] += 1
        for key in reversed(kinds):
            for name in sorted(set(existing[key]) - set(wanted[key])):
                self._call("delete", KINDS[key], name)
                counts["deleted"] += 1
        return counts

    def _put(self, kind: Kind, obj: dict[str, Any], current: dict[str, Any] | None) -> str:
        name = obj["metadata"]["name"]
        if current is None:
            self._call("create", kind, None, body=_stamped(obj))
            return "created"
        if _same(current, obj):
            return "unchanged"
        version = current["metadata"]["resourceVersion"]
        self._call("replace", kind, name, body=_stamped(obj, resourceVersion=version))
        return "replaced"

    def _list(self, kind: Kind) -> dict[str, dict[str, Any]]:
        listed = self._call("list", kind, None, label_selector=MANAGED_SELECTOR) or {}
        return {o["metadata"]["name"]: o for o in listed.get("items") or []}

    def _call(self, verb: str, kind: Kind, name: str | None, **kwargs: Any) -> Any:
        scope = "namespaced" if kind.namespaced else "cluster"
        method = getattr(self.custom, f"{verb}_{scope}_custom_object")
        args: list[Any] = [kind.group, kind.version]
        if kind.namespaced:
            args.append(self.namespace)
        args.append(kind.plural)
        if "body" in kwargs and verb == "create":
            args.append(kwargs.pop("body"))
        if name is not None:
            args.append(name)
        if "body" in kwargs:
            args.append(kwargs.pop("body"))
        return self.backend._call(method, *args, **kwargs)


def spec_hash(obj: dict[str, Any]) -> str:
    text = json.dumps([obj.get("spec"), obj["metadata"].get("labels")], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _same(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Compared by the hash of what gpupool wrote, kept in an annotation: the API server
    fills defaults into a spec (Kueue's preemption, stopPolicy …), so comparing specs would
    replace every object on every sync, and a field gpupool dropped must still count."""
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    return annotations.get(HASH_ANNOTATION) == spec_hash(wanted)


def _stamped(obj: dict[str, Any], **meta: Any) -> dict[str, Any]:
    annotations = {**(obj["metadata"].get("annotations") or {}), HASH_ANNOTATION: spec_hash(obj)}
    return {**obj, "metadata": {**obj["metadata"], **meta, "annotations": annotations}}
