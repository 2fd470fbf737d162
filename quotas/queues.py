"""The quota tree rendered as the in-cluster scheduler's own queue objects, for centres that run
Kueue or Volcano (docs/backends.md, "Scheduler integration: Kueue and Volcano"). Pure: fed a
frozen :class:`TreeSnapshot` and ``now``, it returns manifest dicts; no Django, no client.

Targets (the vendored CRD schemas under tests/backends/schemas/ are the contract):

* Kueue: ``ResourceFlavor``, ``ClusterQueue``, ``LocalQueue`` in ``kueue.x-k8s.io/v1beta1`` and
  hierarchical ``Cohort`` in ``kueue.x-k8s.io/v1alpha1`` (``spec.parent``; Kueue 0.9–0.13).
* Volcano: hierarchical ``Queue`` in ``scheduling.volcano.sh/v1beta1`` (``spec.parent``).

Values are the *effective* quota at ``now`` (windows and loans applied, ``quotas.effective``).
Kueue has no overcommit ratio and both schedulers assume a parent's share covers its children,
so each node gets a *share*: its effective quota, scaled down (largest remainder, in whole units
of the flavor) where its parent's share is smaller than the children's quotas add up to. The
part of a quota above its share becomes borrowing headroom, so nothing a job may use is lost.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_FLOOR, Decimal
from zoneinfo import ZoneInfo

from .effective import Limits, LoanSpan, Window, effective_limits

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpupool"}
OWNER_LABEL = "gpupool.io/owner"  # department or project code the object renders
FLAVOR_LABEL = "gpupool.io/flavor"  # node label naming the portal flavor of a node's GPUs
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE = "kueue.x-k8s.io/v1beta1"
KUEUE_COHORT = "kueue.x-k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
ROOT_COHORT = "gpupool"  # the pool: every department borrows through it
# Where the Kubernetes backend creates jobs unless a cluster's config names another namespace. Never
# the namespace the portal itself runs in, which holds its Secret (DATABASE_URL, SECRET_KEY):
# a pod can reference any Secret of its own namespace (issue 32 item 17, docs/environment.md).
JOBS_NAMESPACE = "gpupool-jobs"
SECRETS_NAMESPACE = "gpupool"  # the base manifests' namespace, when the process is not told
VOLCANO_ROOT = "root"  # Volcano's built-in root queue (the scheduler creates it)
FORMATS = ("kueue", "volcano")


def secrets_namespace() -> str:
    """The namespace that holds the portal's own secrets: the one its pods run in, which the
    manifests pass from the downward API as GPUPOOL_SECRETS_NAMESPACE."""
    return os.environ.get("GPUPOOL_SECRETS_NAMESPACE") or SECRETS_NAMESPACE


def jobs_namespace_problem(namespace: str) -> str | None:
    """Why jobs may not run in ``namespace`` (English, for logs and exceptions), or None."""
    if namespace == secrets_namespace():
        return (
            f"namespace {namespace!r} holds the portal's secrets (GPUPOOL_SECRETS_NAMESPACE): jobs never "
            f"run there; give the cluster's config another \"namespace\" (default {JOBS_NAMESPACE})"
        )
    return None


@dataclass(frozen=True, slots=True)
class FlavorRef:
    name: str
    resource: str  # Kubernetes extended resource, e.g. nvidia.com/gpu, nvidia.com/mig-1g.10gb
    capacity: Decimal  # healthy GPUs (units of the flavor) in the pool
    shareable: bool = False  # quotas may be fractional (gpu_milli requests)
    # What one unit comes with (DESIGN §15, jobs.requests.flavor_share): (field, amount) pairs of
    # cpu_millicores, memory_mib, local_disk_gib. Pods ask them (requests == limits), so the
    # queues give each node of the tree its quota's worth of them too; () renders GPUs only.
    per_unit: tuple[tuple[str, int], ...] = ()
    # Normalised cards one unit is (DESIGN §14): its card fraction (a MIG slice 1/7) × its relative
    # throughput against the centre's reference card; what the fair-share weights count.
    normalised_per_unit: Decimal = Decimal(1)


@dataclass(frozen=True, slots=True)
class QuotaRef:
    flavor: str
    kind: str  # "department" | "project"
    code: str
    base: Limits
    windows: tuple[Window, ...] = ()
    loans_in: tuple[LoanSpan, ...] = ()
    loans_out: tuple[LoanSpan, ...] = ()


@dataclass(frozen=True, slots=True)
class TreeSnapshot:
    flavors: tuple[FlavorRef, ...]
    departments: tuple[tuple[str, str | None], ...]  # (code, parent code)
    projects: tuple[tuple[str, str], ...]  # (code, department code), active projects only
    quotas: tuple[QuotaRef, ...]
    zone: ZoneInfo = field(default_factory=lambda: ZoneInfo("Asia/Shanghai"))
    namespace: str = JOBS_NAMESPACE  # where the Kubernetes backend creates jobs (LocalQueues live there)
    # Codes of the projects whose queueing strategy is strict FIFO (docs/scheduling.md): their
    # ClusterQueue is StrictFIFO (mutable in place since Kueue 0.7, kueue#1873), the rest
    # BestEffortFIFO. Kueue has no aging bound; the portal's engine applies it to its own jobs.
    strict_fifo: frozenset[str] = frozenset()
    # Admins' fair-share weights (DESIGN §16, ``quotas.FairShareWeight``): ((kind, code), weight)
    # pairs, used instead of the quota's normalised cards where set.
    weights: tuple[tuple[tuple[str, str], Decimal], ...] = ()


@dataclass(frozen=True, slots=True)
class Share:
    """One quota node of one flavor as the schedulers see it at ``now``."""

    limits: Limits  # effective quota, borrow and lend limit
    share: Decimal  # the part its parent's share covers (Kueue nominal, Volcano deserved)
    remainder: Decimal = Decimal(0)  # own share its children do not hold (a cohort's own nominal)

    @property
    def borrowing(self) -> Decimal | None:
        """Headroom above the share: quota beyond it plus the borrow limit (None = no limit)."""
        b = self.limits.borrow_limit
        return None if b is None else self.limits.quota + b - self.share

    @property
    def lending(self) -> Decimal | None:
        """What may be lent: the share less the never-lent part (None = all of it)."""
        if self.limits.lend_limit is None:
            return None
        return self.share - self.reserved

    @property
    def reserved(self) -> Decimal:
        """The never-lent part (quota − lend limit) within the share. A loan out can leave the
        quota below the lend limit: then nothing is held back."""
        lend = self.limits.lend_limit
        if lend is None:
            return Decimal(0)
        return min(self.share, max(Decimal(0), self.limits.quota - lend))


# -- names


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:60].rstrip("-") or "x"


def flavor_object_name(flavor: str) -> str:
    return f"gp-{_slug(flavor)}"


def flavor_label_value(flavor: str) -> str:
    """The flavor's name as a label value (at most 63 of [A-Za-z0-9_.-], alphanumeric at both ends)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", flavor)[:63].strip("-_.")


