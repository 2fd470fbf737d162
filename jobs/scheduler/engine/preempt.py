"""Preemption inside a cycle: reclaim (DESIGN §3 rule 5) and within-project priority (rule 6).

Victims are taken in the rule's order until the job fits, then unneeded ones are given back
(:func:`quotas.admission.minimal_victim_set`); reclaim does this on paper, rule 6 (a handful
of candidates) on the live state by *lifting* jobs reversibly. The job is admitted into the
room at once; its
victims' GPUs that it does not take stay occupied until the next cycle (they are still running
through their grace period), so nobody else is admitted onto a GPU that is not yet free.

A victim that was itself admitted earlier in this same cycle never started: it is un-admitted
(explanation "reclaimed") instead of preempted.

Two limits keep preemption from going round in circles (docs/scheduling.md, *Preemption
without loops*): a reclaim never takes an equal- or higher-priority job of the reclaimer's own project
(:func:`reclaim_order`), and a job behind a reservation never takes victims on the GPUs that
reservation counts on unless it ends before it starts (:func:`_reserved`).

Which victims first (rule 5 inside each tier of the tree, and rule 6):
:func:`victim_key` (docs/scheduling.md, *Victim order*) — lowest priority,
then grown workers (the job shrinks, nothing stops), then victims no larger than the need, then
the least work lost (GPU-hours since the last checkpoint). A job younger than its priority
class's minimum runtime is never a victim (:meth:`State.exempt`); when only such jobs stand in
the way, the waiting job's explanation says so (``cycle.exempt_waits``).

A borrower may also take on-loan GPUs from borrowers of lower priority (:func:`borrow`, like
Kueue's ``borrowWithinCohort`` with ``LowerPriority``).

Grown workers (units, see :mod:`jobs.scheduler.engine.grow`) are victims of their own: a unit taken alone
shrinks its job at once (its GPUs are free from the next cycle, no grace period: the job goes
on with its other workers). A job taken as a whole takes its units with it, whether the search
chose them or not, and they share its grace period.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import takewhile

from jobs.scheduler.engine import backfill
from jobs.scheduler.engine.model import Preemption
from jobs.scheduler.engine.pool import FULL
from jobs.scheduler.engine.state import Pending, Run
from jobs.scheduler.placement import plan_fits
from quotas.admission import minimal_victim_set, priority_victims


def rule6_possible(cycle, proj: int, flavor: str, priority: int) -> bool:
    """Has the project a preemptible job of lower priority in ``flavor``? The lowest such
    priority is taken once per cycle: admissions in a cycle are never candidates for the
    level being processed or the ones after it (same or higher priority), and victims
    leaving only make the answer conservative."""
    lowest = cycle.r6_cache
    if lowest is None:
        lowest = cycle.r6_cache = {}
        for (pj, f), runs in cycle.s.by_proj.items():
            low = min((v.priority for v in runs.values() if v.preemptible), default=None)
            if low is not None:
                lowest[(pj, f)] = low
    low = lowest.get((proj, flavor))
    return low is not None and low < priority


def possible(cycle, p: Pending, mode: str) -> bool:
    """Could a preemption let ``p`` in? (cheap, may say yes wrongly, never no wrongly)."""
    s = cycle.s
    if mode == "in" and s.ledgers[p.flavor].loan > 0 and _shape(p) not in cycle.no_reclaim:
        return True
    if mode == "loan" and borrow_possible(cycle, p.flavor, p.priority) \
            and _borrow_shape(p) not in cycle.no_reclaim:
        return True
    if cycle.no_priority.get(_rule6_key(p)) == cycle.loosen:
        return False
    return rule6_possible(cycle, p.proj, p.flavor, p.priority)


def reclaim(cycle, p: Pending) -> bool:
    """Rule 5: an in-quota job preempts on-loan jobs anywhere, nearest first.

    The search runs on paper (:class:`_Paper`: quota rooms and GPU counts; the pool is not
    touched), then the chosen victims are lifted for real and the fit is confirmed."""
    s = cycle.s
    if s.ledgers[p.flavor].loan <= 0 or _shape(p) in cycle.no_reclaim:
        return False
    shielded: list[Run] = []  # filled by the order too (equal and higher priorities of p's project)
    return _take_on_loan(cycle, p, reclaim_order(cycle, p, shielded), _shape(p), "reclaim", shielded)


def borrow_possible(cycle, flavor: str, priority: int) -> bool:
    """Is some job on loan in ``flavor`` of a priority below ``priority``? (``loan_sorted``
    starts with the lowest priority.)"""
    loans = cycle.s.loan_sorted.get(flavor)
    return cycle.borrowing and bool(loans) and loans[0][0] < priority


def borrow(cycle, p: Pending) -> bool:
    """Borrowing within the cohort: ``p`` (on loan only) takes GPUs from running on-loan jobs of
    lower priority, anywhere in the tree, in :func:`victim_key` order (Kueue's
    ``borrowWithinCohort`` with ``LowerPriority``). The rules for a borrower stay: its caps and
    the siblings' hold-backs (rule 4) count on paper as in :func:`_fits`. Victims of equal or
    higher priority are never taken, so two borrowers cannot take turns preempting each other."""
    if not borrow_possible(cycle, p.flavor, p.priority) or _borrow_shape(p) in cycle.no_reclaim:
        return False
    need = p.min_workers * p.milli
    lower = [e[3] for e in takewhile(lambda e: e[0] < p.priority, cycle.s.loan_sorted[p.flavor])]
    now = cycle.s.now
    lower.sort(key=lambda v: victim_key(v, need, now))
    return _take_on_loan(cycle, p, iter(lower), _borrow_shape(p), "borrow", [])


def _take_on_loan(cycle, p: Pending, order: Iterator[Run], shape: tuple, reason: str,
                  shielded: list[Run]) -> bool:
    """Rule 5 (``reason`` "reclaim", ``p`` in quota) or borrowing within the cohort ("borrow",
    ``p`` on loan): take on-loan victims from ``order`` on paper until ``p`` fits, keep a
    minimal set, then lift them for real and confirm."""
    s = cycle.s
    loan = reason == "borrow"
    paper = _Paper(cycle, p, loan=loan)
    chosen = []
    helps = _helper(cycle, p, paper)
    exempt: list[Run] = []
    reserved = _reserved(cycle, p, in_quota=not loan)
    for v in order:
        if helps is not None and not helps(v):
            continue
        if reserved and _on(v, reserved):
            shielded.append(v)
            continue
        if s.exempt(v):
            exempt.append(v)
            continue
        paper.take(v)
        chosen.append(v)
        if paper.fits():
            break
    else:
        if exempt:
            _note_exempt(cycle, p, paper, exempt)
        elif not shielded and not paper.room.fits(p.min_workers):
            # Even with every on-loan job gone it would not fit, and within a cycle GPUs only
            # get scarcer (admissions, reservations, victims' grace): skip this shape now on.
            # Not when some were shielded from ``p`` alone: another project could take them;
            # nor when some are exempt (minimum runtime): explain names them.
            cycle.no_reclaim.add(shape)
        return False
    chosen = paper.useful(chosen)
    paper = _Paper(cycle, p, loan=loan)
    victims = minimal_victim_set(chosen, paper.take, paper.give, paper.fits)
    if victims is None:
        # The paper fits with none of them: what blocks ``p`` is something it does not count
        # (a shared request's cores on its fragment's node); taking nobody cannot help.
        return False
    victims = _with_units(victims)
    for v in victims:
        s.lift(v)
    if not _fits(cycle, p, in_quota=not loan):
        for v in victims:
            s.unlift(v)
        return False
    return _admit_over(cycle, p, victims, reason)


def victim_key(v: Run, need: int, now: float, fair=None) -> tuple:
    """The victim order inside one tier of rule 5 (and for borrowing within the cohort): what a
    preemption of ``v`` costs, cheapest first, for a job that needs ``need`` milli.

    1. lowest priority (rule 5);
    2. a grown worker before a whole job: the job shrinks towards its minimum and runs on;
    3. no larger than the need before larger (a 256-GPU gang is never stopped for one 8-GPU
       replica while smaller victims exist);
    4. with fair share (``fair``: project → Fair Tree key), the tenant most over its share first
       (DESIGN §16) — after 3, so fairness never makes a reclaim stop more than it needs;
    5. the smallest excess: a job larger than the need stops GPUs nobody asked for;
    6. the least work lost: its GPUs × seconds since its last checkpoint (0 for a job that
       checkpoints on the preemption signal, or a worker whose job runs on);
    7. most recently started, then id (deterministic)."""
    whole = v.r + sum(u.r for u in v.units) if v.base is None else v.r
    excess = whole - need if whole > need else 0
    lost = 0.0 if v.saved is None or v.base is not None else whole * max(0.0, now - v.saved)
    over = () if fair is None else tuple([-x for x in fair(v.proj)])  # most over its share first
    return (v.priority, v.base is None, excess > 0, over, excess, lost, -v.started, v.id)


def _note_exempt(cycle, p: Pending, paper: _Paper, exempt: list[Run]) -> None:
    """``p`` could not take what it needs: would it with the exempt jobs too? Then it waits for
    their minimum runtime; record when the last one it needs becomes preemptible."""
    s = cycle.s
    taken = []
    for v in sorted(exempt, key=lambda v: (s.exempt_until(v), v.id)):
        paper.take(v)
        taken.append(v)
        if paper.fits():
            cycle.exempt_waits[p.id] = (s.exempt_until(v), tuple(taken))
            return


def _helper(cycle, p: Pending, paper: _Paper):
    """When only GPUs are short (not quota), a victim can help only if one of its nodes could
    host a worker with every on-loan job there gone; others are skipped, not taken."""
    if p.milli < FULL or paper.root < paper.need or max(paper.short.values()) > 0:
        return None
    pool = cycle.s.pools[p.flavor]
    free, loans, g = pool.free, cycle.s.loan_gpus[p.flavor], p.pmilli // FULL
    if pool.res is not None:  # on-loan jobs give back CPU, memory and disk too
        held = cycle.s.loan_res.get(p.flavor, {})

        def helps_res(v: Run) -> bool:
            return any(pool.usable_if(i, loans.get(i, 0), held.get(i)) >= g for i, _, _ in v.slots)
        return helps_res

    def helps(v: Run) -> bool:
        return any(free[i] + loans.get(i, 0) >= g for i, _, _ in v.slots)
    return helps


class _Paper:
    """Quota rooms and GPU counts for ``p`` with some on-loan jobs taken away on paper."""

    __slots__ = ("need", "workers", "root", "short", "room")

    def __init__(self, cycle, p: Pending, *, loan: bool = False):
        ledger = cycle.s.ledgers[p.flavor]
        self.need = p.min_workers * p.milli
        self.workers = p.min_workers
        self.root = ledger.root_room()
        self.short = {n: self.need - (ledger.cap[n] - ledger.used(n)) for n in p.path}
        if loan:  # a borrower: the promises made before it and the siblings' hold-backs count
            tent = cycle.tent
            self.root -= tent.root_taken(p.flavor) + ledger.sibling_hold(p.path)
            for n in p.path:
                self.short[n] += tent.node.get((p.flavor, n), 0)
        self.room = _Room(cycle.s.pools[p.flavor], p.pmilli)

    def take(self, v: Run) -> None:
        self._count(v, -1)
        self.room.free_slots(v.slots, v.res)

    def give(self, v: Run) -> None:
        self._count(v, 1)
        self.room.refill(v.slots, v.res)

    def _count(self, v: Run, sign: int) -> None:
        self.root -= sign * v.root_r
        short = self.short
        for n in v.path:
            if n in short:
                short[n] += sign * v.r

    def fits(self) -> bool:
        return self.root >= self.need and self.room.fits(self.workers) \
            and max(self.short.values()) <= 0

    def useful(self, chosen: list[Run]) -> list[Run]:
        """``chosen`` (all taken, fitting) without the victims that free nothing a worker can
        use, when quota does not need them either: the rule-5 order is blind to GPUs, so the
        greedy often takes many scattered small jobs before one node has room."""
        room = self.room
        kept = [v for v in chosen if room.helps(v.slots, v.res)]
        if len(kept) == len(chosen):
            return chosen
        dropped = [v for v in chosen if not room.helps(v.slots, v.res)]
        if self.root - sum(v.root_r for v in dropped) < self.need:
            return chosen
        for n, left in self.short.items():  # left <= 0: what the dropped ones may take back
            if left + sum(v.r for v in dropped if n in v.path) > 0:
                return chosen
        return kept


class _Room:
    """Workers of one size that fit, with some slots freed on paper. Counted per cluster
    (``cap[c]``): a gang runs inside one, so victims must free room in ONE cluster. With CPU,
    memory and disk (``pool.res``), a node's room is its usable GPUs once the victims' GPUs and
    requests are given back (``Pool.usable_if``)."""

    __slots__ = ("pool", "milli", "g", "used", "free", "cap", "gained", "res_gained")

    def __init__(self, pool, milli: int):
        self.pool, self.milli = pool, milli
        self.g = max(1, milli // FULL)
        self.used: dict[tuple[int, int], int] = {}
        self.free: dict[int, int] = {}
        self.gained: dict[int, int] = {}  # whole GPUs freed on paper, per node
        self.res_gained: dict[int, list[int]] = {}
        # A shared request fits by milli (``fits``); its counts are kept but never read.
        self.cap = list(pool.cluster_capacities(self.g)) if milli >= FULL \
            else [0] * max(1, len(pool.clusters))

    def _move(self, i: int, gpus: int, res, sign: int) -> None:
        """Node ``i`` gains (``sign`` 1) or loses whole GPUs and requests on paper."""
        pool, g = self.pool, self.g
        f = self.free.get(i, pool.free[i])
        self.gained[i] = self.gained.get(i, 0) + sign * gpus
        if res is not None:
            row = self.res_gained.setdefault(i, [0, 0, 0])
            for d in range(3):
                row[d] += sign * res[d]
        n = pool.usable_if(i, self.gained[i], self.res_gained.get(i))
        self.free[i] = n
        self.cap[pool.cluster_of[i]] += n // g - f // g

    def free_slots(self, slots, res=()) -> None:
        used = self.pool.used
        whole: dict[int, int] = {}
        for i, x, m in slots:
            u = self.used.get((i, x), used[i][x]) - m
            self.used[(i, x)] = u
            if u == 0:
                whole[i] = whole.get(i, 0) + 1
        per = _per_node(res)
        for i in whole.keys() | per.keys():
            self._move(i, whole.get(i, 0), per.get(i), 1)

    def refill(self, slots, res=()) -> None:
        used = self.pool.used
        whole: dict[int, int] = {}
        for i, x, m in slots:
            old = self.used.get((i, x), used[i][x])
            self.used[(i, x)] = old + m
            if old == 0 and m:
                whole[i] = whole.get(i, 0) + 1
        per = _per_node(res)
        for i in whole.keys() | per.keys():
            self._move(i, whole.get(i, 0), per.get(i), -1)

    def fits(self, workers: int) -> bool:
        if self.milli < FULL:
            return self.pool.max_shared_free() >= self.milli or any(
                FULL - u >= self.milli for u in self.used.values())
        return max(self.cap) >= workers

    def helps(self, slots, res=()) -> bool:
        """Does any slot (or request) sit where the paper state gained room a worker can use?"""
        free, g = self.pool.free, self.g
        for i, x, _ in slots:
            if self.milli < FULL:
                if FULL - self.used.get((i, x), FULL) >= self.milli:
                    return True
            elif self.free.get(i, 0) // g > free[i] // g:
                return True
        if self.milli >= FULL:
            return any(self.free.get(i, 0) // g > free[i] // g for i, _ in res)
        # A shared worker needs one GPU's fragment AND its node's CPU / memory / disk: a victim
        # whose cores sit on a node with such a fragment helps even if its own GPU slot does not.
        return any(self._fragment_on(i) for i, _ in res)

    def _fragment_on(self, i: int) -> bool:
        used = self.pool.used[i]
        return any(FULL - self.used.get((i, x), used[x]) >= self.milli for x in range(len(used)))


def _per_node(res) -> dict[int, list[int]]:
    per: dict[int, list[int]] = {}
    for i, req in res:
        row = per.setdefault(i, [0, 0, 0])
        for d in range(3):
            row[d] += req[d]
    return per


def by_priority(cycle, p: Pending) -> bool:
    """Rule 6: preempt lower-priority preemptible jobs of the same project (any split)."""
    s = cycle.s
    runs = s.by_proj.get((p.proj, p.flavor))
    if not runs:
        return False
    key = _rule6_key(p)
    if cycle.no_priority.get(key) == cycle.loosen:
        return False
    candidates = priority_victims(runs.values(), p.priority)
    need, now = p.min_workers * p.milli, s.now
    candidates.sort(key=lambda v: victim_key(v, need, now))  # what costs least first, as rule 5
    reserved = _reserved(cycle, p)
    kept = [v for v in candidates if not _on(v, reserved)] if reserved else candidates
    exempt = [v for v in kept if s.exempt(v)] if s.min_runtime else []
    if exempt:
        kept = [v for v in kept if not s.exempt(v)]
    if not kept and not exempt:
        return False
    victims = minimal_victim_set(kept, s.lift, s.unlift,
                                 lambda: _fits(cycle, p, in_quota=False)) if kept else None
    if victims is None:
        if exempt:
            _note_exempt_live(cycle, p, kept + exempt, exempt)
        elif len(kept) == len(candidates):  # else a shorter job of the same shape might pass
            cycle.no_priority[key] = cycle.loosen
        return False
    whole = _with_units(victims)
    for v in whole[len(victims):]:
        s.lift(v)
    return _admit_over(cycle, p, whole, "priority")


def _note_exempt_live(cycle, p: Pending, every: list[Run], exempt: list[Run]) -> None:
    """Rule 6's :func:`_note_exempt`, on the live state (lifted and put back)."""
    s = cycle.s
    exempt = sorted(exempt, key=lambda v: (s.exempt_until(v), v.id))
    pool = [v for v in every if v not in exempt]
    for v in pool:
        s.lift(v)
    taken: list[Run] = []
    for v in exempt:
        s.lift(v)
        taken.append(v)
        if _fits(cycle, p, in_quota=False):
            cycle.exempt_waits[p.id] = (s.exempt_until(v), tuple(taken))
            break
    for v in pool + taken:
        s.unlift(v)


