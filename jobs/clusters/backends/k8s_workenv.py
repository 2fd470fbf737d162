"""The job's working environment on Kubernetes (DESIGN §13), as pure manifest pieces: volumes and
mounts, the container's environment, the image pull secret, and a dev job's Service + Ingress.
No client, no Django: :mod:`jobs.clusters.backends.kubernetes` puts them into its manifests and sends them.

Checkpoint directory: the checkpoint storage is mounted a second time, read-write, at
``checkpoint.container_dir`` with ``subPath: checkpoint.subdir``. The kubelet creates a missing
``subPath`` directory before the container starts, so the job finds ``$GPUPOOL_CHECKPOINT_DIR``
there without a ``mkdir`` of its own (and writable even when the same storage is also among its
read-only mounts).

Dev ports: the Service selects the pod by :data:`NAME_LABEL`; the Ingress (ingress-nginx) asks the
portal before every request (``auth-url``, the portal's session cookie decides) and sends a browser
without a session to the portal's login page (``auth-signin``), back to the page it asked for.
Both carry an owner reference to the dev pod, so Kubernetes' garbage collector removes them with
it; ``cancel`` deletes them explicitly as well.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from jobs.clusters.backends.base import ARRAY_INDEX_ENV, Checkpoint, EnvVar, JobSpec, Mount

MANAGED_BY = "app.kubernetes.io/managed-by"
NAME_LABEL = "gpupool.io/name"
CHECKPOINT_ENV = "GPUPOOL_CHECKPOINT_DIR"
DNS_LABEL_MAX = 63
PORT_NAME = "dev"
AUTH_URL = "nginx.ingress.kubernetes.io/auth-url"
AUTH_SIGNIN = "nginx.ingress.kubernetes.io/auth-signin"
# nginx variables, filled in by ingress-nginx per request: the browser returns to the page it asked for.
SIGNIN_NEXT = "https://$host$escaped_request_uri"


# -- volumes


def dns_label(text: str, fallback: str = "storage") -> str:
    """A DNS-1123 label (lower-case alphanumerics and '-', alphanumeric at both ends, ≤ 63)."""
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower())[:DNS_LABEL_MAX].strip("-")
    return label or fallback


def _unique(base: str, taken: set[str]) -> str:
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[: DNS_LABEL_MAX - len(suffix)].rstrip("-") + suffix
    taken.add(name)
    return name


def volume_source(mount: Mount) -> dict[str, Any]:
    if mount.kind == "nfs":
        return {"nfs": {"server": mount.nfs_server, "path": mount.nfs_path, "readOnly": mount.read_only}}
    if mount.kind == "hostpath":
        # Directory: the pod fails to start rather than the kubelet creating an empty directory
        # on the node when the shared file system is not mounted there.
        return {"hostPath": {"path": mount.host_path, "type": "Directory"}}
    if mount.kind == "pvc":
        return {"persistentVolumeClaim": {"claimName": mount.claim_name, "readOnly": mount.read_only}}
    raise ValueError(f"unknown storage kind {mount.kind!r}")


def _source_key(mount: Mount) -> tuple[str, ...]:
    return (mount.kind, mount.nfs_server, mount.nfs_path, mount.host_path, mount.claim_name)


def volumes_for(spec: JobSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's ``volumes`` and the container's ``volumeMounts`` for the job's mounts and its
    checkpoint directory."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    taken: set[str] = set()
    writable: dict[tuple[str, ...], str] = {}  # a source already mounted read-write -> its volume
    for mount in spec.mounts:
        name = _unique(dns_label(mount.name), taken)
        volumes.append({"name": name, **volume_source(mount)})
        mounts.append({"name": name, "mountPath": mount.mount_path, "readOnly": mount.read_only})
        if not mount.read_only:
            writable.setdefault(_source_key(mount), name)
    if spec.checkpoint is not None:
        volume, mount = _checkpoint_mount(spec.checkpoint, writable, taken)
        if volume is not None:
            volumes.append(volume)
        mounts.append(mount)
    return volumes, mounts


def _checkpoint_mount(
    checkpoint: Checkpoint, writable: dict[tuple[str, ...], str], taken: set[str]
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    storage = checkpoint.mount
    name = writable.get(_source_key(storage))
    volume = None
    if name is None:  # not mounted, or only read-only: a volume of its own, always writable
        name = _unique(dns_label(f"{storage.name}-checkpoint"), taken)
        volume = {"name": name, **volume_source(replace(storage, read_only=False))}
    mount: dict[str, Any] = {"name": name, "mountPath": checkpoint.container_dir, "readOnly": False}
    subdir = checkpoint.subdir.strip("/")
    if subdir:
        mount["subPath"] = subdir
    return volume, mount


# -- environment


def literal(value: str) -> str:
    """``value`` as the container sees it: Kubernetes expands ``$(VAR)`` in env values and reduces
    ``$$`` to ``$``, so every ``$`` is doubled (its documented escape) to keep the value as typed."""
    return value.replace("$", "$$")


def env_for(spec: JobSpec) -> list[dict[str, Any]]:
    """The portal's variables first; a job variable of the same name is left out (the portal's
    win: they name the job, its size and its checkpoint). Secret values stay references."""
    env: list[dict[str, Any]] = [
        {"name": "GPUPOOL_JOB_ID", "value": str(spec.job_id)},
        {"name": "GPUPOOL_WORKERS", "value": str(spec.workers)},
    ]
    if spec.array_index is not None:
        env.append({"name": ARRAY_INDEX_ENV, "value": str(spec.array_index)})
    if spec.checkpoint is not None:
        env.append({"name": CHECKPOINT_ENV, "value": literal(spec.checkpoint.container_dir)})
    reserved = {e["name"] for e in env}
    env.extend(_env_entry(var) for var in spec.env if var.name not in reserved)
    return env


def _env_entry(var: EnvVar) -> dict[str, Any]:
    if var.secret:
        return {"name": var.name, "valueFrom": {"secretKeyRef": {"name": var.secret, "key": var.key}}}
    return {"name": var.name, "value": literal(var.value)}


def with_working_environment(pod: dict[str, Any], container: dict[str, Any], spec: JobSpec) -> None:
    """Add the job's volumes, environment and pull secret to a pod spec and its container."""
    container["env"] = env_for(spec)
    volumes, mounts = volumes_for(spec)
    if volumes:
        pod["volumes"] = volumes
    if mounts:
        container["volumeMounts"] = mounts
    if spec.pull_secret:
        pod["imagePullSecrets"] = [{"name": spec.pull_secret}]


