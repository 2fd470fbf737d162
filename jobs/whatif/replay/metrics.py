"""What a replay measures (pure: no Django). Definitions in docs/replay.md.

The :class:`Recorder` is told every state change of a job on the virtual clock and keeps
time integrals of allocated GPUs and of each project's usage against its quota, in O(1) per
change (per flavor f, running sums I_f = Σ_p max(0, q − u) of idle quota and
B_f = Σ_p max(0, u − q) of usage above quota; ``idle_quota_reuse_ratio`` =
∫ Σ_f min(B_f, I_f) dt ÷ ∫ Σ_f I_f dt: the share of idle quota that other tenants used. When the
quotas of a flavor sum to its capacity, B_f ≤ I_f always and the min changes nothing; it stops
use of unassigned capacity from counting as reuse of idle quota).

A what-if that changes the quotas (the advisor's ``overcommit_ratio``) changes what counts as
idle and as borrowed, so reuse is also measured against a ``reference`` quota set — today's —
on the same schedule: ``*_idle_quota_reuse_ratio_today_quotas``. Only that figure compares
sharing across candidates; the plain one is reuse of the quotas the run itself had in force.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping

Quotas = Mapping[str, Mapping[str, int]]  # project -> flavor -> milli-GPUs


def percentile(values: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least ``p`` % of the values at or below it."""
    if not values:
        return 0.0
    s = sorted(values)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


class Reuse:
    """Idle quota and its reuse against one quota set, as time integrals (milli-seconds)."""

    def __init__(self, quotas: Quotas) -> None:
        self.quota = {(t, f): q for t, per in quotas.items() for f, q in per.items()}
        self.usage: dict[tuple[str, str], int] = defaultdict(int)
        self.idle_f: dict[str, int] = defaultdict(int)  # per flavor: Σ_p max(0, q − u) now
        self.excess_f: dict[str, int] = defaultdict(int)  # per flavor: Σ_p max(0, u − q) now
        for (_, f), q in self.quota.items():
            self.idle_f[f] += q
        self.idle = sum(self.quota.values())  # Σ_f idle_f now
        self.excess = 0  # Σ_f min(excess_f, idle_f) now: usage beyond quota that others' idle quota covers
        self.idle_int = self.excess_int = 0.0
        self.window: tuple[float, float] | None = None  # (idle, excess) integrals at the window's end

    def advance(self, dt: float) -> None:
        self.idle_int += self.idle * dt
        self.excess_int += self.excess * dt

    def use(self, key: tuple[str, str], delta: int) -> None:
        q = self.quota.get(key, 0)
        u = self.usage[key]
        f = key[1]
        idle0, excess0 = self.idle_f[f], self.excess_f[f]
        idle_f = idle0 - max(0, q - u) + max(0, q - u - delta)
        excess_f = excess0 - max(0, u - q) + max(0, u + delta - q)
        self.usage[key] = u + delta
        self.idle_f[f], self.excess_f[f] = idle_f, excess_f
        self.idle += idle_f - idle0
        self.excess += min(idle_f, excess_f) - min(idle0, excess0)

    def ratio(self) -> float:
        return self.excess_int / self.idle_int if self.idle_int > 0 else 0.0

    def window_ratio(self) -> float:
        wi, we = self.window
        return we / wi if wi > 0 else 0.0


