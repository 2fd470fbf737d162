"""The quota tree rendered as Apache YuniKorn's queue configuration (``queues.yaml``), for
centres that run YuniKorn instead of Kueue or Volcano (docs/backends.md, "YuniKorn"). Pure:
fed the same frozen :class:`~quotas.queues.TreeSnapshot` as the Kueue / Volcano renderers, the
namespaces mapped to projects and ``now``; returns the configuration as a dict (and its YAML
text). No Django, no client.

The contract is yunikorn-core's ``pkg/common/configs/config.go`` (field names: go-yaml's
lower-cased field names, decoded strictly) and ``configvalidator.go`` (the rules the scheduler
and its admission webhook reject a configuration for); tests/backends/yunikorn_schema.py
re-implements them.

Shape (one partition, ``default``)::

    root                          submitacl '*': placement decides, not ACLs
    ├── gpd-<department>          parent; nested departments below it
    │   └── gp-<project>          parent; guaranteed / max of the project
    │       └── <namespace>       leaf, one per Kubernetes namespace mapped to the project
    └── <portal namespace>        leaf for the portal's own pods (admitted by the portal)

Placement: YuniKorn places an *application* by the first rule that yields a queue; a rule with
``create: false`` whose queue does not exist does not match, and the next rule is tried. So one
rule per project with mapped namespaces, ``tag`` (the application's ``namespace`` tag, set by
the k8s shim) under the parent rule ``fixed`` = the project's queue, puts a namespace's pods in
the leaf of its name under the one project that has such a leaf. A rule cannot filter on the
namespace itself (rule filters match users and groups only), hence the leaf per namespace and
the project as a parent queue. The last rule, ``tag`` without a parent, matches only the portal
namespace's leaf ``root.<namespace>``; pods of a namespace mapped to no project match nothing
and YuniKorn rejects them (DESIGN §11: an admin maps the namespace first).

Values per queue and Kubernetes resource name (flavors sharing a resource name add up, as in
Volcano): ``guaranteed`` = the *share* of :func:`quotas.queues.shares` (the effective quota at
``now``, windows and loans applied, scaled down only where a parent's share is smaller than its
children's quotas — YuniKorn requires Σ children's guaranteed ≤ the parent's); ``max`` = the
effective quota + borrow limit, none when any flavor of that resource has no borrow limit, and
never above an ancestor's max (YuniKorn requires a parent's max ≥ its children's, and applies
the parent's anyway). YuniKorn quantities of extended resources are whole numbers: a fractional
(shareable flavor) guaranteed and max are both rounded down, as the Slurm and ResourceQuota caps
are — rounding a max up would let a queue hold up to one device more than the portal allows.
YuniKorn ignores a max whose every value is 0 (the queue would be capped only by its parent), so
such a max carries :data:`ZERO_MAX_GUARD` as well.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal

import yaml

from .queues import (
    FlavorRef,
    Share,
    TreeSnapshot,
    _children,
    _held,
    department_queue_name,
    device_resource,
    fair_share_weights,
    machine_amounts,
    shares,
)
from .queues import project_queue_name as project_queue_name

CONFIGMAP = "yunikorn-configs"  # k8shim pkg/common/constants: ConfigMapName
POLICY_GROUP = "queues"  # k8shim pkg/conf: DefaultPolicyGroup → the key "queues.yaml"
PARTITION = "default"
ROOT = "root"
# yunikorn-core pkg/common/configs/configvalidator.go: QueueNameRegExp
QUEUE_NAME = re.compile(r"^[a-zA-Z0-9_:#/@-]{1,64}$")
HEADER = (
    '# Rendered by gpupool from its quota tree (docs/backends.md, "YuniKorn").\n'
    "# Edits here are overwritten by the next sync: change quotas in the portal.\n"
)

# yunikorn-core pkg/scheduler/objects/queue.go setResources applies a max only when
# StrictlyGreaterThanZero: a max of all zeros is dropped and the queue is capped by its parent
# alone. One positive resource type no pod requests keeps the zeros in force (a type absent from
# a request always fits), so a cap that rounds down to 0 devices stays 0.
ZERO_MAX_GUARD = "gpupool.io/zero-max-guard"

Amounts = dict[str, Decimal]  # resource name → amount
Max = dict[str, Decimal | None]  # resource name → amount, None: no limit


def policy_key(group: str = POLICY_GROUP) -> str:
    return f"{group}.yaml"


def queue_path(*names: str) -> str:
    return ".".join((ROOT, *names))


# -- values


def _amounts(held: list[tuple[FlavorRef, Share]]) -> tuple[Amounts, Max]:
    """Guaranteed and max per resource name of one owner's flavors."""
    guaranteed: Amounts = {}
    maximum: Max = {}
    for flavor, share in held:
        borrow = share.limits.borrow_limit
        top = None if borrow is None else share.limits.quota + borrow
        device = device_resource(flavor)  # None: a cpu flavor, counted in vcore below
        guarantees = {device: share.share} if device else {}
        tops = {device: top} if device else {}
        # The machine's resources the flavor's units come with (YuniKorn calls cpu "vcore").
        for name, amount in machine_amounts(flavor, share.share).items():
            guarantees[YUNIKORN_NAMES.get(name, name)] = amount
        for name in machine_amounts(flavor, Decimal(0)):
            tops[YUNIKORN_NAMES.get(name, name)] = None if top is None else machine_amounts(flavor, top)[name]
        for r, value in guarantees.items():
            guaranteed[r] = guaranteed.get(r, Decimal(0)) + value
        for r, value in tops.items():
            if value is None or (r in maximum and maximum[r] is None):
                maximum[r] = None  # one flavor without a borrow limit: the resource has none
            else:
                maximum[r] = (maximum.get(r) or Decimal(0)) + value
    return guaranteed, maximum