def _reserved(cycle, p: Pending, in_quota: bool = False) -> set[tuple[int, int]]:
    """GPUs the reservations made earlier in this cycle count on and ``p`` would outlast.

    A reservation blocks the GPUs that are free now; the busy ones it needs are freed by its
    start because the jobs on them end by then. A preemption hands such a GPU to a new job,
    which may run past that start: the head's start slips, cycle after cycle (soak: gangs
    that waited for days). So a job behind a reservation (same level after the head, or a
    lower level) may preempt only jobs off the reserved GPUs — unless it ends before the
    reservation starts, as EASY lets any job behind the head do. A reclaim (``in_quota``)
    passes a borrower's reservation as backfill does (jobs/scheduler/engine/backfill.py)."""
    limit = cycle.s.now + p.runtime
    out: set[tuple[int, int]] = set()
    for res in cycle.res_by_flavor.get(p.flavor, ()):
        if not backfill.passes(res, limit, in_quota):
            out.update((i, x) for i, x, _ in res.slots)
    return out


def _on(v: Run, gpus: set[tuple[int, int]]) -> bool:
    return any((i, x) in gpus for i, x, _ in v.slots)


def _with_units(victims: list[Run]) -> list[Run]:
    """``victims`` plus the units of every job taken as a whole (appended at the end)."""
    have = {v.id for v in victims}
    extra = [u for v in victims for u in v.units if u.id not in have]
    return victims + extra if extra else victims