def department_queue_name(code: str) -> str:
    # "gpd-" and "gp-" differ at their third character, so a department and a project with
    # the same code never render to the same name.
    return f"gpd-{_slug(code)}"


def project_queue_name(code: str) -> str:
    """The ClusterQueue / LocalQueue (Kueue) or Queue (Volcano) that a project's jobs go to."""
    return f"gp-{_slug(code)}"


# -- quantities


def _unit(flavor: FlavorRef) -> Decimal:
    return Decimal("0.001") if flavor.shareable else Decimal(1)


def quantity(value: Decimal) -> int | str:
    """A Kubernetes quantity: whole units as integers, fractions (shared GPUs) in milli units."""
    if value == value.to_integral_value():
        return int(value)
    return f"{int((value * 1000).to_integral_value(ROUND_FLOOR))}m"


# The machine's resources pods ask beside their GPUs: Kubernetes name, FlavorRef.per_unit field,
# quantity suffix (millicores, MiB, GiB).
MACHINE = (("cpu", "cpu_millicores", "m"), ("memory", "memory_mib", "Mi"),
           ("ephemeral-storage", "local_disk_gib", "Gi"))


MACHINE_NAMES = frozenset(name for name, _f, _s in MACHINE)


def device_resource(flavor: FlavorRef) -> str | None:
    """The flavor's own device resource, or None for a ``cpu`` flavor (its resource is the
    machine's ``cpu``: its units reach the queues through ``per_unit``, one core = 1000
    millicores, never as a second ``cpu`` beside the machine's)."""
    return None if flavor.resource in MACHINE_NAMES else flavor.resource


