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


def stranding_of(nodes: list[Node]) -> dict[int, Stranding]:
    """Per node id, its free, usable and stranded GPUs now (two queries at most)."""
    rows = holding_rows({n.flavor_id for n in nodes}) if nodes else []
    held, used = held_by_node(rows), used_gpus(rows)
    out = {}
    for n in nodes:
        taken = sum(1 for g in used.get(n.pk, ()) if 0 <= g < n.gpu_count)
        out[n.pk] = of_node(n, n.gpu_count - taken, held.get(n.pk, ()))
    return out


def ready_nodes() -> list[Node]:
    """The nodes whose GPUs the pool counts: ready, on active clusters (``capacity_by_flavor``)."""
    return list(Node.objects.filter(state=NodeState.READY, cluster__active=True))


def stranded_by_flavor() -> dict[int, int]:
    """Per flavor id, the stranded GPUs of its ready nodes on active clusters (0 included)."""
    nodes = ready_nodes()
    out: dict[int, int] = dict.fromkeys((n.flavor_id for n in nodes), 0)
    # A node that reports no CPU, memory or disk strands nothing: without any, no job is read.
    reporting = [n for n in nodes if (n.cpu_millicores, n.memory_mib, n.local_disk_gib) != (None, None, None)]
    found = stranding_of(reporting)
    for n in reporting:
        out[n.flavor_id] += found[n.pk].stranded
    return out