# Failure cache of rule 6: within a cycle admissions and reservations only take room away, so
# a failed search stays failed until a preemption gives quota back (``cycle.loosen``).
def _shape(p: Pending) -> tuple:
    return (p.flavor, p.milli, p.pmilli, p.min_workers)


def _borrow_shape(p: Pending) -> tuple:
    # Borrowing within the cohort: its candidates depend on its priority.
    return ("borrow", p.priority, *_shape(p))


def _rule6_key(p: Pending) -> tuple:
    # ``pmilli`` (the footprint on the nodes) is the size the queue's pass-over tests know.
    return (p.proj, p.flavor, p.pmilli, p.min_workers, p.priority)


def _fits(cycle, p: Pending, *, in_quota: bool) -> bool:
    ledger = cycle.s.ledgers[p.flavor]
    r = p.min_workers * p.milli
    if r > ledger.root_room():
        return False
    if in_quota:
        if r > ledger.in_quota_room(p.path) or r > ledger.tree_cap_room(p.path):
            return False
    elif cycle.gate(p.flavor, p.path, r)[0] is None:
        return False
    pool = cycle.s.pools[p.flavor]
    if cycle.s.power is not None:  # the victims' boards count as given back (DESIGN §18)
        pool = cycle.s.power.limit(pool)
    return plan_fits(pool, p.min_workers, p.pmilli)