def machine_resources(flavors: Iterable[FlavorRef]) -> list[str]:
    """The machine's resources any of ``flavors`` has a per-unit share of, in MACHINE's order."""
    known = {f for flavor in flavors for f, _amount in flavor.per_unit}
    return [name for name, field_, _suffix in MACHINE if field_ in known]


def machine_amounts(flavor: FlavorRef, units: Decimal) -> dict[str, Decimal]:
    """``units`` of the flavor's worth of each machine resource it has a share of, in the
    resource's own unit (millicores, MiB, GiB), rounded down like every cap the portal renders."""
    per = dict(flavor.per_unit)
    return {
        name: (units * per[field_]).to_integral_value(ROUND_FLOOR)
        for name, field_, _suffix in MACHINE if per.get(field_) is not None
    }


def machine_quantity(resource: str, value: Decimal) -> str:
    suffix = next(s for name, _f, s in MACHINE if name == resource)
    return f"{int(value)}{suffix}"


def _split(total: Decimal, weights: list[Decimal], unit: Decimal) -> list[Decimal]:
    """``total`` split in proportion to ``weights`` in whole ``unit``s (largest remainder;
    ties go to the earlier child), so the parts add up to ``total`` exactly."""
    whole = sum(weights, Decimal(0))
    if whole <= 0:
        return [Decimal(0)] * len(weights)
    exact = [total * w / whole / unit for w in weights]
    parts = [e.to_integral_value(ROUND_FLOOR) for e in exact]
    left = int((total / unit).to_integral_value(ROUND_FLOOR) - sum(parts))
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - parts[i]), i))
    for i in order[:left]:
        parts[i] += 1
    return [p * unit for p in parts]


# -- shares


def shares(snapshot: TreeSnapshot, now: datetime) -> dict[tuple[str, str, str], Share]:
    """(flavor, kind, code) → Share, for every quota node of the snapshot at ``now``."""
    result: dict[tuple[str, str, str], Share] = {}
    flavors = {f.name: f for f in snapshot.flavors}
    for name, flavor in flavors.items():
        limits = _effective(snapshot, name, now)
        result.update(_flavor_shares(snapshot, flavor, limits))
    return result


def share_weight(cards: Decimal) -> int:
    """A department's or project's fair-share weight (DESIGN §16) from its effective quota in
    normalised cards (quota × card fraction × relative throughput, summed over its GPU flavors):
    whole cards, at least 1 — a weight of 0 would mean "never ahead" in Slurm and Kueue alike.
    The Slurm sync (``Fairshare``) and the Kueue / Volcano / YuniKorn renderings all use it, so
    they carry the same number; admin weights are to replace this default where set."""
    return max(1, int(cards.to_integral_value(ROUND_FLOOR)))


def fair_share_weights(snapshot: TreeSnapshot, table: dict) -> dict[tuple[str, str], int]:
    """(kind, code) → :func:`share_weight` of the effective quotas in ``table`` (:func:`shares`),
    or of an admin's weight where one is set; an owner with neither is absent (weight 1)."""
    flavors = {f.name: f for f in snapshot.flavors}
    cards: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    for (name, kind, code), s in table.items():
        if device_resource(flavors[name]) is not None:
            cards[(kind, code)] += s.limits.quota * flavors[name].normalised_per_unit
    cards.update(dict(snapshot.weights))
    return {key: share_weight(total) for key, total in cards.items()}