# -- a dev job's port


def owner_reference(pod: dict[str, Any]) -> dict[str, Any]:
    """An owner reference to the dev pod (as stored: it carries the ``uid``)."""
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}


def _meta(spec: JobSpec, namespace: str, labels: dict[str, str], owner: dict[str, Any] | None) -> dict:
    meta: dict[str, Any] = {"name": spec.name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return meta


def build_service(
    spec: JobSpec, namespace: str, *, labels: dict[str, str], owner: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ClusterIP Service named like the job, in front of the dev pod's ``expose_port``."""
    port = spec.expose_port
    if not port:
        raise ValueError(f"{spec.name} exposes no port")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(spec, namespace, labels, owner),
        "spec": {
            "type": "ClusterIP",
            "selector": {NAME_LABEL: spec.name},
            "ports": [{"name": PORT_NAME, "protocol": "TCP", "port": port, "targetPort": port}],
        },
    }


def ingress_host(name: str, domain: str) -> str:
    return f"{name}.{domain.strip('.')}"


def auth_annotations(job_id: int, portal_url: str) -> dict[str, str]:
    portal = portal_url.rstrip("/")
    return {
        AUTH_URL: f"{portal}/jobs/{job_id}/access/auth/",
        AUTH_SIGNIN: f"{portal}/accounts/login/?next={SIGNIN_NEXT}",
    }


def build_ingress(
    spec: JobSpec,
    namespace: str,
    *,
    labels: dict[str, str],
    domain: str,
    portal_url: str,
    ingress_class: str = "nginx",
    tls_secret: str = "",
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An Ingress for ``<name>.<domain>`` to the job's Service, behind the portal's sign-in."""
    if not spec.expose_port:
        raise ValueError(f"{spec.name} exposes no port")
    if not (domain and portal_url):
        raise ValueError("an Ingress needs ingress_domain and portal_url (never without the portal's auth)")
    host = ingress_host(spec.name, domain)
    backend = {"service": {"name": spec.name, "port": {"number": spec.expose_port}}}
    path = {"path": "/", "pathType": "Prefix", "backend": backend}
    ingress_spec: dict[str, Any] = {
        "ingressClassName": ingress_class,
        "rules": [{"host": host, "http": {"paths": [path]}}],
    }
    if tls_secret:
        ingress_spec["tls"] = [{"hosts": [host], "secretName": tls_secret}]
    meta = _meta(spec, namespace, labels, owner)
    meta["annotations"] = auth_annotations(spec.job_id, portal_url)
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": ingress_spec}
