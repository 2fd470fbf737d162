"""Per-flavor GPU occupancy with the indexes that make placement O(leaves), not O(GPUs).

A :class:`Pool` holds the schedulable nodes of one flavor across every cluster, ordered by
(cluster, zone, spine, leaf, node id), and per GPU the milli in use. Topology names are per
cluster (two clusters may both have a leaf "l0"), so a leaf or spine is keyed by its cluster too
and never spans two; a gang runs inside one cluster (a backend runs a job on one cluster only).
Whole-GPU workers only use GPUs with nothing on them, so the indexes count *whole free GPUs* per
node:

* ``hist[k]``        — nodes with exactly k whole free GPUs (capacity checks in O(max GPUs)),
* ``leaf_hist[l][k]`` — the same per leaf, and ``bucket[k]`` = leaves having such a node,
* ``leaf_rank``     — whole free GPUs per leaf × 65536 + leaf index (fullest leaf first),
* ``part[f]``        — partly used GPUs with f milli free (shared ``gpu_milli`` packing),
  ``pkeys`` the sorted free amounts present,
* ``chist[c][k]``    — ``hist`` per cluster, only when the pool has more than one cluster
  (``None`` otherwise: one cluster is the common case and costs nothing extra).

**CPU, memory and local disk** (DESIGN §15, docs/resources.md): when some node of the pool
reports them, ``res[i]`` holds node ``i``'s free CPU (millicores), memory (MiB) and disk (GiB) and
``rshare[i]`` what one of its units comes with (allocatable ÷ units; ``None``: not reported, no
limit). The indexes then count *usable* GPUs, ``free[i] = min(whole[i], ⌊res ÷ share⌋ per
dimension)``, where ``whole[i]`` are the whole free GPUs: free GPUs that the node's free CPU,
memory or disk cannot feed at its share are *stranded* and invisible to placement. A worker within
its share fits wherever the indexes say it does; one asking more is placed by its *footprint* in
units (:meth:`demand`, at the pool's smallest share), which leaves it enough of every dimension on
the node it lands on. Without resources (``res`` is None) nothing of this costs anything.
"""

from __future__ import annotations

from bisect import bisect_left, insort

FULL = 1000
DIMS = 3  # CPU millicores, memory MiB, local disk GiB