class Recorder:
    def __init__(self, quotas: Quotas, cap: Mapping[str, int], wait_bound: float = 3600.0,
                 reference: Quotas | None = None) -> None:
        """``quotas``: the project quotas in force (milli-GPUs per flavor); ``reference``: the
        quotas reuse is also judged against (today's; None: the same)."""
        self.wait_bound = wait_bound  # seconds: ``waited_over_bound`` counts the jobs queued longer
        self.reuse = Reuse(quotas)
        self.today = Reuse(quotas if reference is None else reference)
        self.quota = self.reuse.quota
        self.capacity = sum(cap.values())  # milli
        self.cap = dict(cap)  # per flavor, milli
        self.started_on: dict[str, int] = defaultdict(int)  # per flavor: starts (a restart counts again)
        self.alloc = 0  # milli allocated now
        self.t = None  # time of the last integration
        self.alloc_int = 0.0  # milli-seconds
        self.t_first = self.t_last = None
        self.submit: dict[str, float] = {}
        self.tenant: dict[str, str] = {}
        self.waiting_since: dict[str, float] = {}
        self.wait: dict[str, float] = defaultdict(float)
        self.done: dict[str, float] = {}
        self.gpu_s: dict[str, float] = defaultdict(float)  # per tenant, milli-seconds
        self.held: dict[str, tuple[str, str, int, float]] = {}  # job -> (tenant, flavor, milli, since)
        self.use_s: dict[tuple[str, str], float] = defaultdict(float)  # (tenant, flavor), milli-seconds
        self.loan_s: dict[tuple[str, str], float] = defaultdict(float)  # of it on loan (``tier``)
        self.loan_since: dict[str, float] = {}  # held jobs now on loan -> since
        self.ever: set[str] = set()
        self.preemptions = 0
        self.lost_s = 0.0  # milli-seconds of victims' work lost (restarted from zero)
        self.moves = 0  # preemptions that moved a job for consolidation (issue 36)
        self.move_lost_s = 0.0  # milli-seconds the moved jobs spent saving instead of working
        self.window: tuple[float, float] | None = None  # (t, alloc integral) at the window's end
        # Stranded GPUs (free, but their node's free CPU / memory cannot feed them), set after every
        # cycle by a replay with resources: now, the most seen, and their time integral (GPU-seconds).
        self.stranded_now = 0
        self.stranded_max = 0
        self.stranded_int = 0.0

    def mark_window(self, t: float) -> None:
        """Close the arrival window at ``t`` (the last submit): the ``window_*`` figures."""
        self._advance(t)
        self.window = (t, self.alloc_int)
        for r in (self.reuse, self.today):
            r.window = (r.idle_int, r.excess_int)

    # -- integrals ------------------------------------------------------------------------
    def _advance(self, t: float) -> None:
        if self.t is None:
            self.t = t
        dt = t - self.t
        if dt > 0:
            self.alloc_int += self.alloc * dt
            self.stranded_int += self.stranded_now * dt
            self.reuse.advance(dt)
            self.today.advance(dt)
            self.t = t
        if self.t_first is None or t < self.t_first:
            self.t_first = t
        if self.t_last is None or t > self.t_last:
            self.t_last = t

    def _use(self, key: tuple[str, str], delta: int) -> None:
        self.reuse.use(key, delta)
        self.today.use(key, delta)
        self.alloc += delta

    # -- job events -----------------------------------------------------------------------
    def submitted(self, job: str, tenant: str, t: float) -> None:
        self._advance(t)
        self.submit[job] = t
        self.tenant[job] = tenant
        self.waiting_since[job] = t

    def started(self, job: str, flavor: str, milli: int, t: float) -> None:
        self._advance(t)
        since = self.waiting_since.pop(job)
        self.wait[job] += t - since
        self.ever.add(job)
        tenant = self.tenant[job]
        self.held[job] = (tenant, flavor, milli, t)
        self.started_on[flavor] += 1
        self._use((tenant, flavor), milli)

    def tier(self, job: str, on_loan: bool, t: float) -> None:
        """A held job is on loan (or in quota again) from ``t`` (rule 1, after each cycle)."""
        if job not in self.held:
            return
        if on_loan and job not in self.loan_since:
            self.loan_since[job] = t
        elif not on_loan and job in self.loan_since:
            self._loan_until(job, t)

    def _loan_until(self, job: str, t: float) -> None:
        tenant, flavor, milli, _ = self.held[job]
        self.loan_s[(tenant, flavor)] += milli * (t - self.loan_since.pop(job))

    def released(self, job: str, t: float, *, finished: bool, lost: bool = False) -> None:
        """The job's GPUs are free at ``t``: it finished, or (a victim) exited and waits again;
        ``lost``: a victim whose work restarts from zero (no checkpoint) — its run was lost."""
        self._advance(t)
        if job in self.loan_since:
            self._loan_until(job, t)
        tenant, flavor, milli, since = self.held.pop(job)
        if lost and not finished:
            self.lost_s += milli * (t - since)
        self.gpu_s[tenant] += milli * (t - since)
        self.use_s[(tenant, flavor)] += milli * (t - since)
        self._use((tenant, flavor), -milli)
        if finished:
            self.done[job] = t
        else:
            self.waiting_since[job] = t

    def stranded(self, t: float, gpus: int) -> None:
        """From ``t`` on, ``gpus`` whole free GPUs are stranded (the engine's pools after a cycle)."""
        self._advance(t)
        self.stranded_now = gpus
        self.stranded_max = max(self.stranded_max, gpus)

    def preempted(self) -> None:
        self.preemptions += 1

    def moved(self) -> None:
        """One of the preemptions moved a checkpointing job for consolidation."""
        self.moves += 1

    def move_lost(self, job: str, seconds: float) -> None:
        """A moved job's work lost: its GPUs over ``seconds`` (signal to exit) did no work."""
        self.move_lost_s += self.held[job][2] * seconds

    # -- summary --------------------------------------------------------------------------
    def summary(self, end: float | None = None, *, detail: bool = False) -> dict:
        end = self.t_last if end is None else end
        if end is not None:
            self._advance(end)
            for job in list(self.loan_since):
                self._loan_until(job, end)
                self.loan_since[job] = end
            for job, (tenant, flavor, milli, since) in self.held.items():  # still running at the end
                self.gpu_s[tenant] += milli * (end - since)
                self.use_s[(tenant, flavor)] += milli * (end - since)
                self.held[job] = (tenant, flavor, milli, end)
        span = (end - self.t_first) if end is not None and self.t_first is not None else 0.0
        delays = [self.wait[j] for j in self.submit if j not in self.waiting_since]
        jcts = [self.done[j] - self.submit[j] for j in self.done]
        alloc_rate = self.alloc_int / (self.capacity * span) if span > 0 and self.capacity else 0.0
        out = {
            "jobs": len(self.submit),
            "finished": len(self.done),
            "never_started": len(self.submit) - len(self.ever),
            "avg_queue_delay_s": _mean(delays),
            "p50_queue_delay_s": percentile(delays, 50),
            "p95_queue_delay_s": percentile(delays, 95),
            "p99_queue_delay_s": percentile(delays, 99),
            "max_queue_delay_s": max(delays, default=0.0),
            "wait_bound_s": self.wait_bound,
            "waited_over_bound": self._over_bound(self.submit, end),
            "avg_jct_s": _mean(jcts),
            "gpu_allocation_rate": alloc_rate,
            "idle_quota_reuse_ratio": self.reuse.ratio(),
            "idle_quota_reuse_ratio_today_quotas": self.today.ratio(),
            "idle_quota_gpu_s": self.reuse.idle_int / 1000,
            "borrowed_gpu_s": self.reuse.excess_int / 1000,
            "preemptions": self.preemptions,
            "preempted_gpu_hours_lost": self.lost_s / 1000 / 3600,
            "consolidation_moves": self.moves,
            "consolidation_gpu_hours_lost": self.move_lost_s / 1000 / 3600,
            "makespan_s": span,
            "stranded_gpus_mean": self.stranded_int / span if span > 0 else 0.0,
            "stranded_gpus_max": self.stranded_max,
            "stranded_gpu_hours": self.stranded_int / 3600,
        }
        if self.window is not None and self.t_first is not None:
            wt, wa = self.window
            wspan = wt - self.t_first
            out["window_s"] = wspan
            busy = self.capacity * wspan
            out["window_gpu_allocation_rate"] = wa / busy if busy > 0 else 0.0
            out["window_idle_quota_reuse_ratio"] = self.reuse.window_ratio()
            out["window_idle_quota_reuse_ratio_today_quotas"] = self.today.window_ratio()
        out["tenants"] = self._tenants(end)
        out["flavors"] = self._flavors(span)
        if detail:
            out["job_queue_delay_s"] = {j: self.wait[j] for j in self.submit if j not in self.waiting_since}
            usage: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
            for (tenant, flavor), ms in sorted(self.use_s.items()):
                usage[tenant][flavor] = {"gpu_hours": ms / 1000 / 3600,
                                         "on_loan_gpu_hours": self.loan_s[(tenant, flavor)] / 1000 / 3600}
            out["usage"] = dict(usage)
        return out

    def _over_bound(self, jobs, end: float | None) -> int:
        """Jobs queued longer than ``wait_bound`` in all: every wait so far, and for a job still
        waiting at the end of the replay its wait until then (a job that never started counts)."""
        n = 0
        for j in jobs:
            w = self.wait[j]
            since = self.waiting_since.get(j)
            if since is not None and end is not None:
                w += end - since
            n += w > self.wait_bound
        return n

    def _flavors(self, span: float) -> dict[str, dict]:
        """Per flavor: capacity, GPU-hours used, allocation rate over the run and starts (a job
        with alternative flavors counts on the flavor it ran on; a restart counts again)."""
        used: dict[str, float] = defaultdict(float)
        for (_, flavor), ms in self.use_s.items():
            used[flavor] += ms
        rows = {}
        for f in sorted(set(self.cap) | set(used)):
            gpus = self.cap.get(f, 0)
            rows[f] = {
                "gpus": gpus / 1000,
                "gpu_hours": used[f] / 1000 / 3600,
                "gpu_allocation_rate": used[f] / (gpus * span) if gpus and span > 0 else 0.0,
                "starts": self.started_on[f],
            }
        return rows

    def _tenants(self, end: float | None) -> dict[str, dict]:
        by: dict[str, list[str]] = defaultdict(list)
        for j, t in self.tenant.items():
            by[t].append(j)
        rows = {}
        for t in sorted(by):
            ids = by[t]
            delays = [self.wait[j] for j in ids if j not in self.waiting_since]
            jcts = [self.done[j] - self.submit[j] for j in ids if j in self.done]
            rows[t] = {
                "jobs": len(ids),
                "finished": len(jcts),
                "avg_queue_delay_s": _mean(delays),
                "p95_queue_delay_s": percentile(delays, 95),
                "p99_queue_delay_s": percentile(delays, 99),
                "max_queue_delay_s": max(delays, default=0.0),
                "waited_over_bound": self._over_bound(ids, end),
                "avg_jct_s": _mean(jcts),
                "gpu_hours": self.gpu_s[t] / 1000 / 3600,
                "quota_gpus": {f: q / 1000 for (tt, f), q in sorted(self.quota.items()) if tt == t},
            }
        return rows


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