def _effective(snapshot: TreeSnapshot, flavor: str, now: datetime) -> dict[tuple[str, str], Limits]:
    return {
        (q.kind, q.code): effective_limits(
            q.base, at=now, zone=snapshot.zone, windows=q.windows, loans_in=q.loans_in, loans_out=q.loans_out
        )
        for q in snapshot.quotas
        if q.flavor == flavor
    }


def _children(snapshot: TreeSnapshot) -> dict[str | None, list[tuple[str, str]]]:
    children: dict[str | None, list[tuple[str, str]]] = defaultdict(list)
    for code, parent in sorted(snapshot.departments):
        children[parent].append(("department", code))
    for code, department in sorted(snapshot.projects):
        children[department].append(("project", code))
    return children


def _flavor_shares(
    snapshot: TreeSnapshot, flavor: FlavorRef, limits: dict[tuple[str, str], Limits]
) -> dict[tuple[str, str, str], Share]:
    children = _children(snapshot)
    out: dict[tuple[str, str, str], Share] = {}

    def walk(parent: str | None, available: Decimal | None) -> Decimal:
        """Shares of ``parent``'s children within ``available`` (None: no bound); their sum."""
        held = [c for c in children[parent] if c in limits]
        quotas = [limits[c].quota for c in held]
        if available is None or sum(quotas, Decimal(0)) <= available:
            parts = quotas  # the parent covers every child whole
        else:
            parts = _split(available, quotas, _unit(flavor))
        for key, part in zip(held, parts, strict=True):
            below = walk(key[1], part) if key[0] == "department" else part
            out[(flavor.name, *key)] = Share(limits[key], part, max(Decimal(0), part - below))
        # Children of a department without quota of this flavor stand on their own.
        for key in children[parent]:
            if key not in limits and key[0] == "department":
                walk(key[1], None)
        return sum(parts, Decimal(0))

    walk(None, None)
    return out


def pool_remainder(
    snapshot: TreeSnapshot, table: dict[tuple[str, str, str], Share], flavor: FlavorRef
) -> Decimal:
    """Healthy capacity no top-level department holds: anyone may borrow it."""
    tops = [code for code, parent in snapshot.departments if parent is None]
    held = sum(
        (
            table[(flavor.name, "department", c)].share
            for c in tops
            if (flavor.name, "department", c) in table
        ),
        Decimal(0),
    )
    return max(Decimal(0), flavor.capacity - held)


def _held(table: dict, flavors: list[FlavorRef], kind: str, code: str) -> list[tuple[FlavorRef, Share]]:
    """The flavors an owner holds quota of, with its share of each."""
    return [(f, table[(f.name, kind, code)]) for f in flavors if (f.name, kind, code) in table]


# -- Kueue


def _meta(name: str, owner: str | None = None, namespace: str | None = None) -> dict:
    labels = dict(MANAGED_BY)
    if owner:
        labels[OWNER_LABEL] = _slug(owner)
    meta: dict = {"name": name, "labels": labels}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _kueue_resource(flavor: FlavorRef, nominal: Decimal, share: Share | None = None) -> list[dict]:
    """The flavor's entries: its device resource, then the machine's resources it has a share of,
    each scaled from the same quota, borrowing and lending limits."""
    entry: dict = {"name": flavor.resource, "nominalQuota": quantity(nominal)}
    limits = {}
    if share is not None:
        if share.borrowing is not None:
            limits["borrowingLimit"] = share.borrowing
        if share.lending is not None:
            limits["lendingLimit"] = share.lending
    entry.update({k: quantity(v) for k, v in limits.items()})
    entries = [entry] if device_resource(flavor) else []
    for name, amount in machine_amounts(flavor, nominal).items():
        machine = {"name": name, "nominalQuota": machine_quantity(name, amount)}
        for key, value in limits.items():
            machine[key] = machine_quantity(name, machine_amounts(flavor, value)[name])
        entries.append(machine)
    return entries


