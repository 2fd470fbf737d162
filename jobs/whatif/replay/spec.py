"""The pool and the tenants of a replay (pure: no Django).

``SPEC.json`` (DESIGN §9)::

    {"nodes": [{"flavor": "A100-80G", "count": 64, "gpus_per_node": 8,
                "nodes_per_leaf": 16, "leaves_per_spine": 8}],
     "quotas": {"dept/project": {"A100-80G": 128}}}

Tenant paths create the department tree; a department's quota defaults to the sum of its
children's. Without ``quotas`` (or for the Alibaba trace) quotas are *derived*: per flavor, each
project's quota is proportional to its GPU demand (GPU-seconds requested in that flavor), in
whole GPUs, summing exactly to the flavor's capacity (largest remainder).
"""

from __future__ import annotations

import json
import math
import zlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from jobs.scheduler.scheduler import Limits, Node, TreeNode
from jobs.whatif.replay.trace import TraceJob, TraceNode

Quotas = dict[str, dict[str, int]]  # tenant path -> flavor -> milli


def load_spec(path: str | Path) -> tuple[list[TraceNode], Quotas | None]:
    data = json.loads(Path(path).read_text())
    nodes: list[TraceNode] = []
    for group in data.get("nodes", ()):
        flavor = group["flavor"]
        res = _node_resources(group, path)
        if group.get("name"):  # one node with its real topology (an exported inventory)
            nodes.append(TraceNode(str(group["name"]), int(group["gpus_per_node"]), flavor,
                                   zone=str(group.get("zone", "")), spine=str(group.get("spine", "")),
                                   leaf=str(group.get("leaf", "")), **res))
            continue
        for i in range(int(group.get("count", 1))):
            nodes.append(TraceNode(f"{flavor}-{i:05d}", int(group["gpus_per_node"]), flavor,
                                   int(group.get("nodes_per_leaf", 16)),
                                   int(group.get("leaves_per_spine", 8)), **res))
    if not nodes:
        raise ValueError(f"{path}: no nodes")
    return nodes, spec_quotas(data) or None


def _node_resources(group: Mapping, path) -> dict:
    """A node entry's optional ``cpu_milli`` / ``memory_mib`` (allocatable; absent: not reported)."""
    out = {}
    for key in ("cpu_milli", "memory_mib"):
        value = group.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{path}: node {key} must be a whole number > 0, not {value!r}")
        out[key] = value
    return out


def spec_quotas(data: Mapping) -> dict[str, dict[str, int]]:
    """A SPEC's ``quotas`` in milli-GPUs per tenant and flavor ({} when it has none)."""
    return {t: {f: round(quota_gpus(g) * 1000) for f, g in per.items()}
            for t, per in (data.get("quotas") or {}).items()}


def quota_gpus(value) -> float:
    """A SPEC quota: GPUs, or ``{"quota": GPUs, "borrow_limit": …, "lend_limit": …}``
    (jobs.whatif.replay.limits reads the limits)."""
    return float(value["quota"]) if isinstance(value, Mapping) else float(value)


def engine_nodes(nodes: Sequence[TraceNode]) -> tuple[Node, ...]:
    """Engine nodes, in leaves/spines numbered per flavor in list order (a node that names its
    own leaf keeps its real topology), with the node's CPU and memory when the trace has them."""
    seen: dict[str, int] = defaultdict(int)
    out = []
    for n in nodes:
        res = {"cpu_millicores": n.cpu_milli, "memory_mib": n.memory_mib}
        if n.leaf:
            out.append(Node(n.name, n.model, n.gpus, n.zone or "z0", n.spine or f"{n.model}-s0", n.leaf,
                            **res))
            continue
        i = seen[n.model]
        seen[n.model] += 1
        leaf = i // max(1, n.nodes_per_leaf)
        spine = leaf // max(1, n.leaves_per_spine)
        out.append(Node(n.name, n.model, n.gpus, "z0", f"{n.model}-s{spine}", f"{n.model}-l{leaf}", **res))
    return tuple(out)