def _capped(own: Max, inherited: Amounts) -> Amounts:
    """The owner's max, each never above the nearest ancestor's (``inherited``)."""
    out: Amounts = {}
    for r, value in own.items():
        if value is not None:
            out[r] = min(value, inherited[r]) if r in inherited else value
    return out


WEIGHT_PROPERTY = "gpupool.io/fair-share-weight"

# Kubernetes' machine resources as YuniKorn names them, with the suffix of the unit
# quotas.queues.machine_amounts counts them in (millicores, MiB, GiB).
YUNIKORN_NAMES = {"cpu": "vcore"}
SUFFIXES = {"vcore": "m", "memory": "Mi", "ephemeral-storage": "Gi"}


def _whole(value: Decimal, rounding: str, resource: str = "") -> str:
    return str(int(value.to_integral_value(rounding))) + SUFFIXES.get(resource, "")


def _resources(guaranteed: Amounts, maximum: Amounts) -> dict:
    out: dict = {}
    if guaranteed:
        out["guaranteed"] = {r: _whole(v, ROUND_FLOOR, r) for r, v in sorted(guaranteed.items())}
    if maximum:
        # Down, as every cap the portal renders: a limit never lets more through than q + b.
        out["max"] = {r: _whole(v, ROUND_FLOOR, r) for r, v in sorted(maximum.items())}
        if all(int(v.rstrip("mMiG")) == 0 for v in out["max"].values()):
            out["max"][ZERO_MAX_GUARD] = "1"
    return out


# -- the queue tree


class _Builder:
    def __init__(self, snapshot: TreeSnapshot, now: datetime, namespaces: dict[str, list[str]]) -> None:
        self.table = shares(snapshot, now)
        self.weights = fair_share_weights(snapshot, self.table)
        self.flavors = sorted(snapshot.flavors, key=lambda f: f.name)
        self.children = _children(snapshot)
        self.namespaces = namespaces  # project code → its namespaces
        self.rules: list[dict] = []

    def queue(self, kind: str, code: str, path: tuple[str, ...], inherited: Amounts) -> dict:
        name = department_queue_name(code) if kind == "department" else project_queue_name(code)
        path = (*path, name)
        guaranteed, own_max = _amounts(_held(self.table, self.flavors, kind, code))
        maximum = _capped(own_max, inherited)
        below = {**inherited, **maximum}
        queue: dict = {"name": name, "parent": True}
        # YuniKorn has no queue weight: it orders sibling queues by usage over ``guaranteed``,
        # which is the quota share already. The weight is carried for the reader and for the
        # day admin weights differ from the quota (docs/backends.md "YuniKorn").
        queue["properties"] = {WEIGHT_PROPERTY: str(self.weights.get((kind, code), 1))}
        resources = _resources(guaranteed, maximum)
        if resources:
            queue["resources"] = resources
        if kind == "department":
            children = [self.queue(k, c, path, below) for k, c in self.children[code]]
        else:
            children = [{"name": _checked(ns)} for ns in self.namespaces.get(code, [])]
            if children:
                self.rules.append(_namespace_rule(queue_path(*path)))
        if children:
            queue["queues"] = _unique(children, queue_path(*path))
        return queue


def _namespace_rule(project_path: str) -> dict:
    return {
        "name": "tag",
        "value": "namespace",
        "create": False,
        "parent": {"name": "fixed", "value": project_path},
    }


def _checked(name: str) -> str:
    if not QUEUE_NAME.match(name):
        raise ValueError(f"{name!r} is not a valid YuniKorn queue name")
    return name


def _unique(queues: list[dict], where: str) -> list[dict]:
    """YuniKorn refuses siblings whose names differ only in case."""
    seen: set[str] = set()
    for q in queues:
        key = q["name"].lower()
        if key in seen:
            raise ValueError(f"two owners render to the queue {where}.{q['name']}: rename one of their codes")
        seen.add(key)
    return queues


def _by_project(snapshot: TreeSnapshot, namespaces: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Namespace → project pairs as project → sorted namespaces; the portal's own namespace and
    namespaces of projects not in the snapshot (inactive) are left out."""
    active = {code for code, _ in snapshot.projects}
    out: dict[str, list[str]] = defaultdict(list)
    for namespace, project in sorted(set(namespaces)):
        if project in active and namespace != snapshot.namespace:
            out[project].append(namespace)
    return out


def render_yunikorn(
    snapshot: TreeSnapshot, now: datetime, namespaces: Iterable[tuple[str, str]] = ()
) -> dict:
    """The scheduler configuration (``SchedulerConfig``) of the tree at ``now``; ``namespaces``
    are (Kubernetes namespace, project code) pairs."""
    builder = _Builder(snapshot, now, _by_project(snapshot, namespaces))
    tops = [builder.queue(k, c, (), {}) for k, c in builder.children[None] if k == "department"]
    portal = {"name": _checked(snapshot.namespace)}
    root = {"name": ROOT, "submitacl": "*", "queues": _unique([*tops, portal], ROOT)}
    rules = [*builder.rules, {"name": "tag", "value": "namespace", "create": False}]
    return {"partitions": [{"name": PARTITION, "placementrules": rules, "queues": [root]}]}


def dump(config: dict) -> str:
    """The configuration as the text of the ConfigMap key: same input, same bytes (the sync
    compares texts)."""
    return HEADER + yaml.safe_dump(config, sort_keys=False, default_flow_style=False, allow_unicode=True)
