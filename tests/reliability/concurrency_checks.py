"""The invariants of the concurrency run, decided from the job event log alone. Pure: the
caller loads the rows; this module replays them (no Django, no database).

**Over-admission** (DESIGN §3 rule 2, as ``quotas/admission.py`` applies it), per flavor, in
milli-units (1000 = one device):

* a job *counts* from its ``queued → admitted`` event (``data.workers`` workers ×
  ``gpus_per_worker`` × ``gpu_milli`` or 1000) until it leaves ``admitted``/``running``; a
  ``scaled`` event changes its worker count; after its ``preemption_signal`` it no longer
  counts for quota or for the capacity others are admitted into (its preemptor already does:
  ``jobs/scheduler/engine/model.py``), it only still occupies its GPUs physically;
* **cap** — for every tree node with a ``borrow_limit``: the counting usage of its subtree
  ≤ effective ``quota + borrow_limit``;
* **capacity** — the counting usage of the whole flavor ≤ ``C`` (healthy capacity);
* **physical** — the GPUs of jobs started on the cluster (a ``dispatched`` event or
  ``running``), terminating victims included, ≤ ``C``: a preemptor starts only once its
  victims are gone; and per device, from the placements the admission and ``scaled`` events
  carry: the started jobs on one GPU use ≤ 1000 milli (nobody starts on a GPU a victim in its
  grace period still runs on);
* **in-quota** (rule 1) — for every tree node: the counting in-quota usage of its subtree
  (``on_loan`` false at admission or as last flipped by an ``on_loan`` event) ≤ ``quota``.

"At no instant": the log is replayed one *writing transaction* at a time (events grouped by
the inserting transaction, PostgreSQL's ``xmin``), transactions in the order of their **last**
event id — the order of their commits as far as the log can tell, since a transaction commits
after its last insert. That order is causal: a transaction that acted on another's committed
change (a cycle admitting into GPUs a cancellation freed) inserted its rows after that commit,
so after all of the other's rows. The first event id is not: a cycle that chose a victim writes
some rows, then its signal finds the victim already cancelled by a transaction that committed
meanwhile — that cancel's row lies between the cycle's rows, and it made the GPUs free before
the cycle's admission became visible (the 50-client run caught the first-id order reporting
such a cancel as one GPU over). The cycle applies its signals before its admissions
(``jobs.scheduling.cycle._apply``), so every row the cycle's admissions rely on precedes them.
Checking between transactions, not between single rows, is what the database promises too:
nobody sees half a cycle.

**Event chains** — per job, in id order: the first transition comes from ``""`` into
``queued`` or ``pending_approval``; each transition starts where the previous one ended and
is allowed by ``jobs.states.TRANSITIONS``; non-transition events happen in the state the job is
in (``from_state == to_state ==`` current); the job's stored state is the last to-state. So no
job was ever in two states (two transitions out of the same state) or moved illegally.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import groupby

from jobs.states import HOLDING, TRANSITIONS, JobState

MILLI = 1000
ENTRY_STATES = frozenset({JobState.QUEUED, JobState.PENDING_APPROVAL})


@dataclass(frozen=True, slots=True)
class JobInfo:
    id: int
    flavor: str
    path: tuple[str, ...]  # tree nodes from the project up to the top-level department
    worker_milli: int  # gpus_per_worker × (gpu_milli or 1000)
    state: str  # the job's stored state at the end


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    tx: int  # the inserting transaction (xmin)
    job_id: int
    kind: str
    from_state: str
    to_state: str
    data: Mapping = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Limit:
    quota: int  # milli
    cap: int | None  # quota + borrow_limit, None without a borrow limit


@dataclass
class Holding:
    workers: int
    on_loan: bool
    terminating: bool = False
    started: bool = False
    placement: list | None = None  # [[[node, gpu, milli], …] per worker], when the log says


@dataclass
class Replay:
    transactions: int = 0
    admissions: int = 0
    max_over: int = 0  # largest excess found over any limit, in milli (0 = never over-admitted)
    violations: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # what a failing test prints besides
    holding: dict[int, Holding] = field(default_factory=dict)  # who holds GPUs at the end

    def over(self, what: str, used: int, limit: int, event: Event) -> None:
        if used > limit:
            self.max_over = max(self.max_over, used - limit)
            if len(self.violations) < 50:
                self.violations.append(
                    f"{what}: {used / MILLI:g} > {limit / MILLI:g} after event {event.id} (tx {event.tx})"
                )


def transactions(events: Iterable[Event]) -> list[list[Event]]:
    """Events grouped by writing transaction, groups in the order of their last event id."""
    groups: dict[int, list[Event]] = defaultdict(list)
    for e in sorted(events, key=lambda e: e.id):
        groups[e.tx].append(e)
    return sorted(groups.values(), key=lambda g: g[-1].id)


def replay(
    jobs: Mapping[int, JobInfo],
    events: Iterable[Event],
    limits: Mapping[tuple[str, str], Limit],
    capacity: Mapping[str, int],
) -> Replay:
    """Replay the log one transaction at a time and check every limit after each."""
    out = Replay()
    for group in transactions(events):
        out.transactions += 1
        for event in group:
            _apply(out, jobs[event.job_id], event)
        touched = {jobs[e.job_id].flavor for e in group}
        for flavor in sorted(touched):
            before = len(out.violations)
            _check(out, jobs, flavor, limits, capacity.get(flavor, 0), group[-1])
            if len(out.violations) > before and len(out.details) < 20:
                out.details.append(_scene(out, jobs, flavor, group))
    return out


def _scene(out: Replay, jobs, flavor: str, group: list[Event]) -> str:
    """For the diagnosis of a violation: the transaction's events and who held the flavor after it."""
    events = "; ".join(
        f"#{e.id} job {e.job_id} {e.kind} {e.from_state}→{e.to_state} {dict(e.data)}" for e in group
    )
    held = sorted(
        (job_id, jobs[job_id].path[0], h.workers * jobs[job_id].worker_milli // MILLI, h.on_loan,
         h.terminating, h.started)
        for job_id, h in out.holding.items()
        if jobs[job_id].flavor == flavor
    )
    return f"tx {group[0].tx}: {events}. Holding (job, project, gpus, on_loan, terminating, started): {held}"


