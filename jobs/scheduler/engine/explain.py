"""Explain (DESIGN §4): why each still-waiting job waits, computed on demand.

A cycle can leave tens of thousands of jobs waiting; building every explanation eagerly would
cost more than the cycle itself, and callers usually want one (``GET /jobs/{id}/explain/``).
:class:`Explanations` is a read-only mapping {job id: Explain} evaluated against the state at
the END of the cycle (after its admissions, preemptions and reservations). The incremental
Engine keeps that state until its next cycle starts; reading a mapping after that raises
``RuntimeError`` (materialise it first with ``dict(result.explanations)`` if needed).

``position`` is the 1-based place among the waiting jobs in the §5.1 order (priority desc,
dominant share at the end of the cycle asc, submit time, id).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from decimal import Decimal

from jobs.scheduler.engine import fifo
from jobs.scheduler.engine.model import Explain, Holder
from jobs.scheduler.engine.pool import FULL
from jobs.scheduler.engine.preempt import reclaim_order
from jobs.scheduler.engine.state import Pending
from jobs.scheduler.engine.windows import hold_back
from jobs.scheduler.placement import plan_fits

MAX_HOLDERS = 20


class Explanations(Mapping):
    def __init__(self, cycle) -> None:
        self._cycle = cycle
        self._ids: list[str] | None = None
        self._pos: dict[str, int] | None = None
        self._cache: dict[str, Explain] = {}
        self.expired = False

    def _waiting(self) -> list[str]:
        if self._ids is None:
            s, admitted = self._cycle.s, self._cycle.admitted
            waiting = [p for p in s.pending.values() if p.id not in admitted]
            waiting.sort(key=lambda p: (-p.priority, s.turn(p.proj), p.submitted, p.id))
            self._ids = [p.id for p in waiting]
            self._pos = {jid: k for k, jid in enumerate(self._ids, 1)}
        return self._ids

    def __iter__(self) -> Iterator[str]:
        self._check()
        return iter(self._waiting())

    def __len__(self) -> int:
        self._check()
        return len(self._waiting())

    def __contains__(self, job_id: object) -> bool:
        self._check()
        self._waiting()
        return job_id in self._pos

    def __getitem__(self, job_id: str) -> Explain:
        self._check()
        self._waiting()
        if job_id not in self._pos:
            raise KeyError(job_id)
        found = self._cache.get(job_id)
        if found is None:
            p = self._cycle.s.pending[job_id]
            found = self._cache[job_id] = explain(self._cycle, p, self._pos[job_id])
        return found

    def _check(self) -> None:
        if self.expired:
            raise RuntimeError("explanations of an earlier cycle: the engine has moved on")


def explain(cycle, p: Pending, position: int) -> Explain:
    """Why ``p`` waits; a job over its project's aging bound also says how long it has waited
    (jobs/scheduler/engine/fifo.py)."""
    found = _behind(cycle, p, position) or _explain_flavors(cycle, p, position)
    over = fifo.waited(cycle.s, p) if cycle.s.fifo else None
    if over is None:
        return found
    return replace(found, waited_s=over[0], aging_bound_s=over[1], message=(
        f"{found.message}; waiting {_hours(over[0])} h, over the aging bound of {_hours(over[1])} h"))


def _behind(cycle, p: Pending, position: int) -> Explain | None:
    """Reason "fifo": an earlier job of its project that could not be admitted blocks it."""
    s = cycle.s
    if not s.fifo or not cycle.blockers.by or s.held(p) or p.id in cycle.reclaimed:
        return None
    b = cycle.blockers.behind(p.priority, p.proj, p.home, p.submitted, p.id)
    if b is None:
        return None
    why = "strict FIFO" if b[3] == fifo.STRICT else "over its aging bound"
    return Explain(position, "fifo", p.flavor, message=f"waits behind job {b[1]} of its project ({why})",
                   behind=b[1], behind_why=b[3])


def _hours(seconds: int) -> str:
    return format(Decimal(seconds / 3600).quantize(Decimal("0.1")).normalize(), "f")


def _explain_flavors(cycle, p: Pending, position: int) -> Explain:
    """With alternative flavors: the first flavor's answer, the message naming every flavor,
    and ``alternatives`` holding each flavor's own answer in the job's order."""
    if not p.flavors or cycle.s.held(p) or p.id in cycle.reclaimed:
        return _explain(cycle, p, position)
    each = []
    try:
        for f in p.flavors:
            p.flavor = f
            each.append(_explain(cycle, p, position))
    finally:
        p.flavor = p.flavors[0]
    message = "; ".join(f"{e.flavor}: {e.message}" for e in each)
    return replace(each[0], message=message, alternatives=tuple(each))


def _user_cap(p: Pending, position: int, kind: str, cap: int, used: int) -> Explain:
    """Its user's running jobs of the project are at a per-user cap (DESIGN §16)."""
    if kind == "jobs":
        return Explain(position, "user_cap", p.flavor, p.project_id,
                       numbers=(("cap_jobs", cap), ("running_jobs", used)),
                       message=f"user {p.user} runs {used} job(s) in {p.project_id}: the cap is {cap}")
    r = p.min_workers * p.milli
    return Explain(position, "user_cap", p.flavor, p.project_id,
                   numbers=(("cap", cap), ("usage", used), ("request", r)),
                   message=f"user {p.user} holds {_u(used)} + {_u(r)} requested > the user cap "
                           f"{_u(cap)} in {p.project_id}")


