"""Stranded GPUs, read from the database (DESIGN §15, docs/resources.md "Stranded GPUs in the
figures"): free GPUs of a node that its free CPU, memory and local disk cannot feed at its share.

The arithmetic is pure (``jobs.scheduler.footprint.stranding``); this module reads what it needs —
each node's allocatable figures and what the jobs holding GPUs on it hold — in the engine's own
terms (``jobs.scheduling.snapshot``): a worker that asked some figure holds its request (the rest
filled from the share it was submitted with) on its first node; a job that asked nothing holds its
GPUs' share of each node it runs on. So the node map, the API, the metrics and the dashboard count
exactly the GPUs placement cannot use. One query for the jobs, whatever the number of nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from jobs.models import Job
from jobs.scheduler.footprint import Held, NodeSize, Request, Stranding, filled, share_from, stranding
from jobs.states import HOLDING
from quotas.models import Node, NodeState

# The columns of a GPU-holding job that what it holds is computed from (``held_by_node``).
HELD_COLUMNS = ("placement", "gpus_per_worker", "gpu_milli", "cpu_millicores", "memory_mib",
                "local_disk_gib", "unit_share")


def held_by_node(rows: Iterable[tuple]) -> dict[int, list[Held]]:
    """Per node id, what the jobs of ``rows`` (``HELD_COLUMNS``) hold of it."""
    out: dict[int, list[Held]] = defaultdict(list)
    for placement, gpus, milli, cpu, memory, disk, unit_share in rows:
        workers = [w for w in placement or () if w]
        if cpu is None and memory is None and disk is None:
            per_node: dict[int, int] = defaultdict(int)
            for worker in workers:
                for node_id, _gpu, m in worker:
                    per_node[node_id] += int(m)
            for node_id, m in per_node.items():
                out[node_id].append(Held(m))
            continue
        request = filled(Request(cpu, memory, disk), share_from(unit_share), units=gpus or 0, milli=milli)
        for worker in workers:
            out[worker[0][0]].append(Held(sum(int(m) for _n, _g, m in worker), request))
    return out


def used_gpus(rows: Iterable[tuple]) -> dict[int, set[int]]:
    """Per node id, the indices of the GPUs (or slices) some job of ``rows`` holds."""
    out: dict[int, set[int]] = defaultdict(set)
    for placement, *_ in rows:
        for worker in placement or ():
            for node_id, gpu, _m in worker:
                out[node_id].add(gpu)
    return out


def of_node(node: Node, free: int, held: Iterable[Held]) -> Stranding:
    """``node``'s free, usable and stranded GPUs, ``free`` of them whole free."""
    size = NodeSize(node.gpu_count, node.cpu_millicores, node.memory_mib, node.local_disk_gib)
    return stranding(size, free, held)


def holding_rows(flavor_ids: Iterable[int]) -> list[tuple]:
    """``HELD_COLUMNS`` of the jobs holding GPUs of these flavors (through the (state, flavor) index)."""
    return list(Job.objects.filter(state__in=list(HOLDING), flavor_id__in=list(flavor_ids))
                .values_list(*HELD_COLUMNS))


def _free(gpus: int, used: set[int]) -> int:
    return gpus - sum(1 for g in used if 0 <= g < gpus)


def stranded_by_flavor() -> dict[int, int]:
    """Per flavor id, the stranded GPUs of its ready nodes on active clusters — the nodes whose GPUs
    the pool counts (``quotas.selectors.capacity_by_flavor``) —, 0 included. Two queries; none for
    the jobs when no such node reports CPU, memory or disk (such a node strands nothing)."""
    nodes = Node.objects.filter(state=NodeState.READY, cluster__active=True).values_list(
        "pk", "flavor_id", "gpu_count", "cpu_millicores", "memory_mib", "local_disk_gib")
    out: dict[int, int] = {}
    reporting = []
    for pk, flavor_id, gpus, *figures in nodes:
        out[flavor_id] = 0
        if figures != [None, None, None]:
            reporting.append((pk, flavor_id, NodeSize(gpus, *figures)))
    if not reporting:
        return out
    rows = holding_rows({flavor_id for _pk, flavor_id, _size in reporting})
    held, used = held_by_node(rows), used_gpus(rows)
    for pk, flavor_id, size in reporting:
        out[flavor_id] += stranding(size, _free(size.units, used.get(pk, set())), held.get(pk, ())).stranded
    return out
