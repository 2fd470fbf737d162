"""Builders for pure-core tests: snapshots in GPU units, converted to milli-units."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from jobs.scheduler.scheduler import Limits, Node, QueuedJob, RunningJob, Snapshot, TreeNode

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
F = "A100"


def gpus(n: float) -> int:
    return round(n * 1000)


def limits(q: float, b: float | None = None, l: float | None = None) -> Limits:  # noqa: E741
    return Limits(gpus(q), None if b is None else gpus(b), None if l is None else gpus(l))


def cluster(nodes: int, per_node: int = 8, flavor: str = F, per_leaf: int = 4,
            leaves_per_spine: int = 2, prefix: str = "n") -> tuple[Node, ...]:
    out = []
    for i in range(nodes):
        leaf = i // per_leaf
        spine = leaf // leaves_per_spine
        out.append(Node(f"{prefix}{i:03d}", flavor, per_node, "z1", f"s{spine}", f"l{leaf}"))
    return tuple(out)


def tree(spec: dict) -> tuple[tuple[TreeNode, ...], dict]:
    """``{"A": (q, {"a": q, ...}), ...}`` or ``{"A": (q, {...}, b, l)}`` — nested departments
    with projects as leaves whose value is ``q`` or ``(q, b, l)``; returns (tree, limits)."""
    nodes: list[TreeNode] = []
    lims: dict = {}

    def walk(name, value, parent):
        if isinstance(value, tuple) and len(value) >= 2 and isinstance(value[1], dict):
            q, kids, *rest = value
            nodes.append(TreeNode(name, parent, "department"))
            lims[(name, F)] = limits(q, *rest)
            for k, v in kids.items():
                walk(k, v, name)
        else:
            nodes.append(TreeNode(name, parent, "project"))
            vals = value if isinstance(value, tuple) else (value,)
            if vals[0] is not None:
                lims[(name, F)] = limits(*vals)

    for name, value in spec.items():
        walk(name, value, None)
    return tuple(nodes), lims


def running(jid: str, project: str, node: str, count: int, *, first_gpu: int = 0,
            priority: int = 100, preemptible: bool = True, age_s: int = 3600,
            runtime: int | None = None, milli: int = 1000, flavor: str = F,
            terminating: bool = False) -> RunningJob:
    placement = tuple((node, first_gpu + g, milli) for g in range(count))
    return RunningJob(jid, project, flavor, priority, preemptible, NOW - timedelta(seconds=age_s),
                      runtime, placement, terminating)


def queued(jid: str, project: str, gpus_per_worker: int = 1, *, workers: int = 1,
           min_workers: int | None = None, milli: int | None = None, priority: int = 100,
           age_s: int = 60, runtime: int | None = None, approved: bool = False,
           flavor: str = F, preemptible: bool = True) -> QueuedJob:
    return QueuedJob(jid, project, flavor, NOW - timedelta(seconds=age_s), workers, min_workers,
                     gpus_per_worker, milli, priority, preemptible, runtime, approved)


def snapshot(nodes, tree_and_limits, running_jobs=(), queued_jobs=(), **kw) -> Snapshot:
    t, lims = tree_and_limits
    return Snapshot(kw.pop("now", NOW), tuple(nodes), t, lims, tuple(running_jobs),
                    tuple(queued_jobs), **kw)