def _explain(cycle, p: Pending, position: int) -> Explain:
    s, f = cycle.s, p.flavor
    if s.queue_held(p):
        node = next(n for n in p.path if n in s.on_hold)
        return Explain(position, "queue_hold", f, s.tree.ids[node],
                       message=f"queue on hold: {s.tree.ids[node]} admits nothing new")
    if s.budget_held(p):
        node = next(n for n in p.path if n in s.over_budget)
        return Explain(position, "budget", f, s.tree.ids[node],
                       message=f"{s.tree.ids[node]} is over budget; held for approval")
    capped = s.capped(p) if s.caps else None
    if capped is not None:
        return _user_cap(p, position, *capped)
    if p.id in cycle.reclaimed:
        by = cycle.reclaimed[p.id]
        return Explain(position, "reclaimed", f, message=(
            f"admitted, then reclaimed by in-quota job {by}; retried next cycle"))
    if cycle.invalid(p):
        pool = s.pools[f]
        largest = pool.maxg * FULL
        dim = _beyond_every_node(pool, p)
        message = (f"no node of this flavor has the {dim} one worker asks" if dim
                   else "no node of this flavor is big enough")
        return Explain(position, "invalid", f, numbers=(("per_worker", p.pmilli),
                       ("largest_node", largest)), message=message, resource=dim)
    r = p.min_workers * p.milli
    wait = cycle.exempt_waits.get(p.id)
    if wait is not None:
        return _min_runtime(cycle, p, r, wait, position)
    mode, code = cycle.gate(f, p.path, r)
    if mode is None:
        return _quota(cycle, p, r, code, position)
    return _physical(cycle, p, r, mode, position)


