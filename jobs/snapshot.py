"""Build the engine's frozen snapshot from the database (reads only).

Tree node ids are "d<id>" for departments and "p<id>" for projects; node ids "n<id>"; job ids
the decimal primary key. Quantities become integer milli-units (1000 = one device)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal

from portal.models import Department, Project
from quotas.admission import Limits, TreeNode
from quotas.models import Node, NodeState, QuotaNode
from quotas.selectors import effective_limits_map

from .engine.model import Node as CoreNode
from .engine.model import PriorityClass as CorePriorityClass
from .engine.model import QueuedJob, RunningJob, Snapshot
from .models import Job, PriorityClass
from .states import HOLDING, JobState

MILLI = 1000
# Hooks through which apps above `jobs` add to the snapshot without `jobs` importing them:
# callables ``provider(now) -> Iterable[tree node id]`` of tenants over budget (billing).
over_budget_providers: list = []


def milli(value: Decimal | None) -> int | None:
    return None if value is None else int((value * MILLI).to_integral_value())


def tree_nodes() -> tuple[TreeNode, ...]:
    departments = [
        TreeNode(f"d{pk}", f"d{parent}" if parent else None, "department")
        for pk, parent in Department.objects.values_list("id", "parent_id")
    ]
    projects = [
        TreeNode(f"p{pk}", f"d{dept}", "project")
        for pk, dept in Project.objects.values_list("id", "department_id")
    ]
    return tuple(departments + projects)


def limits_at(now: datetime) -> dict[tuple[str, str], Limits]:
    nodes = list(QuotaNode.objects.select_related("flavor"))
    effective = effective_limits_map(nodes, now)
    out = {}
    for node in nodes:
        key = f"p{node.project_id}" if node.project_id else f"d{node.department_id}"
        e = effective[node.pk]
        out[(key, node.flavor.name)] = Limits(milli(e.quota), milli(e.borrow_limit), milli(e.lend_limit))
    return out


def core_nodes() -> tuple[CoreNode, ...]:
    rows = Node.objects.filter(cluster__active=True).values_list(
        "id", "flavor__name", "gpu_count", "zone", "spine", "leaf", "state"
    )
    return tuple(
        CoreNode(f"n{pk}", flavor, gpus, zone, spine, leaf, schedulable=(state == NodeState.READY))
        for pk, flavor, gpus, zone, spine, leaf, state in rows
    )


_JOB_FIELDS = (
    "id",
    "project_id",
    "flavor__name",
    "priority_class__value",
    "priority_class__preemptible",
    "workers",
    "min_workers",
    "gpus_per_worker",
    "gpu_milli",
    "submitted_at",
    "max_runtime_seconds",
    "approved",
    "state",
    "admitted_at",
    "started_at",
    "placement",
    "terminating_since",
)


def _running(row: dict) -> RunningJob:
    slots = tuple((f"n{node}", gpu, m) for worker in row["placement"] for node, gpu, m in worker)
    return RunningJob(
        id=str(row["id"]),
        project_id=f"p{row['project_id']}",
        flavor=row["flavor__name"],
        priority=row["priority_class__value"],
        preemptible=row["priority_class__preemptible"],
        started_at=row["started_at"] or row["admitted_at"],
        max_runtime_seconds=row["max_runtime_seconds"],
        placement=slots,
        terminating=row["terminating_since"] is not None,
    )


def _queued(row: dict) -> QueuedJob:
    return QueuedJob(
        id=str(row["id"]),
        project_id=f"p{row['project_id']}",
        flavor=row["flavor__name"],
        submitted_at=row["submitted_at"],
        workers=row["workers"],
        min_workers=row["min_workers"],
        gpus_per_worker=row["gpus_per_worker"],
        gpu_milli=row["gpu_milli"],
        priority=row["priority_class__value"],
        preemptible=row["priority_class__preemptible"],
        max_runtime_seconds=row["max_runtime_seconds"],
        approved=row["approved"],
    )


def jobs_in(states: Iterable[str]):
    return Job.objects.filter(state__in=list(states)).values(*_JOB_FIELDS).iterator(chunk_size=5000)


def build_snapshot(now: datetime) -> Snapshot:
    running = tuple(_running(r) for r in jobs_in(HOLDING))
    queued = tuple(_queued(r) for r in jobs_in([JobState.QUEUED]))
    over_budget = frozenset(t for provider in over_budget_providers for t in provider(now))
    classes = tuple(
        CorePriorityClass(name, value, preemptible, grace)
        for name, value, preemptible, grace in PriorityClass.objects.values_list(
            "name", "value", "preemptible", "grace_seconds"
        )
    )
    return Snapshot(
        now=now,
        nodes=core_nodes(),
        tree=tree_nodes(),
        limits=limits_at(now),
        running=running,
        queued=queued,
        over_budget_tenants=over_budget,
        priority_classes=classes,
    )