def reclaim_order(cycle, p: Pending, shielded: list[Run] | None = None) -> Iterator[Run]:
    """Rule 5 order: same project, then each enclosing department outwards, then the rest;
    inside a level by :func:`victim_key` (lowest priority first, then what costs least).

    A job of ``p``'s own project with an equal or higher priority is never a victim (it goes
    to ``shielded``). Higher: inside a project rule 6 ranks jobs by priority, and that job may
    well have preempted ``p`` by rule 6 — it is on loan whenever it is larger than the project's
    quota, e.g. a gang. Reclaiming it would let it preempt ``p`` back, and so on for ever (soak:
    pairs of jobs preempting each other 17 times). Equal: the project's own on-loan GPUs were
    borrowed from others, so taking them gives nobody quota back — the project only swaps a
    running job for a waiting one of the same priority and loses the victim's work (replay: a
    64-GPU gang reclaimed four times by its own project's 8-GPU jobs, docs/scheduling.md). The
    project's lower priorities stay its nearest victims, as rule 6 would take them anyway."""
    s = cycle.s
    need, now = p.min_workers * p.milli, s.now

    fair = s.fair_key if s.fair else None

    def key(v: Run) -> tuple:
        return victim_key(v, need, now, fair)

    inner = None
    for anc in p.path:
        tier = []
        for e in s.loan_sub.get((p.flavor, anc), ()):
            v = e[3]
            if inner is None:  # p's own project
                if v.priority >= p.priority:
                    if shielded is not None:
                        shielded.append(v)
                    continue
                tier.append(v)
            elif inner not in v.path:
                tier.append(v)
        tier.sort(key=key)
        yield from tier
        inner = anc
    rest = [e[3] for e in s.loan_sorted[p.flavor] if inner not in e[3].path]
    rest.sort(key=key)
    yield from rest


