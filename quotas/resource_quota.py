"""A ``ResourceQuota`` per project namespace, rendered from the quota tree (DESIGN §11): where no
Kueue / Volcano / YuniKorn queues hold native submissions back, Kubernetes' own quota admission
caps what a project's namespaces may ask for. Pure: a :class:`~quotas.queues.TreeSnapshot`,
``now`` and the namespaces mapped to projects in; manifest dicts out.

Values: for each accelerator resource, ``requests.<resource>`` = the project's effective quota
plus its borrow limit at ``now`` (windows and loans applied), summed over the flavors of the
cluster that share that resource name. Only the ``requests.`` form exists for extended
resources: Kubernetes does not overcommit them, so its quota evaluator accepts no bare or
``limits.`` name for them (kubernetes/kubernetes ``pkg/quota/v1/evaluator/core/pods.go``,
``isExtendedResourceNameForQuota``). A resource is left out — not capped — when any of those
flavors has no borrow limit for the project, or no quota node at all (the portal's rules put no
cap there either, §3 rule 2). Whole devices: a pod's extended-resource request is a whole
number, so a fractional quota (shared GPUs) is rounded down — the namespace never gets more than
``q + b``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal

from .effective import effective_limits
from .queues import MANAGED_BY, OWNER_LABEL, TreeSnapshot, flavor_label_value

NAME = "gpupool-quota"
API_VERSION = "v1"
KIND = "ResourceQuota"


def project_caps(snapshot: TreeSnapshot, now: datetime) -> dict[str, dict[str, int]]:
    """Project code → {extended resource → whole devices it may request}; resources without a
    cap left out."""
    resources = {f.name: f.resource for f in snapshot.flavors}
    sums: dict[str, dict[str, Decimal]] = defaultdict(dict)
    uncapped: dict[str, set[str]] = defaultdict(set)
    for ref in snapshot.quotas:
        if ref.kind != "project" or ref.flavor not in resources:
            continue
        limits = effective_limits(
            ref.base, at=now, zone=snapshot.zone, windows=ref.windows, loans_in=ref.loans_in,
            loans_out=ref.loans_out,
        )
        resource = resources[ref.flavor]
        if limits.borrow_limit is None:
            uncapped[ref.code].add(resource)
            continue
        total = sums[ref.code].get(resource, Decimal(0))
        sums[ref.code][resource] = total + max(Decimal(0), limits.quota + limits.borrow_limit)
    held = {(r.code, r.flavor) for r in snapshot.quotas if r.kind == "project"}
    caps: dict[str, dict[str, int]] = {}
    for code, by_resource in sums.items():
        caps[code] = {
            resource: int(value.to_integral_value(ROUND_FLOOR))
            for resource, value in sorted(by_resource.items())
            if resource not in uncapped[code]
            # every flavor with this resource name must have a node of this project
            and all((code, f) in held for f, r in resources.items() if r == resource)
        }
    return caps


def render_resource_quotas(
    snapshot: TreeSnapshot, now: datetime, namespaces: Mapping[str, str]
) -> list[dict]:
    """One ResourceQuota named ``gpupool-quota`` per namespace (→ project code) whose project has
    a cap; namespaces of projects without one get none."""
    caps = project_caps(snapshot, now)
    objects = []
    for namespace, code in sorted(namespaces.items()):
        hard = caps.get(code) or {}
        if not hard:
            continue
        objects.append({
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": NAME,
                "namespace": namespace,
                "labels": {**MANAGED_BY, OWNER_LABEL: flavor_label_value(code)},  # a valid label value
            },
            "spec": {"hard": {f"requests.{resource}": str(n) for resource, n in hard.items()}},
        })
    return objects
