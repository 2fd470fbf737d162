"""One scheduling cycle (DESIGN §5) over a :class:`~jobs.scheduler.engine.state.State`.

Order: priority level desc; inside a level the sub-queues (project × flavor) are merged by the
project's Fair Tree key when the snapshot has fair-share maps (DESIGN §16; each admission charges
its project at once, see State.fair_charge), then its current dominant share (both re-read after
every admission, so tenants take turns), then submit time, then id. Each job at its turn: budget
hold → quota rules (§3) → placement → preemption (rule 5 reclaim if in-quota, then rule 6) → else
it waits; the first job of a level
that waits for capacity or placement becomes the level's head and gets a reservation (EASY).
Borrowers are promised their room and placed after the last level (:mod:`jobs.scheduler.engine.borrow`);
then running elastic jobs grow with what is left (:mod:`jobs.scheduler.engine.grow`).

Shortcut, and why it is safe: within the pass free capacity only shrinks (admissions,
reservation blocks; GPUs freed by preemption stay occupied until the next cycle) and quota
rooms only shrink (promises count; a preemption giving quota back is the exception, and what it
would unblock waits for the next cycle), so a job that cannot move at some point cannot move
later in the pass. After a job's turn the rest of its sub-queue is passed over while a cheap
necessary test says "cannot move"; a job that might move goes back to the merge at its own
place in the order. Once a level's head is known, sub-queues that cannot move are dropped.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush

from jobs.scheduler.engine import backfill, consolidate, fifo, grow, preempt
from jobs.scheduler.engine.borrow import Tentative
from jobs.scheduler.engine.model import Admission, Growth, Preemption
from jobs.scheduler.engine.pool import FULL
from jobs.scheduler.engine.state import Pending, Run, State, SubQueue
from jobs.scheduler.placement import plan, plan_fits


class Cycle:
    def __init__(self, state: State, *, frag: bool, backfill: bool, borrowing: bool):
        self.s = state
        self.frag = frag
        self.backfill = backfill
        self.borrowing = borrowing
        self.admitted: dict[str, tuple[Pending, Run, list, tuple[str, ...]]] = {}
        self.preemptions: list[Preemption] = []
        self.reclaimed: dict[str, str] = {}  # fresh victim -> job that reclaimed it
        self.fresh_ghosts: list[Run] = []  # GPUs of un-admitted victims, held until cycle end
        self.reservations: list[backfill.Res] = []
        self.res_by_flavor: dict[str, list[backfill.Res]] = {}
        self.closed_by: str | None = None  # backfill off: the first blocked head stops the rest
        self.tent = Tentative(state)  # on-loan admissions promised until the borrowing phase
        self.lending = True  # True during the in-quota pass (see jobs/scheduler/engine/borrow.py)
        self.no_reclaim: set[tuple] = set()  # shapes no reclaim can place (see preempt.py)
        self.no_priority: dict[tuple, int] = {}
        self.r6_cache: dict[tuple[int, str], int] | None = None  # see preempt.rule6_possible
        self.lift_cache: dict[tuple, tuple[int, bool]] = {}
        self.loosen = 0  # bumped when a preemption gives quota back (see preempt.py)
        self.head_done = False
        self.heap: list = []
        self.level_queues: dict[int, list[SubQueue]] = {}
        self.growths: list[Growth] = []
        self.tried: dict[str, Pending] = {}  # jobs with alternatives evaluated in this cycle
        self.moved: dict[str, tuple[str, ...]] = {}  # job -> jobs moved for it (consolidate.py)
        self.no_consolidate: dict[tuple, int] = {}  # shapes whose search failed (consolidate.failed)
        self.blockers = fifo.Blockers()  # strict FIFO / aging (jobs/scheduler/engine/fifo.py)
        self.own_reservations = 0  # of blockers that are not their level's head (capped)
        # Jobs that wait only for victims within their class's minimum runtime (preempt.py):
        # job id -> (when the last victim it needs becomes preemptible, those victims).
        self.exempt_waits: dict[str, tuple[float, tuple[Run, ...]]] = {}
        # A sub-queue's place in its level: the dominant share, led by the Fair Tree key when
        # the snapshot has fair-share maps (State.turn); without, the share itself (no wrapper).
        self.turn = state.turn if state.fair else state.share

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> None:
        levels: dict[int, list[SubQueue]] = {}
        for sq in self.s.queues.values():
            if sq.pos < len(sq.jobs):
                levels.setdefault(sq.priority, []).append(sq)
        for level in sorted(levels, reverse=True):
            self._level(levels[level])
        self._borrowing_phase()
        for p in self.tried.values():  # not admitted (or admitted, then reclaimed): back home
            if p.id not in self.admitted:
                p.flavor = p.flavors[0]
        if self.s.elastic:
            self.growths = grow.grow(self)

    def _borrowing_phase(self) -> None:
        """Place the promised on-loan admissions, in promise order, in what is left."""
        self.lending = False
        for p in self.tent.release_all():
            if not self.admit_now(p):
                backfill.admit_short(self, p)

    def _level(self, queues: list[SubQueue]) -> None:
        self.head_done = False
        self.level_queues = {}
        s = self.s
        share, shares = (self.turn, {}) if s.fair else (s.share, s.shares)  # a cached share is a dict hit
        heap = []
        for sq in queues:
            self.level_queues.setdefault(sq.proj, []).append(sq)
            sq.epoch += 1
            p = sq.jobs[sq.pos][2]
            heap.append((share(sq.proj), p.submitted, p.id, sq.seq, sq.epoch, sq))
        heapify(heap)
        self.heap = heap
        filtered = False
        while self.heap:
            if self.head_done and not filtered:
                self._filter_heap()  # once per level: stuck queues leave without a turn
                filtered = True
                continue
            key, _, _, _, epoch, sq = heappop(self.heap)
            if epoch != sq.epoch:
                continue
            now = shares.get(sq.proj)
            if (now if now is not None else share(sq.proj)) != key:
                self._push(sq)  # its share (or fair key) grew since it was queued: later turn
                continue
            p = sq.jobs[sq.pos][2]
            if self.s.fifo and self._fifo_turn(sq, p):
                continue
            if not (self.head_done and (self.s.held(p) or self.quick(p) is not None)):
                self._process(p)
            sq.pos += 1
            sq.epoch += 1  # entries pushed while it was processed are stale now
            self._pass_over(sq)
            if sq.pos < len(sq.jobs):
                self._push(sq)

    def _filter_heap(self) -> None:
        """Once the level's head is known, drop every sub-queue that cannot move. Facts about
        each flavor are gathered once, so most sub-queues cost a few comparisons."""
        kept = []
        facts: dict[str, tuple] = {}
        for entry in self.heap:
            sq = entry[5]
            if entry[4] != sq.epoch:
                continue
            if sq.alt or (self.s.fifo and self._fifo_due(sq)):
                kept.append(entry)
                continue
            fa = facts.get(sq.flavor)
            if fa is None:
                fa = facts[sq.flavor] = self._flavor_facts(sq.flavor)
            if self._stuck_fast(sq, fa):
                sq.pos = len(sq.jobs)
            else:
                kept.append(entry)
        heapify(kept)
        self.heap = kept

    def _flavor_facts(self, f: str) -> tuple:
        """(root room, largest whole-free node, largest shared room, latest reservation start,
        the same two rooms were every reservation lifted) of flavor ``f``."""
        pool, ledger = self.s.pools[f], self.s.ledgers[f]
        maxfree = max((k for k, n in enumerate(pool.hist) if n), default=0)
        shared = pool.max_shared_free()
        rs = self.res_by_flavor.get(f, ())
        if not rs:
            return ledger.capacity - ledger.root_used, maxfree, shared, -1.0, maxfree, shared
        lifted: dict[tuple[int, int], int] = {}
        for r in rs:
            for key, amount in r.applied.items():
                lifted[key] = lifted.get(key, 0) + amount
        gain: dict[int, int] = {}
        for (i, x), a in lifted.items():
            if a and pool.used[i][x] == a:
                gain[i] = gain.get(i, 0) + 1
        lifted_free = max([maxfree] + [pool.free[i] + n for i, n in gain.items()])
        lifted_shared = max([shared] + [FULL - pool.used[i][x] + a for (i, x), a in lifted.items()])
        return (ledger.capacity - ledger.root_used, maxfree, shared,
                max(r.start for r in rs) - self.s.now, lifted_free, lifted_shared)

    def _stuck_fast(self, sq: SubQueue, fa: tuple) -> bool:
        k = sq.pos
        r, g, m = sq.suf_r[k], sq.suf_g[k], sq.suf_shared[k]
        root, maxfree, shared, short_until, lifted_free, lifted_shared = fa
        lifted = g <= lifted_free or m <= lifted_shared
        if r <= root and ((g <= maxfree or m <= shared) or self.s.over_budget or (
                (sq.suf_rt[k] <= short_until or self._borrower_reserved(sq.flavor)) and lifted)):
            return self._queue_stuck(sq)  # (an in-quota job may pass a borrower's reservation)
        s = self.s
        if s.ledgers[sq.flavor].loan > 0:
            mode = self.gate(sq.flavor, s.tree.path(sq.proj), r)[0]
            if mode == "in" or (mode == "loan" and preempt.borrow_possible(self, sq.flavor, sq.priority)):
                return False
        return not self._rule6_may(sq, k)

    def _borrower_reserved(self, f: str) -> bool:
        return any(r.loan for r in self.res_by_flavor.get(f, ()))

    def _push(self, sq: SubQueue) -> None:
        sq.epoch += 1
        p = sq.head()
        heappush(self.heap, (self.turn(sq.proj), p.submitted, p.id, sq.seq, sq.epoch, sq))

    def requeue_project(self, proj: int) -> None:
        """A victim's project lost usage: its share dropped, so its turn may come earlier."""
        for sq in self.level_queues.get(proj, ()):
            if sq.pos < len(sq.jobs):
                self._push(sq)

    def _process(self, p: Pending, own_head: bool = False) -> str | None:
        """``p``'s turn; its outcome (None: held, or the level is closed). ``own_head``: a job
        held to FIFO gets a reservation of its own when it is not the level's head."""
        if self.s.held(p) or self.closed_by is not None:
            return None
        outcome = self.evaluate(p)
        if outcome == "capacity" and (own_head or not self.head_done):
            if not self.head_done:
                self.head_done = True
                if not self.backfill:
                    self.closed_by = p.id
            elif not self._own_reservation():
                return outcome
            if self.backfill and not self._outbid(p):
                backfill.reserve(self, p)
        if p.flavors and outcome != "admitted":
            p.flavor = p.flavors[0]
        return outcome

    # -- queueing strategies (jobs/scheduler/engine/fifo.py) ---------------------------------------
    def _fifo_turn(self, sq: SubQueue, p: Pending) -> bool:
        """A turn under strict FIFO or aging; False leaves it to the best-effort path. A job
        behind a blocker of its project ends its sub-queue's turns (the rest are later still,
        on the same flavors); a job held to FIFO always gets a full turn and, not admitted,
        becomes a blocker."""
        s = self.s
        if self.blockers.by and self.blockers.behind(sq.priority, sq.proj, sq.flavor, p.submitted, p.id):
            sq.pos = len(sq.jobs)
            sq.epoch += 1
            return True
        why = fifo.held_to_fifo(s, sq.proj, p)
        if why is None or s.held(p):
            return False
        outcome = self._fifo_outcome(p)
        # A job only promised its room on loan (placed in the borrowing phase, borrow.py) is not
        # admitted yet: a later in-quota job of its project would be placed first and could take
        # that room, passing it. It blocks its project like a job that waits.
        promised = outcome == "admitted" and p.id not in self.admitted
        if (promised or outcome in ("quota", "capacity")) and not fifo.hopeless(self, p):
            self.blockers.add(sq, p, why)
            sq.pos = len(sq.jobs)
            sq.epoch += 1  # entries pushed while it was processed are stale now
            return True
        sq.pos += 1
        sq.epoch += 1
        self._pass_over(sq)
        if sq.pos < len(sq.jobs):
            self._push(sq)
        return True

    def _fifo_outcome(self, p: Pending) -> str | None:
        """The turn of a job held to FIFO. When the cheap necessary test already says it cannot
        move, the full evaluation (placement, preemption searches) is skipped — as the
        best-effort pass-over skips it; only its reservation is still due."""
        if p.flavors or not self.head_done or self.closed_by is not None:
            return self._process(p, own_head=True)
        kind = self.quick(p)
        if kind is None:
            return self._process(p, own_head=True)
        if kind == "capacity" and self.backfill and self._own_reservation() and not self._outbid(p):
            backfill.reserve(self, p)
        return kind

    def _own_reservation(self) -> bool:
        """May one more blocker that is not its level's head get a reservation in this cycle?
        Each costs a timeline search, and every later job's backfill test checks it."""
        if self.own_reservations >= fifo.MAX_OWN_RESERVATIONS:
            return False
        self.own_reservations += 1
        return True

    def _fifo_due(self, sq: SubQueue) -> bool:
        """Is the next job of ``sq`` held to FIFO (it must get its turn, not be passed over)?
        Held jobs are skipped on the way: they block nobody."""
        s, jobs = self.s, sq.jobs
        k = sq.pos
        while k < len(jobs) and s.held(jobs[k][2]):
            k += 1
        return k < len(jobs) and fifo.held_to_fifo(s, sq.proj, jobs[k][2]) is not None

    def _outbid(self, p: Pending) -> bool:
        """A borrower that waits because earlier borrowers were promised the room gets no
        reservation: blocking GPUs now would take them from those earlier borrowers."""
        return bool(self.tent.root_taken(p.flavor)) \
            and self.gate(p.flavor, p.path, p.min_workers * p.milli)[0] == "loan"

    def _pass_over(self, sq: SubQueue) -> None:
        if self.closed_by is not None:
            sq.pos = len(sq.jobs)
            return
        if self.s.fifo and self._fifo_due(sq):
            return  # never passed over: its turn decides whether it blocks its project
        if sq.pos < len(sq.jobs) and self.quick(sq.jobs[sq.pos][2]) is None:
            return  # the usual case after an admission: the next job may move too
        if sq.pos < len(sq.jobs) and self._queue_stuck(sq):
            sq.pos = len(sq.jobs)
            return
        while sq.pos < len(sq.jobs):
            p = sq.jobs[sq.pos][2]
            if not self.s.held(p):
                kind = self.quick(p)
                if kind is None or (kind == "capacity" and not self.head_done):
                    return
            sq.pos += 1

    def _queue_stuck(self, sq: SubQueue) -> bool:
        """O(1) pass-over test: even the least demanding remaining job of ``sq`` cannot move.

        Cheapest tests first: is there room now; if not, only a reservation it can backfill
        onto or a preemption could let it in."""
        if sq.alt:
            return False  # its jobs are passed over one by one (quick)
        s, k, f = self.s, sq.pos, sq.flavor
        if s.over_budget and sq.proj not in s.budget_exempt and \
                any(n in s.over_budget for n in s.tree.path(sq.proj)):
            return False
        pool, ledger = s.pools[f], s.ledgers[f]
        r, g, m = sq.suf_r[k], sq.suf_g[k], sq.suf_shared[k]
        mode = self.gate(f, s.tree.path(sq.proj), r)[0]
        if mode is None:
            return not self._rule6_may(sq, k)
        root = ledger.capacity - ledger.root_used
        if mode == "loan":
            root -= self.tent.root_taken(f)
        if r <= root:
            if (g <= pool.maxg and pool.whole_capacity(int(g)) >= 1) \
                    or (m <= FULL and pool.max_shared_free() >= m):
                return False
            if not self.head_done or (self.res_by_flavor and self._short_may_fit(sq, k, mode == "in")):
                return False
        elif not self.head_done:
            return False
        if mode == "in" and ledger.loan > 0:
            return False
        if mode == "loan" and preempt.borrow_possible(self, f, sq.priority):
            return False
        return not self._rule6_may(sq, k)

    def _rule6_may(self, sq: SubQueue, k: int) -> bool:
        if not preempt.rule6_possible(self, sq.proj, sq.flavor, sq.priority):
            return False
        # A failed search for the smallest shape of the queue fails for every bigger one.
        g, w = sq.suf_g[k], sq.suf_w[k]
        if g <= self.s.pools[sq.flavor].maxg and sq.suf_shared[k] > FULL:
            key = (sq.proj, sq.flavor, int(g) * FULL, int(w), sq.priority)
            return self.no_priority.get(key) != self.loosen
        return True

    def _short_may_fit(self, sq: SubQueue, k: int, in_quota: bool) -> bool:
        rt = sq.suf_rt[k]
        if not backfill.short_within(self, sq.flavor, rt, in_quota):
            return False
        g, m = sq.suf_g[k], sq.suf_shared[k]
        return (g <= self.s.pools[sq.flavor].maxg
                and backfill.lifted_fits(self, sq.flavor, rt, 1, g * FULL, in_quota)) \
            or (m <= FULL and backfill.lifted_fits(self, sq.flavor, rt, 1, m, in_quota))

    # -- evaluation ----------------------------------------------------------------------
    def gate(self, flavor: str, path: tuple[int, ...], r: int) -> tuple[str | None, str]:
        """Quota rules for a request of ``r``: ("in"|"loan", "") or (None, reason)."""
        ledger = self.s.ledgers[flavor]
        tcap = ledger.tree_cap_room(path)
        if r <= tcap and r <= ledger.in_quota_room(path):
            return "in", ""
        if not self.borrowing:
            return None, "quota"
        if r > self.tent.tree_room(flavor, path, tcap):
            return None, "borrow_limit"
        root = ledger.root_room() - self.tent.root_taken(flavor)
        if r <= root and r + ledger.sibling_hold(path) > root:
            return None, "lend_limit"
        return "loan", ""

    def invalid(self, p: Pending) -> bool:
        """Can no node of the flavor ever take one worker (its GPUs, or its footprint when it
        asks more CPU, memory or disk than their share)?"""
        pool = self.s.pools[p.flavor]
        if p.milli < FULL:
            return not pool.maxg
        pm = p.pmilli
        return p.milli % FULL != 0 or pm // FULL > pool.maxg

    def quick(self, p: Pending) -> str | None:
        """Cheap necessary test: None when ``p`` might move now, else "quota"/"capacity".
        With alternatives: None when it might move on any of its flavors."""
        if not p.flavors:
            return self._quick(p)
        kinds = []
        try:
            for f in p.flavors:
                p.flavor = f
                kinds.append(self._quick(p))
                if kinds[-1] is None:
                    return None
        finally:
            p.flavor = p.flavors[0]
        return "capacity" if "capacity" in kinds else "quota"

    def _quick(self, p: Pending) -> str | None:
        if self.invalid(p):
            return "quota"
        r = p.min_workers * p.milli
        mode, _ = self.gate(p.flavor, p.path, r)
        if mode is None:
            return None if preempt.rule6_possible(self, p.proj, p.flavor, p.priority) else "quota"
        root = self.s.ledgers[p.flavor].root_room()
        if mode == "loan":
            root -= self.tent.root_taken(p.flavor)
        if r > root:  # no room by count (GPUs on reservations do not add any): preempt or wait
            return None if preempt.possible(self, p, mode) else "capacity"
        if plan_fits(self.s.pools[p.flavor], p.min_workers, p.pmilli):
            return None
        if backfill.short_for(self, p, mode == "in") or preempt.possible(self, p, mode):
            return None
        if consolidate.applies(self.s, p) and not consolidate.failed(self, p, mode):
            return None
        return "capacity"

    def evaluate(self, p: Pending) -> str:
        """Full evaluation at the job's turn: "admitted" | "quota" | "capacity"."""
        if p.flavors:
            return self._evaluate_alternatives(p)
        if self.invalid(p):
            return "quota"
        mode, _ = self.gate(p.flavor, p.path, p.min_workers * p.milli)
        if mode is not None:
            if self.admit_now(p) or backfill.admit_short(self, p, mode == "in"):
                return "admitted"
            if mode == "in" and preempt.reclaim(self, p):
                return "admitted"
            if mode == "loan" and preempt.borrow(self, p):
                return "admitted"
        if preempt.by_priority(self, p):
            return "admitted"
        if mode is not None and consolidate.consolidate(self, p, mode):
            return "admitted"
        return "quota" if mode is None else "capacity"

    def _evaluate_alternatives(self, p: Pending) -> str:
        """The first flavor, in the job's order, that takes it without preempting anyone;
        failing that, the first where a preemption (rule 5, then rule 6) makes room. Why not
        preempt on the first flavor at once: a victim would lose its work while the job could
        have started elsewhere. Leaves ``p.flavor`` on the chosen flavor (admitted or
        promised), or on the first flavor it waits for room on (the reservation's flavor)."""
        self.tried[p.id] = p
        modes = []
        for f in p.flavors:
            p.flavor = f
            mode = None if self.invalid(p) else self.gate(f, p.path, p.min_workers * p.milli)[0]
            if mode is not None and (self.admit_now(p) or backfill.admit_short(self, p, mode == "in")):
                return "admitted"
            modes.append(mode)
        for f, mode in zip(p.flavors, modes, strict=True):
            p.flavor = f
            if self.invalid(p):
                continue
            if (mode == "in" and preempt.reclaim(self, p)) or (
                    mode == "loan" and preempt.borrow(self, p)) or preempt.by_priority(self, p):
                return "admitted"
        room = [f for f, mode in zip(p.flavors, modes, strict=True) if mode is not None]
        p.flavor = room[0] if room else p.flavors[0]
        return "capacity" if room else "quota"

    def grant(self, p: Pending) -> tuple[int, int]:
        """Largest worker counts the quota rules and the free capacity allow (elastic §5.4):
        in quota, and at all (on loan beyond the in-quota part)."""
        ledger = self.s.ledgers[p.flavor]
        d, path, f = p.milli, p.path, p.flavor
        tcap = ledger.tree_cap_room(path)
        root = ledger.root_room()
        room_in = min(ledger.in_quota_room(path), tcap, root)
        room = room_in
        if self.borrowing:
            loan_root = root - self.tent.root_taken(f) - ledger.sibling_hold(path)
            room = max(room, min(self.tent.tree_room(f, path, tcap), loan_root))
        pool = self.s.pools[f]
        pm = p.pmilli  # on the nodes: its footprint (docs/resources.md)
        if pm < FULL:
            phys = 1 if pool.max_shared_free() >= pm else 0
        else:
            phys = pool.gang_capacity(pm // FULL)  # the most ONE cluster takes
        cap = min(p.workers, phys)
        if self.s.caps:
            cap = min(cap, self.s.user_room(p) // d)
        return min(cap, room_in // d), min(cap, room // d)

    def admit_now(self, p: Pending, preempts: tuple[str, ...] = ()) -> bool:
        """Admit ``p`` now if it fits; in the in-quota pass a job that runs on loan at its
        largest size is promised its room instead (placed in the borrowing phase)."""
        w_in, w_all = self.grant(p)
        if self.lending and not preempts:
            if w_all > w_in and w_all >= p.min_workers:  # only on loan at its largest size
                self.tent.promise(p, w_all * p.milli)
                return True
            if w_in < p.min_workers:
                return False
            w = w_in
        else:
            w = max(w_in, w_all)
            if w < p.min_workers:
                return False
        placement = self.place(p, w)
        if placement is None:
            return False
        self.admit(p, w, placement, preempts)
        return True

    def place(self, p: Pending, w: int) -> list | None:
        """``w`` workers of ``p`` on its flavor's nodes: each on a node with room for its
        footprint (:meth:`Pending.pmilli`), taking its own GPUs there."""
        # Nodes below the job's CUDA version (DESIGN §15) and those a reservation or
        # maintenance bars to it (DESIGN §17) are never chosen.
        pool = self.s.placeable(p)
        pm = p.pmilli
        # ``req``: a shared worker's, on a node that can feed it (a whole worker's is in ``pm``).
        found = plan(pool, w, pm, frag=self.frag, req=p.req)
        if found is None or pm == p.milli:
            return found
        g = p.milli // FULL
        return [worker[:g] for worker in found]  # the rest is what its request strands

    def admit(self, p: Pending, w: int, placement: list, preempts: tuple[str, ...]) -> Run:
        s = self.s
        ledger = s.ledgers[p.flavor]
        r = w * p.milli
        in_quota = r <= ledger.in_quota_room(p.path) and r <= ledger.tree_cap_room(p.path)
        ids = s.pools[p.flavor].ids
        workers = tuple([tuple([(ids[i], g, m) for i, g, m in worker]) for worker in placement])
        one = len(placement) == 1
        if one:
            flat, slots = workers[0], placement[0]
        else:
            flat = tuple([x for worker in workers for x in worker])
            slots = tuple([x for worker in placement for x in worker])
        run = Run(p.id, p.project_id, p.proj, p.path, p.flavor, r, p.priority, p.preemptible,
                  s.now, s.now + p.runtime, flat, slots)
        run.fresh = True
        run.user = p.user
        if p.checkpointing:
            run.saved = None
        if s.fair and p.id not in self.tent.charged:  # a promised job was charged at its promise
            self.tent.charged.add(p.id)
            s.fair_charge(p.proj, r)
        if p.req is not None and s.pools[p.flavor].res is not None:
            run.req = req = p.req  # one worker's request, on the node of its first GPU
            run.res = ((slots[0][0], req),) if one else tuple([(worker[0][0], req) for worker in placement])
        else:
            run.res = s.pools[p.flavor].implied(slots)
        s.add_run(run, in_quota)
        self.admitted[p.id] = (p, run, workers, preempts)
        return run

    # -- output --------------------------------------------------------------------------
    def admissions(self) -> tuple[Admission, ...]:
        moved = self.moved
        return tuple(Admission(p.id, len(workers), workers, run.in_quota, preempts, run.flavor,
                               moved.get(p.id, ()))
                     for p, run, workers, preempts in self.admitted.values())