def capacity(nodes: Iterable[TraceNode]) -> dict[str, int]:
    cap: dict[str, int] = defaultdict(int)
    for n in nodes:
        cap[n.model] += n.gpus * 1000
    return dict(cap)


def demand_milli(job: TraceJob) -> int:
    """Milli-GPUs a job holds while it runs."""
    per = job.gpu_milli if job.num_gpus == 1 and job.gpu_milli < 1000 else job.num_gpus * 1000
    return per * job.workers


QUOTA_SPLITS = ("demand", "equal")


def derive_quotas(jobs: Iterable[TraceJob], flavors: Mapping[str, str], cap: Mapping[str, int],
                  horizon: float, split: str = "demand") -> Quotas:
    """Quotas summing to each flavor's capacity. ``demand``: ∝ GPU-seconds of demand per
    (tenant, flavor); a job that never ends counts until ``horizon``. ``equal``: the same share
    for every tenant with demand in the flavor — fixed per-team quotas, as a centre hands them
    out, that do not follow how much each team really uses."""
    if split not in QUOTA_SPLITS:
        raise ValueError(f"unknown quota split {split!r} (one of {', '.join(QUOTA_SPLITS)})")
    demand: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for j in jobs:
        f = flavors.get(j.job_id)
        if f is None:
            continue
        dur = j.duration if j.duration is not None else max(0.0, horizon - j.submit_time)
        demand[f][j.tenant] += demand_milli(j) * max(dur, 1.0)
    out: Quotas = defaultdict(dict)
    for f, per in demand.items():
        if split == "equal":
            per = {t: 1.0 for t, d in per.items() if d > 0}
        total, c = sum(per.values()), cap.get(f, 0)
        if total <= 0 or c <= 0:
            continue
        unit = 1000 if c % 1000 == 0 else 1  # whole GPUs when the capacity is
        exact = {t: c // unit * d / total for t, d in per.items()}
        base = {t: math.floor(x) for t, x in exact.items()}
        rest = c // unit - sum(base.values())
        for t in sorted(exact, key=lambda t: (base[t] - exact[t], t))[:rest]:
            base[t] += 1
        for t, q in base.items():
            out[t][f] = q * unit
    return dict(out)


def tenant_tree(tenants: Iterable[str], quotas: Quotas
                ) -> tuple[tuple[TreeNode, ...], dict[tuple[str, str], Limits]]:
    """Tree nodes for the paths (``a/b`` → department ``a``, project ``a/b``; a one-part path
    is a project under the root) and limits: projects their quota, departments the given one
    or the sum of their children's. Borrow and lend limits are unset (policy decides)."""
    nodes: dict[str, TreeNode] = {}
    for t in sorted(set(tenants) | set(quotas)):
        parts = t.split("/")
        for k in range(1, len(parts) + 1):
            path = "/".join(parts[:k])
            parent = "/".join(parts[:k - 1]) or None
            kind = "project" if k == len(parts) else "department"
            if path not in nodes or kind == "department":
                nodes[path] = TreeNode(path, parent, kind)
    sums: dict[tuple[str, str], int] = defaultdict(int)
    for t, per in quotas.items():
        if nodes[t].kind != "project":
            continue
        for f, q in per.items():
            node = nodes[t].parent_id
            while node is not None:
                sums[(node, f)] += q
                node = nodes[node].parent_id
    limits = {(t, f): Limits(q) for t, per in quotas.items() for f, q in per.items()}
    for key, q in sums.items():
        limits.setdefault(key, Limits(q))
    return tuple(nodes[k] for k in sorted(nodes)), limits


# -- tenant split (``replay --tenants``) ---------------------------------------------------
TENANT_SPLITS = ("trace", "hash:N", "shape:N")


def parse_tenants(value: str) -> tuple[str, int]:
    """``trace`` | ``hash:N`` | ``shape:N`` (N ≥ 1) → (kind, N)."""
    if value == "trace":
        return "trace", 0
    kind, _, n = value.partition(":")
    if kind in ("hash", "shape") and n.isdigit() and int(n) >= 1:
        return kind, int(n)
    raise ValueError(f"--tenants: give trace, hash:N or shape:N, not {value!r}")


def zipf_weights(n: int) -> list[float]:
    """Project k's share of the jobs: ∝ 1/(k+1) (Zipf, s = 1), normalised."""
    w = [1.0 / (k + 1) for k in range(n)]
    total = sum(w)
    return [x / total for x in w]


def project_name(k: int) -> str:
    """Project k of a split: ``d<k // 4>/p<k>`` (departments of four projects, d0 the heaviest)."""
    return f"d{k // 4}/p{k:02d}"


def _pick(key: str, cumulative: Sequence[float]) -> int:
    u = zlib.crc32(key.encode()) / 2**32  # deterministic, uniform in [0, 1)
    for k, c in enumerate(cumulative):
        if u < c:
            return k
    return len(cumulative) - 1


def split_tenants(jobs: Sequence[TraceJob], value: str = "trace") -> list[TraceJob]:
    """Re-assign each job's tenant (the job mix, times and sizes are unchanged):

    * ``trace``: as the trace has it (Alibaba: the QoS class, ``LS/default`` / ``BE/default``);
    * ``hash:N``: project k of N with probability ∝ 1/(k+1) (Zipf), drawn from the CRC-32 of the
      job id without any ``#copy`` suffix (a repeated / overlaid copy stays with its project);
    * ``shape:N``: all jobs of the same *shape* — (GPUs, milli-GPU, allowed models, kind, trace
      tenant, workers) — go to one project, drawn the same way from the CRC-32 of the shape. A
      team's workload has few pod specs and arrives in bursts, so each project's demand is
      correlated in time (and the skew follows the shapes' popularity).

    Project k is ``d<k // 4>/p<kk>`` (``project_name``): four projects per department."""
    kind, n = parse_tenants(value)
    if kind == "trace":
        return list(jobs)
    cumulative, acc = [], 0.0
    for w in zipf_weights(n):
        acc += w
        cumulative.append(acc)
    out = []
    for j in jobs:
        if kind == "hash":
            key = j.job_id.split("#")[0]
        else:
            key = f"{j.num_gpus}|{j.gpu_milli}|{','.join(j.gpu_types)}|{j.kind}|{j.tenant}|{j.workers}"
        out.append(replace(j, tenant=project_name(_pick(key, cumulative))))
    return out


# -- queueing strategies (issue 25 item 4; jobs/scheduler/engine/fifo.py) ----------------------------
QUEUEINGS = ("best_effort", "strict_fifo")


def load_queueing(path: str | Path) -> tuple[dict[str, str], float | None]:
    """The SPEC's ``"queueing": {"dept/project": "strict_fifo"}`` (per project; the others
    best effort) and ``"aging_bound_s": N`` (the centre's aging bound; absent or null: none)."""
    data = json.loads(Path(path).read_text())
    per = data.get("queueing") or {}
    if not isinstance(per, dict):
        raise ValueError(f"{path}: \"queueing\" maps tenant paths to {' or '.join(QUEUEINGS)}")
    for tenant, strategy in per.items():
        check_queueing(strategy, f"{path}: queueing of {tenant!r}")
    return dict(per), check_aging_bound(data.get("aging_bound_s"), f"{path}: aging_bound_s")


def check_queueing(value, what: str = "queueing") -> str:
    if value not in QUEUEINGS:
        raise ValueError(f"{what}: give {' or '.join(QUEUEINGS)}, not {value!r}")
    return value


def check_aging_bound(value, what: str = "aging bound") -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise ValueError(f"{what}: give a number of seconds > 0, not {value!r}")
    return float(value)