def _resource_groups(entries: Iterable[tuple[FlavorRef, list[dict]]]) -> list[dict]:
    """One group per extended resource (Kueue: a resource belongs to one group), its flavors by
    name. Where flavors carry the machine's resources (cpu, memory: one group may cover them),
    every resource is in one group and each flavor lists all of it, in the group's order, with
    nothing of the devices it does not have."""
    entries = sorted(entries, key=lambda e: (e[0].resource, e[0].name))
    machine = machine_resources(f for f, _ in entries)
    if not machine:
        groups: dict[str, list[dict]] = defaultdict(list)
        for flavor, resources in entries:
            groups[flavor.resource].append({"name": flavor_object_name(flavor.name), "resources": resources})
        return [{"coveredResources": [r], "flavors": flavors} for r, flavors in sorted(groups.items())]
    covered = sorted({r for f, _ in entries if (r := device_resource(f))}) + machine
    flavors = []
    for flavor, resources in entries:
        by_name = {r["name"]: r for r in resources}
        listed = [by_name.get(r) or {"name": r, "nominalQuota": 0} for r in covered]
        flavors.append({"name": flavor_object_name(flavor.name), "resources": listed})
    return [{"coveredResources": covered, "flavors": flavors}]


def render_kueue(snapshot: TreeSnapshot, now: datetime) -> list[dict]:
    table = shares(snapshot, now)
    flavors = sorted(snapshot.flavors, key=lambda f: f.name)
    objects: list[dict] = [
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": _meta(flavor_object_name(f.name)),
            "spec": {"nodeLabels": {FLAVOR_LABEL: flavor_label_value(f.name)}},
        }
        for f in flavors
    ]
    root_groups = _resource_groups(
        (f, _kueue_resource(f, pool_remainder(snapshot, table, f))) for f in flavors
    )
    objects.append(_cohort(ROOT_COHORT, None, root_groups, owner=None))
    weights = fair_share_weights(snapshot, table)
    for code, parent in _departments_top_down(snapshot):
        held = _held(table, flavors, "department", code)
        groups = _resource_groups((f, _kueue_resource(f, s.remainder, s)) for f, s in held)
        objects.append(
            _cohort(
                department_queue_name(code),
                department_queue_name(parent) if parent else ROOT_COHORT,
                groups,
                owner=code,
                weight=weights.get(("department", code), 1),
            )
        )
    for code, department in sorted(snapshot.projects):
        queue = _cluster_queue(snapshot, code, department, _held(table, flavors, "project", code))
        # Kueue's fair sharing (its FairSharing config on) divides what siblings borrow by weight.
        queue["spec"]["fairSharing"] = {"weight": weights.get(("project", code), 1)}
        objects.append(queue)
        objects.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": _meta(project_queue_name(code), code, snapshot.namespace),
                "spec": {"clusterQueue": project_queue_name(code)},
            }
        )
    return objects


def _cohort(
    name: str, parent: str | None, groups: list[dict], *, owner: str | None, weight: int | None = None
) -> dict:
    spec: dict = {}
    if parent:
        spec["parent"] = parent
    if weight is not None:
        spec["fairSharing"] = {"weight": weight}
    if groups:
        spec["resourceGroups"] = groups
    return {"apiVersion": KUEUE_COHORT, "kind": "Cohort", "metadata": _meta(name, owner), "spec": spec}


def _cluster_queue(
    snapshot: TreeSnapshot, code: str, department: str, held: list[tuple[FlavorRef, Share]]
) -> dict:
    spec: dict = {
        "cohort": department_queue_name(department),
        # Only the namespace the Kubernetes backend submits into may use the queue.
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": snapshot.namespace}},
        "queueingStrategy": "StrictFIFO" if code in snapshot.strict_fifo else "BestEffortFIFO",
        # DESIGN §3.5: an in-quota job reclaims on-loan capacity whatever its priority; §3.6:
        # within a project a higher priority preempts a lower one; borrowing never preempts.
        "preemption": {
            "reclaimWithinCohort": "Any",
            "withinClusterQueue": "LowerPriority",
            "borrowWithinCohort": {"policy": "Never"},
        },
    }
    groups = _resource_groups((f, _kueue_resource(f, s.share, s)) for f, s in held)
    if groups:
        spec["resourceGroups"] = groups
    return {
        "apiVersion": KUEUE,
        "kind": "ClusterQueue",
        "metadata": _meta(project_queue_name(code), code),
        "spec": spec,
    }