def _min_runtime(cycle, p: Pending, r: int, wait: tuple, position: int) -> Explain:
    """The jobs it could preempt (reclaim, borrowing within the cohort, rule 6) have not yet
    run their priority class's minimum runtime (DESIGN §16): it waits for the last it needs."""
    s = cycle.s
    until, victims = wait
    left = max(0, int(-(-(until - s.now) // 1)))
    minimum = max(int(s.min_runtime.get(v.priority, 0)) for v in victims)
    holders = tuple(Holder(v.job, v.project_id, v.r) for v in victims[:MAX_HOLDERS])
    nums = (("request", r), ("min_runtime_s", minimum), ("exempt_for_s", left))
    names = ", ".join(v.job for v in victims[:MAX_HOLDERS])
    return Explain(position, "min_runtime", p.flavor, None, nums, holders,
                   f"the jobs it may preempt ({names}) are within their minimum runtime of "
                   f"{minimum} s; the last becomes preemptible in {left} s")


def _quota(cycle, p: Pending, r: int, code: str, position: int) -> Explain:
    s, f = cycle.s, p.flavor
    ledger = s.ledgers[f]
    ids = s.tree.ids
    iq = ledger.in_quota_blocker(p.path, r)
    not_in = (f"not in quota at {ids[iq]} (in-quota {_u(ledger.u_q[iq])} + {_u(r)} > "
              f"{_u(ledger.quota[iq])})") if iq >= 0 else "in quota"
    holders = _in_quota_holders(cycle, p, iq) if iq >= 0 else ()
    if code == "borrow_limit":
        n = ledger.cap_blocker(p.path, r)
        q = ledger.quota[n]
        nums = (("usage", ledger.used(n)), ("request", r), ("quota", q),
                ("borrow_limit", ledger.cap[n] - q))
        msg = f"{not_in}; borrow limit of {ids[n]}: {_u(ledger.used(n))} + {_u(r)} > {_u(ledger.cap[n])}"
        return Explain(position, code, f, ids[n], nums, holders, msg)
    if code == "lend_limit":
        held = ledger.sibling_hold(p.path)
        nums = (("usage", ledger.root_used), ("request", r), ("held_back", held),
                ("capacity", ledger.capacity))
        msg = (f"{not_in}; on loan needs {_u(ledger.root_used)} + {_u(r)} + held back {_u(held)} "
               f"<= {_u(ledger.capacity)}; idle quota of others is not lent")
        return Explain(position, code, f, None, nums, holders, msg)
    nums = (("in_quota_usage", ledger.u_q[iq]), ("request", r), ("quota", ledger.quota[iq]))
    return Explain(position, "quota", f, ids[iq], nums, holders, f"{not_in}; borrowing is off")


def _physical(cycle, p: Pending, r: int, mode: str, position: int) -> Explain:
    s, f = cycle.s, p.flavor
    ledger, pool = s.ledgers[f], s.pools[f]
    if mode == "in":
        holders, owed = _loan_holders(cycle, p, r), "in quota"
    else:
        iq = ledger.in_quota_blocker(p.path, r)
        holders = _in_quota_holders(cycle, p, iq)
        owed = (f"on loan only (not in quota at {s.tree.ids[iq]}: in-quota "
                f"{_u(ledger.u_q[iq])} + {_u(r)} > {_u(ledger.quota[iq])})")
    own = next((x.public(s) for x in cycle.reservations if x.job_id == p.id), None)
    if r > ledger.root_room():
        nums = (("usage", ledger.root_used), ("request", r), ("capacity", ledger.capacity))
        msg = f"{owed}; pool full: {_u(ledger.root_used)} + {_u(r)} > {_u(ledger.capacity)}"
        return Explain(position, "capacity", f, None, nums, holders, msg, own)
    below = pool.below_cuda(p.min_cuda) if p.min_cuda else []
    if below and not plan_fits(pool.without(below), p.min_workers, p.pmilli):
        version = ".".join(map(str, p.min_cuda))
        nums = (("nodes_below", len(below)), ("workers", p.min_workers), ("per_worker", p.milli))
        return Explain(position, "cuda", f, None, nums, holders,
                       f"{owed}; nodes of {f} below CUDA {version} are never chosen "
                       f"({len(below)} node(s)); the others have no room now", own, resource=version)
    windowed = _windowed(s, p, pool, owed, holders, own, position) if s.windows else None
    if windowed is not None:
        return windowed
    if s.power is not None and plan_fits(pool, p.min_workers, p.pmilli) and not plan_fits(
            s.power.limit(pool), p.min_workers, p.pmilli):
        racks = s.power.at_cap(f)
        nums = (("workers", p.min_workers), ("per_worker", p.milli), ("racks_at_cap", len(racks)))
        return Explain(position, "power", f, None, nums, holders,
                       f"{owed}; GPUs of {f} are free, but the racks' power caps leave no room for "
                       f"{p.min_workers} × {_u(p.milli)} (at their cap: {', '.join(racks) or 'none'})", own)
    if not plan_fits(pool, p.min_workers, p.pmilli):
        res = _blocking_reservation(cycle, p)
        if res is not None:
            return Explain(position, "reservation", f, None, (("request", r),), holders,
                           f"{owed}; would delay the reservation of {res.job_id}",
                           res.public(s))
        split = _split_over_clusters(cycle, p, owed, holders, own, position)
        if split is not None:
            return split
        short = _short_of(pool, p)
        if short is not None:
            dim, nodes = short
            nums = (("per_worker", p.milli), ("workers", p.min_workers), ("nodes_with_gpus", nodes))
            return Explain(position, "resources", f, None, nums, holders,
                           f"{owed}; waits for {dim} on nodes of {f}: {nodes} node(s) have the GPUs "
                           f"free but not the {dim} for {p.min_workers} × {_u(p.milli)}", own,
                           resource=dim)
        largest = max((k for k, n in enumerate(pool.hist) if n), default=0) * FULL
        nums = (("per_worker", p.milli), ("workers", p.min_workers),
                ("largest_free_node", largest))
        return Explain(position, "placement", f, None, nums, holders,
                       f"{owed}; no node set fits {p.min_workers} × {_u(p.milli)}", own)
    if cycle.closed_by is not None:
        return Explain(position, "reservation", f, None, (("request", r),), holders,
                       f"{owed}; waits behind {cycle.closed_by} (backfill off)")
    return Explain(position, "capacity", f, None, (("request", r),), holders,
                   f"{owed}; capacity freed during this cycle; considered next cycle", own)


def _windowed(s, p: Pending, pool, owed: str, holders, own, position: int) -> Explain | None:
    """Room there is, but a maintenance or another project's reservation it would meet over its
    maximum runtime bars it (DESIGN §17); None when the windows are not why it waits."""
    if not plan_fits(pool, p.min_workers, p.pmilli):
        return None
    barred = s.windows.barred(p.project_id, p.runtime, pool, s.now)
    rest = pool.without([i for i, _ in barred]) if barred else pool
    if barred and not plan_fits(rest, p.min_workers, p.pmilli):
        w = barred[0][1]
        names = tuple(pool.ids[j] for j, x in barred if x is w)
        # Another project's reservation is not named: it may be another tenant's.
        what = "the maintenance" if w.project_id is None else "another project's reservation"
        return Explain(position, "maintenance" if w.project_id is None else "reserved", p.flavor, None,
                       (("workers", p.min_workers), ("per_worker", p.milli)), holders,
                       f"{owed}; not placed on {', '.join(names)}: its maximum runtime crosses "
                       f"{what} at {w.start.isoformat()}", own, window=w)
    held, w = s.windows.held(p.project_id, p.runtime, p.flavor, s.now, lambda pid: s.used_by(pid, p.flavor))
    if held and not plan_fits(hold_back(rest, held), p.min_workers, p.pmilli):
        return Explain(position, "reserved", p.flavor, None,
                       (("reserved", held * FULL), ("workers", p.min_workers), ("per_worker", p.milli)),
                       holders, f"{owed}; {held} GPU(s) of {p.flavor} are reserved for another project "
                                f"from {w.start.isoformat()}", own, window=w)
    return None


DIMENSION_NAMES = ("CPU", "memory", "local disk")


def _beyond_every_node(pool, p: Pending) -> str:
    """The dimension that makes one worker bigger than every node of the pool, when its GPUs
    alone would fit ("" otherwise): its request against the pool's smallest share per unit
    (docs/resources.md, placement by footprint)."""
    if p.req is None or p.milli < FULL or p.milli // FULL > pool.maxg:
        return ""
    for d in range(3):
        share, asked = pool.share[d], p.req[d]
        if asked and share is not None and (not share or -(-asked // share) > pool.maxg):
            return DIMENSION_NAMES[d]
    return ""


def _short_of(pool, p: Pending) -> tuple[str, int] | None:
    """When a job waits although enough GPUs are free — only not on nodes that can feed them —
    the dimension that keeps most of those nodes from taking a worker, and how many nodes have
    the GPUs free (None: the GPUs themselves are short)."""
    if pool.res is None or p.milli < FULL:
        return None
    g = p.milli // FULL
    nodes = [i for i, whole in enumerate(pool.whole) if whole >= g]
    if sum(pool.whole[i] // g for i in nodes) < p.min_workers:
        return None
    short = [0, 0, 0]
    for i in nodes:
        free, share = pool.res[i], pool.rshare[i]
        for d in range(3):
            need = p.req[d] if p.req is not None and p.req[d] else (share[d] or 0) * g
            if share[d] is not None and free[d] < need:
                short[d] += 1
    if not any(short):
        return None
    return DIMENSION_NAMES[short.index(max(short))], len(nodes)


def _split_over_clusters(cycle, p: Pending, owed: str, holders, own, position: int):
    """A gang runs inside one cluster: say so when the GPUs it needs exist (or are free) only
    split over several clusters, rather than "no node set fits" (or, before, "it fits")."""
    pool = cycle.s.pools[p.flavor]
    w, d = p.min_workers, p.pmilli
    if pool.chist is None or w < 2 or d < FULL:
        return None
    g = d // FULL
    largest = pool.largest_cluster(g)
    shape = f"{w} × {d}"
    if largest < w:
        nums = (("per_worker", d), ("workers", w), ("largest_cluster", largest * d))
        return Explain(position, "capacity", p.flavor, None, nums, holders,
                       f"{owed}; a job runs inside one cluster and no cluster of {p.flavor} "
                       f"has {shape} (the largest: {largest} workers)", own)
    if pool.whole_capacity(g) < w:
        return None  # not even split: the usual placement answer
    room = pool.gang_capacity(g)
    nums = (("per_worker", d), ("workers", w), ("largest_free_cluster", room * d))
    return Explain(position, "placement", p.flavor, None, nums, holders,
                   f"{owed}; free GPUs for {shape} only split across clusters; a job runs "
                   f"inside one cluster (one cluster takes {room} workers now)", own)


def _u(milli: int) -> str:
    """Milli-units as the flavor's units, for people: 72000 → "72", 500 → "0.5" (a shared
    request, a slice)."""
    return format((Decimal(milli) / 1000).normalize(), "f")


def _blocking_reservation(cycle, p: Pending):
    pool = cycle.s.pools[p.flavor]
    for res in cycle.res_by_flavor.get(p.flavor, ()):
        res.lift(pool)
        fits = plan_fits(pool, p.min_workers, p.pmilli)
        res.reapply(pool, {})
        if fits and res.job_id != p.id:
            return res
    return None


def _loan_holders(cycle, p: Pending, r: int) -> tuple[Holder, ...]:
    """On-loan jobs using capacity an in-quota job is owed, in reclaim order."""
    out: list[Holder] = []
    total = 0
    for v in reclaim_order(cycle, p):
        out.append(Holder(v.job, v.project_id, v.r))
        total += v.r
        if total >= r or len(out) >= MAX_HOLDERS:
            break
    return tuple(out)


def _in_quota_holders(cycle, p: Pending, node: int) -> tuple[Holder, ...]:
    """In-quota jobs of other projects under the level that is out of quota (overcommit)."""
    runs = [v for _, v in cycle.s.order[p.flavor]
            if v.in_quota and node in v.path and v.proj != p.proj]
    runs.sort(key=lambda v: (-v.r, v.id))
    return tuple(Holder(v.job, v.project_id, v.r) for v in runs[:MAX_HOLDERS])