def _admit_over(cycle, p: Pending, victims: list[Run], reason: str) -> bool:
    s = cycle.s
    for v in victims:
        s.forget(v)
    # A unit taken alone is released at once: the preemptor has nothing to wait for.
    preempts = tuple(v.id for v in victims if not v.fresh and v.base is None)
    if not cycle.admit_now(p, preempts):
        for v in victims:  # cannot happen when plan_fits is exact; stay consistent anyway
            s.unlift(v)
            s.reindex(v)
        return False
    whole = {v.id for v in victims if v.base is None}
    for v in victims:
        if v.base is None:
            _retire(cycle, v, p, reason)
        elif v.job not in whole:
            _shrink(cycle, v, p, reason)
    return True


def _shrink(cycle, unit: Run, p: Pending, reason: str) -> None:
    """One grown worker of a running job goes; the job runs on with the others."""
    s = cycle.s
    s.retire(unit, s.now)  # what the preemptor did not take stays busy until the cycle ends
    cycle.fresh_ghosts.append(unit)
    s.detach_unit(unit)
    worker = int(unit.id.rsplit("/", 1)[1])
    cycle.preemptions.append(Preemption(unit.job, reason, p.id, worker))
    cycle.loosen += 1
    cycle.requeue_project(unit.proj)


def _retire(cycle, v: Run, p: Pending, reason: str) -> None:
    s = cycle.s
    s.elastic.pop(v.id, None)
    for unit in list(v.units):  # the job stops as a whole: its grown workers share its grace
        v.slots += unit.slots
        v.placement += unit.placement
        v.res += unit.res
        s.detach_unit(unit)
    if v.fresh:  # never started: its GPUs are free for the next cycle
        s.retire(v, s.now)
        del cycle.admitted[v.id]
        cycle.reclaimed[v.id] = p.id
        cycle.fresh_ghosts.append(v)
    else:
        s.retire(v, s.now + s.grace.get(v.priority, 0))
        v.terminating = True
        s.terminating[v.id] = v
        cycle.preemptions.append(Preemption(v.id, reason, p.id))
    cycle.loosen += 1
    cycle.requeue_project(v.proj)