def _apply(out: Replay, job: JobInfo, e: Event) -> None:
    held = out.holding.get(job.id)
    if e.kind == "transition" and e.to_state == JobState.ADMITTED:
        if held is not None:
            out.violations.append(f"job {job.id} admitted while it already holds GPUs (event {e.id})")
        out.holding[job.id] = Holding(
            int(e.data.get("workers") or 0), bool(e.data.get("on_loan")), placement=e.data.get("placement")
        )
        out.admissions += 1
    elif e.kind == "transition" and e.from_state in HOLDING and e.to_state not in HOLDING:
        out.holding.pop(job.id, None)
    elif e.kind == "transition" and e.to_state == JobState.RUNNING and held is not None:
        held.started = True
    elif e.kind in ("preemption_signal", "on_loan", "scaled", "dispatched"):
        if held is None:
            out.violations.append(f"job {job.id}: {e.kind} event {e.id} while it holds no GPUs")
            return
        if e.kind == "preemption_signal":
            held.terminating = True
        elif e.kind == "on_loan":
            held.on_loan = bool(e.data.get("on_loan"))
        elif e.kind == "scaled":
            held.workers = int(e.data.get("workers") or held.workers)
            held.placement = e.data.get("placement")
        else:
            held.started = True


def _check(out: Replay, jobs, flavor: str, limits, capacity: int, last: Event) -> None:
    used: dict[str, int] = defaultdict(int)
    in_quota: dict[str, int] = defaultdict(int)
    live = physical = 0
    for job_id, held in out.holding.items():
        job = jobs[job_id]
        if job.flavor != flavor:
            continue
        milli = held.workers * job.worker_milli
        if held.started:
            physical += milli
        if held.terminating:
            continue
        live += milli
        for node in job.path:
            used[node] += milli
            if not held.on_loan:
                in_quota[node] += milli
    out.over(f"{flavor} capacity", live, capacity, last)
    if physical > capacity and len(out.details) < 20:  # who, for the diagnosis
        started = sorted(
            (job_id, held.workers, held.terminating)
            for job_id, held in out.holding.items()
            if jobs[job_id].flavor == flavor and held.started
        )
        out.details.append(f"after event {last.id}, {flavor} started (job, workers, terminating): {started}")
    out.over(f"{flavor} started on the cluster", physical, capacity, last)
    _check_devices(out, jobs, flavor, last)
    for (node, f), limit in limits.items():
        if f != flavor:
            continue
        if limit.cap is not None:
            out.over(f"{flavor} cap of {node}", used[node], limit.cap, last)
        out.over(f"{flavor} in-quota usage of {node}", in_quota[node], limit.quota, last)


def _check_devices(out: Replay, jobs, flavor: str, last: Event) -> None:
    """No GPU carries more than one device's worth of started jobs."""
    on: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for job_id, held in out.holding.items():
        if held.started and held.placement and jobs[job_id].flavor == flavor:
            for worker in held.placement:
                for node, gpu, milli in worker:
                    on[(node, gpu)].append((job_id, milli))
    for (node, gpu), users in sorted(on.items()):
        used = sum(m for _, m in users)
        if used > MILLI:
            out.over(f"{flavor} GPU {gpu} of node {node} (started jobs {sorted(users)})", used, MILLI, last)


def chain_violations(jobs: Mapping[int, JobInfo], events: Iterable[Event]) -> list[str]:
    """Each job's events form one legal path through the transition table ending in its state."""
    found: list[str] = []
    ordered = sorted(events, key=lambda e: (e.job_id, e.id))
    seen = set()
    for job_id, rows in groupby(ordered, key=lambda e: e.job_id):
        seen.add(job_id)
        found += _chain(jobs[job_id], list(rows))
    found += [f"job {j}: no events" for j in sorted(set(jobs) - seen)]
    return found


def _chain(job: JobInfo, rows: Sequence[Event]) -> list[str]:
    state = ""
    for e in rows:
        if e.kind != "transition":
            if not (e.from_state == e.to_state == state):
                return [f"job {job.id}: {e.kind} event {e.id} in {e.from_state!r}, job was {state!r}"]
            continue
        if e.from_state != state:
            return [f"job {job.id}: event {e.id} leaves {e.from_state!r}, job was {state!r}"]
        legal = e.to_state in ENTRY_STATES if state == "" else e.to_state in TRANSITIONS[JobState(state)]
        if not legal:
            return [f"job {job.id}: illegal transition {state!r} → {e.to_state!r} (event {e.id})"]
        state = e.to_state
    if state != job.state:
        return [f"job {job.id}: stored state {job.state!r}, last event says {state!r}"]
    return []