class Pool:
    __slots__ = (
        "flavor", "ids", "index", "size", "used", "free", "leaf_of", "leaf_nodes", "leaf_spine",
        "leaf_hist", "leaf_rank", "spine_leaves", "bucket", "hist",
        "maxg", "part", "pkeys", "capacity", "version", "_caps", "full_leaves", "cluster",
        "clusters", "cluster_of", "leaf_cluster", "chist", "_gcaps", "_size_caps",
        "res", "rshare", "rdims", "whole", "share", "cuda", "_demand",
    )

    def __init__(self, flavor: str, nodes) -> None:
        """``nodes``: the schedulable :class:`~jobs.scheduler.engine.model.Node` objects of ``flavor``."""
        self.flavor = flavor
        ordered = sorted(nodes, key=lambda n: (n.cluster, n.zone, n.spine, n.leaf, n.id))
        self.ids = [n.id for n in ordered]
        self.cluster = [n.cluster for n in ordered]
        self.clusters = sorted(set(self.cluster))  # names; cluster_of[i] indexes this list
        number = {c: k for k, c in enumerate(self.clusters)}
        self.cluster_of = [number[c] for c in self.cluster]
        self.index = {nid: i for i, nid in enumerate(self.ids)}
        self.size = [n.gpus for n in ordered]
        self.cuda = [n.cuda for n in ordered]  # (12, 4); (): not reported
        self.used = [[0] * n.gpus for n in ordered]
        self.free = list(self.size)
        self.maxg = max(self.size, default=0)
        self.capacity = sum(self.size) * FULL
        self.version = 0  # bumped on every change: keys caches of derived figures
        self._caps: dict[int, tuple[int, int]] = {}
        self._gcaps: dict[int, tuple[int, list[int]]] = {}
        self._size_caps: dict[int, int] = {}
        self._demand: dict[tuple, int] = {}  # (milli, request) -> footprint: the shares never change
        self._index_topology(ordered)
        self._index_resources(ordered)
        self.part: dict[int, set[tuple[int, int]]] = {}
        self.pkeys: list[int] = []
        for i, node in enumerate(ordered):
            for g, milli in enumerate(node.external_milli[: node.gpus]):
                if milli > 0:
                    self.occupy(i, g, min(milli, FULL))

    def _index_topology(self, ordered) -> None:
        leaf_ix: dict[tuple, int] = {}
        spine_ix: dict[tuple, int] = {}
        self.leaf_of, self.leaf_nodes, self.leaf_spine, self.spine_leaves = [], [], [], []
        self.leaf_cluster: list[int] = []
        for i, n in enumerate(ordered):
            lkey = (n.cluster, n.zone, n.spine, n.leaf)
            li = leaf_ix.get(lkey)
            if li is None:
                skey = (n.cluster, n.zone, n.spine)
                si = spine_ix.setdefault(skey, len(spine_ix))
                if si == len(self.spine_leaves):
                    self.spine_leaves.append([])
                li = leaf_ix[lkey] = len(self.leaf_nodes)
                self.leaf_nodes.append([])
                self.leaf_spine.append(si)
                self.leaf_cluster.append(self.cluster_of[i])
                self.spine_leaves[si].append(li)
            self.leaf_of.append(li)
            self.leaf_nodes[li].append(i)
        nleaves = len(self.leaf_nodes)
        self.leaf_hist = [[0] * (self.maxg + 1) for _ in range(nleaves)]
        self.bucket: list[set[int]] = [set() for _ in range(self.maxg + 1)]
        self.hist = [0] * (self.maxg + 1)
        self.chist = None
        if len(self.clusters) > 1:
            self.chist = [[0] * (self.maxg + 1) for _ in self.clusters]
            for i, g in enumerate(self.size):
                self.chist[self.cluster_of[i]][g] += 1
        # A unique, cheap-to-compare rank (fewest free GPUs first, then topology order) lets
        # min(..., key=leaf_rank.__getitem__) pick a leaf at C speed and deterministically.
        self.leaf_rank = list(range(nleaves))
        for i, g in enumerate(self.size):
            li = self.leaf_of[i]
            self.leaf_hist[li][g] += 1
            self.bucket[g].add(li)
            self.hist[g] += 1
            self.leaf_rank[li] += g * 65536
        # full_leaves[c]: leaves with exactly c nodes whose every GPU is free (c >= 1), the
        # index whole-node gang workers best-fit a leaf with.
        self.full_leaves: list[set[int]] = [set() for _ in range(max(
            [len(n) for n in self.leaf_nodes], default=0) + 1)]
        top = self.maxg
        for li in range(nleaves):
            c = self.leaf_hist[li][top] if top else 0
            if c:
                self.full_leaves[c].add(li)

    def _index_resources(self, ordered) -> None:
        """``res``/``rshare``/``whole`` when some node reports CPU, memory or disk."""
        self.res = None
        self.rshare = None
        self.rdims = None
        self.whole = None
        self.share: tuple = (None,) * DIMS
        sizes = [(n.cpu_millicores, n.memory_mib, n.local_disk_gib) for n in ordered]
        if not any(v is not None for row in sizes for v in row):
            return
        self.res = [[v if v is not None else 0 for v in row] for row in sizes]
        self.rshare = [tuple(None if v is None else v // n.gpus for v in row)
                       for row, n in zip(sizes, ordered, strict=True)]
        self.rdims = [tuple((d, s) for d, s in enumerate(share) if s is not None) for share in self.rshare]
        self.whole = list(self.free)
        least = []
        for d in range(DIMS):
            known = [sh[d] for sh in self.rshare if sh[d] is not None]
            least.append(min(known) if known else None)
        self.share = tuple(least)
        for i in range(len(ordered)):
            usable = self._usable(i)
            if usable != self.free[i]:
                self._set_free(i, usable)

    # -- mutation ------------------------------------------------------------------------
    def occupy(self, i: int, g: int, milli: int) -> None:
        self.version += 1
        row = self.used[i]
        old = row[g]
        new = old + milli
        row[g] = new
        if old == 0 and new > 0:
            if self.whole is None:  # no resources: the common case pays no extra call
                self._set_free(i, self.free[i] - 1)
            else:
                self._whole_delta(i, -1)
        self._repart(i, g, old, new)

    def release(self, i: int, g: int, milli: int) -> None:
        self.version += 1
        row = self.used[i]
        old = row[g]
        new = old - milli
        row[g] = new
        if new == 0 and old > 0:
            if self.whole is None:
                self._set_free(i, self.free[i] + 1)
            else:
                self._whole_delta(i, 1)
        self._repart(i, g, old, new)

    def _whole_delta(self, i: int, delta: int) -> None:
        self.whole[i] += delta
        usable = self._usable(i)
        if usable != self.free[i]:
            self._set_free(i, usable)

    def _usable(self, i: int) -> int:
        """Whole free GPUs of node ``i`` its free CPU, memory and disk can feed at its share."""
        usable = self.whole[i]
        free = self.res[i]
        for d, s in self.rdims[i]:  # the dimensions node i reports (hot: every occupy/release)
            q = free[d] // s if s else 0
            if q < usable:
                usable = q
        return usable if usable > 0 else 0

    def take(self, i: int, req, sign: int = 1) -> None:
        """Node ``i`` gives (``sign`` 1) or gets back (-1) ``req``: (cpu, memory, disk) of one or
        more workers. Nothing without resources."""
        if self.res is None or not req:
            return
        self.version += 1
        free = self.res[i]
        c, m, k = req
        if sign > 0:
            free[0] -= c
            free[1] -= m
            free[2] -= k
        else:
            free[0] += c
            free[1] += m
            free[2] += k
        usable = self._usable(i)
        if usable != self.free[i]:
            self._set_free(i, usable)

    def share_of(self, i: int, milli: int) -> tuple:
        """``milli`` GPU units' share of node ``i``'s CPU, memory and disk (rounded up)."""
        return tuple(0 if s is None else -(-s * milli // FULL) for s in self.rshare[i])

    def implied(self, slots) -> tuple:
        """What a job without a request holds of its nodes: its GPUs' share of each reported
        dimension, ``(node index, (cpu, memory, disk))`` per node of ``slots`` ((index, gpu,
        milli) triples; a shared GPU's part rounds up). Keeps a node's usable GPUs honest: a
        default job's GPUs take their CPU, memory and disk with them. Empty without resources."""
        if self.res is None:
            return ()
        per_node: dict[int, int] = {}
        for i, _, milli in slots:
            per_node[i] = per_node.get(i, 0) + milli
        out = []
        for i, milli in per_node.items():
            req = self.share_of(i, milli)
            if any(req):
                out.append((i, req))
        return tuple(out)

    def occupy_slots(self, slots, res=()) -> None:
        """``occupy`` for many slots, updating the indexes once per node (gang workers); with
        ``res`` (``(node index, (cpu, memory, disk))`` per worker, as :meth:`take` takes them) the
        workers' CPU, memory and disk taken too."""
        if self.whole is None:
            self._apply_slots(slots, 1)
        else:
            self._apply_with_res(slots, 1, res)

    def release_slots(self, slots, res=()) -> None:
        if self.whole is None:
            self._apply_slots(slots, -1)
        else:
            self._apply_with_res(slots, -1, res)

    def _apply_slots(self, slots, sign: int) -> None:
        used = self.used
        self.version += 1
        # Without resources a node's free count is its whole free GPUs: set it directly (no extra
        # call on the hot path of every admission and end).
        free = self.free
        node, delta = -1, 0
        for i, g, m in slots:
            if i != node:
                if delta:
                    self._set_free(node, free[node] + delta)
                node, delta = i, 0
            row = used[i]
            old = row[g]
            new = old + sign * m
            row[g] = new
            if old == 0 and new > 0:
                delta -= 1
            elif new == 0 and old > 0:
                delta += 1
            if (0 < old < FULL) or (0 < new < FULL):
                self._repart(i, g, old, new)
        if delta:
            self._set_free(node, free[node] + delta)

    def _apply_with_res(self, slots, sign: int, res) -> None:
        """:meth:`_apply_slots` and :meth:`take` for every request in one pass: the whole GPUs and free CPU,
        memory and disk of every node touched change first, then its usable count is computed
        once (it depends only on them, so the result is that of one update after another).
        Written without calls: this runs on every admission and end."""
        self.version += 1
        used, whole = self.used, self.whole
        for i, g, m in slots:
            row = used[i]
            old = row[g]
            new = old + sign * m
            row[g] = new
            if old == 0 and new > 0:
                whole[i] -= 1
            elif new == 0 and old > 0:
                whole[i] += 1
            if (0 < old < FULL) or (0 < new < FULL):
                self._repart(i, g, old, new)
        rres = self.res
        for i, req in res:
            if req:
                f = rres[i]
                if sign > 0:
                    f[0] -= req[0]
                    f[1] -= req[1]
                    f[2] -= req[2]
                else:
                    f[0] += req[0]
                    f[1] += req[1]
                    f[2] += req[2]
        free, rdims, last = self.free, self.rdims, -1
        for seq in (slots, res):
            for entry in seq:
                i = entry[0]
                if i == last:  # slots and requests come grouped by node
                    continue
                last = i
                usable = whole[i]  # as _usable
                f = rres[i]
                for d, s in rdims[i]:
                    q = f[d] // s if s else 0
                    if q < usable:
                        usable = q
                if usable < 0:
                    usable = 0
                if usable != free[i]:
                    self._set_free(i, usable)

    def _set_free(self, i: int, new: int) -> None:
        free = self.free
        old = free[i]
        free[i] = new
        li = self.leaf_of[i]
        h = self.leaf_hist[li]
        top = self.maxg
        if old == top or new == top:
            c = h[top]
            if c:
                self.full_leaves[c].discard(li)
            c += (new == top) - (old == top)
            if c:
                self.full_leaves[c].add(li)
        h[old] -= 1
        if not h[old]:
            self.bucket[old].discard(li)
        if not h[new]:
            self.bucket[new].add(li)
        h[new] += 1
        hist = self.hist
        hist[old] -= 1
        hist[new] += 1
        if self.chist is not None:
            hist = self.chist[self.cluster_of[i]]
            hist[old] -= 1
            hist[new] += 1
        self.leaf_rank[li] += (new - old) * 65536

    def _repart(self, i: int, g: int, old: int, new: int) -> None:
        if 0 < old < FULL:
            key = FULL - old
            members = self.part[key]
            members.discard((i, g))
            if not members:
                del self.part[key]
                del self.pkeys[bisect_left(self.pkeys, key)]
        if 0 < new < FULL:
            key = FULL - new
            members = self.part.get(key)
            if members is None:
                members = self.part[key] = set()
                insort(self.pkeys, key)
            members.add((i, g))

    # -- queries -------------------------------------------------------------------------
    def whole_capacity(self, g: int) -> int:
        """How many workers of ``g`` whole GPUs fit, ignoring topology."""
        if g <= 0 or g > self.maxg:
            return 0
        hit = self._caps.get(g)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        hist = self.hist
        cap = sum(hist[k] * (k // g) for k in range(g, self.maxg + 1))
        self._caps[g] = (self.version, cap)
        return cap

    def gang_capacity(self, g: int) -> int:
        """How many workers of ``g`` whole GPUs fit inside ONE cluster (the most any cluster
        takes): what a gang may use. With one cluster it is :meth:`whole_capacity`."""
        if self.chist is None:
            return self.whole_capacity(g)
        return max(self.cluster_capacities(g))

    def cluster_capacities(self, g: int) -> list[int]:
        """Workers of ``g`` whole GPUs each cluster takes now (by ``cluster_of`` number).
        The list is cached: callers must not change it."""
        if self.chist is None:
            return [self.whole_capacity(g)]
        if g <= 0 or g > self.maxg:
            return [0] * len(self.clusters)
        hit = self._gcaps.get(g)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        top = self.maxg
        caps = [sum(h[k] * (k // g) for k in range(g, top + 1)) for h in self.chist]
        self._gcaps[g] = (self.version, caps)
        return caps

    def largest_cluster(self, g: int) -> int:
        """Workers of ``g`` whole GPUs the largest cluster could host were it empty."""
        hit = self._size_caps.get(g)
        if hit is None:
            per = [0] * max(1, len(self.clusters))
            if g > 0:
                for i, size in enumerate(self.size):
                    per[self.cluster_of[i]] += size // g
            hit = self._size_caps[g] = max(per)
        return hit

    def max_shared_free(self) -> int:
        """Largest milli one GPU can still give (a whole free GPU gives 1000)."""
        if any(self.hist[1:]):
            return FULL
        return self.pkeys[-1] if self.pkeys else 0

    def demand(self, milli: int, req) -> int:
        """The milli a worker of ``milli`` takes in the indexes: its footprint in whole units at
        the pool's smallest share when it asks more CPU, memory or disk than its units' share
        (``req``: (cpu, memory, disk) or None); a shared worker's own milli (its node's resources
        are checked where it is placed)."""
        if self.res is None or not req or milli < FULL:
            return milli
        key = (milli, req)
        cache = self._demand
        if key in cache:
            return cache[key]
        hit = cache[key] = self._footprint(milli, req)
        return hit

    def _footprint(self, milli: int, req) -> int:
        units = milli // FULL
        for d in range(DIMS):
            s, asked = self.share[d], req[d]
            if asked and s is not None:
                units = max(units, -(-asked // s) if s else 1 << 20)
        return units * FULL

    def fits_res(self, i: int, req) -> bool:
        """Has node ``i`` ``req`` free (dimensions it does not report never refuse)?"""
        if self.res is None or not req:
            return True
        free, share = self.res[i], self.rshare[i]
        return all(not req[d] or share[d] is None or free[d] >= req[d] for d in range(DIMS))

    def usable_if(self, i: int, gpus: int, res) -> int:
        """Node ``i``'s usable GPUs were ``gpus`` whole GPUs and ``res`` (cpu, memory, disk)
        given back to it (the paper state of a preemption search)."""
        if self.whole is None:
            return self.free[i] + gpus
        usable = self.whole[i] + gpus
        free = self.res[i]
        for d, s in self.rdims[i]:
            q = (free[d] + (res[d] if res else 0)) // s if s else 0
            if q < usable:
                usable = q
        return usable if usable > 0 else 0

    def free_gpus(self, i: int, count: int) -> list[int]:
        """The first ``count`` whole free GPU indices of node ``i``."""
        return [g for g, u in enumerate(self.used[i]) if u == 0][:count]

    def below_cuda(self, least: tuple[int, ...]) -> list[int]:
        """Nodes reporting a CUDA version below ``least`` (a node that reports none is not)."""
        if not least:
            return []
        return [i for i, v in enumerate(self.cuda) if v and v < least]

    def without(self, nodes: list[int]) -> Pool:
        """A copy in which ``nodes`` have nothing free (a job that must not land there plans on
        it; the live pool is untouched)."""
        twin = self.clone()
        for i in nodes:
            if twin.whole is not None:
                twin.whole[i] = 0
            twin._set_free(i, 0)
            for key in [k for k, cells in twin.part.items() if any(n == i for n, _ in cells)]:
                twin.part[key] = {(n, g) for n, g in twin.part[key] if n != i}
                if not twin.part[key]:
                    del twin.part[key]
                    twin.pkeys.remove(key)
        return twin

    def clone(self) -> Pool:
        twin = Pool.__new__(Pool)
        for name in ("flavor", "ids", "index", "size", "leaf_of", "leaf_nodes", "leaf_spine",
                     "spine_leaves", "maxg", "capacity", "cluster", "clusters", "cluster_of",
                     "leaf_cluster", "_size_caps"):
            setattr(twin, name, getattr(self, name))
        twin.used = [row[:] for row in self.used]
        twin.free = self.free[:]
        twin.leaf_hist = [h[:] for h in self.leaf_hist]
        twin.leaf_rank = self.leaf_rank[:]
        twin.bucket = [set(b) for b in self.bucket]
        twin.full_leaves = [set(b) for b in self.full_leaves]
        twin.hist = self.hist[:]
        twin.chist = None if self.chist is None else [h[:] for h in self.chist]
        twin.part = {k: set(v) for k, v in self.part.items()}
        twin.pkeys = self.pkeys[:]
        twin.version = 0
        twin._caps = {}
        twin._gcaps = {}
        twin.share, twin.rshare, twin.rdims, twin.cuda = self.share, self.rshare, self.rdims, self.cuda
        twin._demand = self._demand
        twin.res = None if self.res is None else [row[:] for row in self.res]
        twin.whole = None if self.whole is None else self.whole[:]
        return twin
