"""The subset of kustomize that deploy/kubernetes uses, in plain Python, so the manifests render
on any machine; tests/deploy/test_manifests.py checks that it renders exactly what
``kubectl kustomize`` (kustomize v5) does wherever kubectl exists (always under CI).

Supported: ``resources`` (files and kustomization directories), ``namespace`` (with the
RoleBinding subject rule below), ``labels`` (``pairs`` on metadata only), ``images``
(``newName``/``newTag``), ``replicas`` and ``patches`` whose patch is a file of objects merged
into the object of the same kind and name (maps merge, everything else replaces — a patch
here never touches a list). Anything else in a kustomization fails loudly, so the two
renderers cannot drift apart silently.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

SUPPORTED = {"apiVersion", "kind", "namespace", "labels", "resources", "images", "replicas", "patches"}
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PersistentVolume",
    "StorageClass",
    "PriorityClass",
}
SCALABLE_KINDS = {"Deployment", "StatefulSet", "ReplicaSet"}
POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}

Obj = dict[str, Any]


def render(directory: Path) -> list[Obj]:
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(spec) - SUPPORTED
    if unknown:
        raise ValueError(f"{directory}: kustomization fields this renderer does not know: {sorted(unknown)}")
    objects: list[Obj] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        objects += render(path) if path.is_dir() else _load(path)
    for patch in spec.get("patches", []):
        _apply_patch_file(objects, directory / patch["path"])
    if "namespace" in spec:
        _set_namespace(objects, spec["namespace"])
    for label in spec.get("labels", []):
        if label.get("includeSelectors") or label.get("includeTemplates"):
            raise ValueError("labels: only metadata labels are supported")
        for obj in objects:
            obj["metadata"].setdefault("labels", {}).update(label["pairs"])
    for image in spec.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    for replicas in spec.get("replicas", []):
        [target] = [
            o for o in objects if o["metadata"]["name"] == replicas["name"] and o["kind"] in SCALABLE_KINDS
        ]
        target["spec"]["replicas"] = replicas["count"]
    return objects


def _load(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _merge(target: Any, patch: Any) -> Any:
    if isinstance(target, dict) and isinstance(patch, dict):
        merged = dict(target)
        for key, value in patch.items():
            merged[key] = _merge(target.get(key), value)
        return merged
    return copy.deepcopy(patch)


def _apply_patch_file(objects: list[Obj], path: Path) -> None:
    for patch in _load(path):
        key = (patch["kind"], patch["metadata"]["name"])
        [index] = [i for i, o in enumerate(objects) if (o["kind"], o["metadata"]["name"]) == key]
        objects[index] = _merge(objects[index], patch)


def _set_namespace(objects: list[Obj], namespace: str) -> None:
    # kustomize moves ServiceAccount subjects along: those in "default" and those in a namespace
    # the objects are moved out of.
    moved_from = {"default"}
    for obj in objects:
        if obj["kind"] not in CLUSTER_SCOPED:
            moved_from.add(obj["metadata"].get("namespace", "default"))
            obj["metadata"]["namespace"] = namespace
    for obj in objects:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for subject in obj.get("subjects", []):
                if subject.get("kind") == "ServiceAccount" and subject.get("namespace") in moved_from:
                    subject["namespace"] = namespace


def pod_specs(obj: Obj) -> list[Obj]:
    if obj["kind"] == "Pod":
        return [obj["spec"]]
    if obj["kind"] in POD_TEMPLATE_KINDS:
        return [obj["spec"]["template"]["spec"]]
    if obj["kind"] == "CronJob":
        return [obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]]
    return []


def containers(obj: Obj) -> list[Obj]:
    return [c for pod in pod_specs(obj) for c in pod.get("initContainers", []) + pod.get("containers", [])]


def split_image(image: str) -> tuple[str, str | None]:
    name, sep, tag = image.rpartition(":")
    if not sep or "/" in tag:  # "host:5000/name" has a port, not a tag
        return image, None
    return name, tag


def _set_image(obj: Obj, rule: dict[str, str]) -> None:
    for container in containers(obj):
        name, tag = split_image(container["image"])
        if name != rule["name"]:
            continue
        name = rule.get("newName", name)
        tag = rule.get("newTag", tag)
        container["image"] = f"{name}:{tag}" if tag else name