def _departments_top_down(snapshot: TreeSnapshot) -> list[tuple[str, str | None]]:
    children = _children(snapshot)
    ordered: list[tuple[str, str | None]] = []

    def walk(parent: str | None) -> None:
        for kind, code in children[parent]:
            if kind == "department":
                ordered.append((code, parent))
                walk(code)

    walk(None)
    return ordered


# -- Volcano


def _add(target: dict[str, Decimal], resource: str, value: Decimal) -> None:
    target[resource] = target.get(resource, Decimal(0)) + value


def _volcano_queue(
    name: str, parent: str, owner: str, held: list[tuple[FlavorRef, Share]], weight: int = 1
) -> dict:
    deserved: dict[str, Decimal] = {}
    guarantee: dict[str, Decimal] = {}
    capability: dict[str, Decimal] = {}
    for flavor, s in held:
        # Volcano has no flavors: flavors sharing a resource name (A100 and H800 as
        # nvidia.com/gpu) add up on it.
        device = device_resource(flavor)
        if device:
            _add(deserved, device, s.share)
            if s.reserved > 0:
                _add(guarantee, device, s.reserved)
        b = s.limits.borrow_limit
        cap = flavor.capacity if b is None else min(flavor.capacity, s.limits.quota + b)
        if device:
            _add(capability, device, cap)
        for target, units in ((deserved, s.share), (capability, cap), (guarantee, s.reserved)):
            if units > 0 or target is not guarantee:
                for resource, amount in machine_amounts(flavor, units).items():
                    _add(target, resource, amount)
    spec: dict = {"parent": parent, "weight": weight, "reclaimable": True}
    if deserved:
        spec["deserved"] = _volcano_quantities(deserved)
        spec["capability"] = _volcano_quantities(capability)
    if guarantee:
        spec["guarantee"] = {"resource": _volcano_quantities(guarantee)}
    return {"apiVersion": VOLCANO, "kind": "Queue", "metadata": _meta(name, owner), "spec": spec}


def _volcano_quantities(amounts: dict[str, Decimal]) -> dict[str, int | str]:
    machine = {name for name, _f, _s in MACHINE}
    return {r: machine_quantity(r, v) if r in machine else quantity(v) for r, v in sorted(amounts.items())}


def render_volcano(snapshot: TreeSnapshot, now: datetime) -> list[dict]:
    table = shares(snapshot, now)
    flavors = sorted(snapshot.flavors, key=lambda f: f.name)
    weights = fair_share_weights(snapshot, table)

    objects = [
        _volcano_queue(
            department_queue_name(code),
            department_queue_name(parent) if parent else VOLCANO_ROOT,
            code,
            _held(table, flavors, "department", code),
            weights.get(("department", code), 1),
        )
        for code, parent in _departments_top_down(snapshot)
    ]
    objects += [
        _volcano_queue(
            project_queue_name(code),
            department_queue_name(department),
            code,
            _held(table, flavors, "project", code),
            weights.get(("project", code), 1),
        )
        for code, department in sorted(snapshot.projects)
    ]
    return objects


def render(snapshot: TreeSnapshot, now: datetime, fmt: str) -> list[dict]:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    objects = render_kueue(snapshot, now) if fmt == "kueue" else render_volcano(snapshot, now)
    _check_unique(objects)
    return objects


def _check_unique(objects: list[dict]) -> None:
    seen: set[tuple[str, str]] = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in seen:
            raise ValueError(f"two owners render to {obj['kind']} {key[1]!r}: rename one of their codes")
        seen.add(key)
