"""A recorded history made by the production scheduler (issue 25 item 1: fidelity of a replay).

``record(...)`` builds a small pool in the database — departments, projects, quota nodes with a
lend limit, a night quota window and a loan — and drives a generated workload with contention
through ``jobs.scheduling.cycle.schedule_once`` (the real service: snapshot from the database with the
effective limits of that instant, the pure engine, every decision written as conditional updates
and event rows) on a virtual clock in the past. A stand-in for the backend's status sync moves
the jobs with ``job_transition`` and the backend's instants, as ``jobs.clusters.dispatch`` does: an
admitted job starts ``latency`` seconds later, ends after its run time, and a preemption victim
exits at the end of its grace period and is requeued (its work restarts). Cycles run on every
submit / finish / exit, like ``request_cycle``, and every ``period`` seconds while jobs wait, like
beat's periodic cycle (which is what notices a window opening or a loan starting).

Used by tests/replay/test_history_fidelity.py and bench/history_fidelity.py.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from jobs.models import Job, JobEvent, PriorityClass
from jobs.scheduling.cycle import schedule_once
from jobs.states import JobState
from jobs.transitions import job_transition
from portal.models import Department, Project, User
from quotas.models import Cluster, Flavor, Loan, LoanState, Node, QuotaNode, QuotaWindow
from quotas.selectors import site_zone

SUBMIT, EXIT, FINISH, START, TICK = 0, 1, 2, 3, 4  # order within one instant
# project code -> (department code, share of the jobs)
PROJECTS = {"nlp": ("ai", 0.35), "cv": ("ai", 0.15), "chat": ("svc", 0.2), "x": ("lab", 0.3)}
SHAPES = ((1, 1), (2, 1), (4, 1), (8, 1), (8, 2))  # (GPUs per worker, workers)


@dataclass
class Recorded:
    start: datetime  # the virtual clock's origin (first submission at or after it)
    end: datetime  # everything has ended by then
    jobs: int
    cycles: int
    preemptions: int


def build_pool(
    *, nodes: int = 4, window: bool = True
) -> tuple[Flavor, dict[str, Project], dict[str, QuotaNode]]:
    flavor = Flavor.objects.create(
        name="A100-80G", vendor="nvidia", model="A100", memory_mib=81920, k8s_resource_name="nvidia.com/gpu"
    )
    cluster = Cluster.objects.create(name="hist", kind="simulator")
    for i in range(nodes):
        Node.objects.create(
            cluster=cluster,
            name=f"g{i:02d}",
            flavor=flavor,
            gpu_count=8,
            zone="z1",
            spine="s1",
            leaf=f"l{i // 2}",
        )
    depts = {code: Department.objects.create(code=code, name=code.upper()) for code in ("ai", "svc", "lab")}
    projects = {
        code: Project.objects.create(code=code, name=code, department=depts[d])
        for code, (d, _share) in PROJECTS.items()
    }
    per = Decimal(nodes * 8) / 4  # a quarter of the pool per unit below
    q = {
        "ai": QuotaNode.objects.create(flavor=flavor, department=depts["ai"], quota=2 * per),
        "nlp": QuotaNode.objects.create(flavor=flavor, project=projects["nlp"], quota=per),
        "cv": QuotaNode.objects.create(flavor=flavor, project=projects["cv"], quota=per),
        # svc lends only half its quota by day; a night window lends all of it
        "svc": QuotaNode.objects.create(
            flavor=flavor, department=depts["svc"], quota=per, lend_limit=per / 2
        ),
        "chat": QuotaNode.objects.create(flavor=flavor, project=projects["chat"], quota=per),
        "lab": QuotaNode.objects.create(flavor=flavor, department=depts["lab"], quota=per),
        "x": QuotaNode.objects.create(flavor=flavor, project=projects["x"], quota=per, borrow_limit=per),
    }
    if window:
        QuotaWindow.objects.create(
            quota_node=q["svc"], name="night", start_time="20:00", end_time="08:00", lend_limit=per
        )
    return flavor, projects, q


def workload(seed: int, jobs: int, span_s: float) -> list[tuple[float, str, int, int, float, int]]:
    """(submit s, project, GPUs per worker, workers, run s, priority) — Poisson arrivals over the span."""
    rng = random.Random(seed)
    codes = list(PROJECTS)
    weights = [PROJECTS[c][1] for c in codes]
    out, t = [], 0.0
    rate = jobs / span_s
    for _ in range(jobs):
        t += rng.expovariate(rate)
        gpus, workers = rng.choice(SHAPES)
        run = round(min(7200.0, max(120.0, rng.lognormvariate(7.4, 0.6))))
        prio = 500 if rng.random() < 0.1 else 100
        out.append((round(t), rng.choices(codes, weights)[0], gpus, workers, run, prio))
    return out


class _Driver:
    def __init__(self, t0: datetime, flavor: Flavor, projects: dict, latency: float, period: float):
        self.t0, self.flavor, self.projects = t0, flavor, projects
        self.latency, self.period = latency, period
        self.user = User.objects.create(username="hist-user")
        self.classes = {
            v: PriorityClass.objects.get_or_create(
                name=f"hist-{v}", defaults={"value": v, "grace_seconds": 0}
            )[0]
            for v in (100, 500)
        }
        self.heap: list = []
        self.seq = 0
        self.run_s: dict[int, float] = {}
        self.token: dict[int, int] = {}
        self.cycles = self.preemptions = 0
        self.seen: set = set()  # admissions (job id, admitted at) and signals already handled

    def push(self, t: float, kind: int, payload) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, payload))

    def at(self, t: float) -> datetime:
        return self.t0 + timedelta(seconds=t)

    def submit(self, t: float, spec) -> None:
        _t, project, gpus, workers, run, prio = spec
        at = self.at(t)
        job = Job.objects.create(
            name=f"h{self.seq}",
            project=self.projects[project],
            submitted_by=self.user,
            kind="training",
            flavor=self.flavor,
            priority_class=self.classes[prio],
            workers=workers,
            gpus_per_worker=gpus,
            image="img",
            max_runtime_seconds=run,
            sim_duration_seconds=run,
            state=JobState.QUEUED,
            state_changed_at=at,
            submitted_at=at,
            approved=True,
        )
        JobEvent.objects.create(
            job=job, from_state="", to_state=JobState.QUEUED, occurred_at=at, reason="submitted"
        )
        self.run_s[job.pk] = run

    def start(self, t: float, jid: int) -> None:
        job = Job.objects.get(pk=jid)
        if job.state != JobState.ADMITTED or job.terminating_since is not None:
            return  # preempted before it started: its exit handles it
        job_transition(
            job, JobState.RUNNING, reason="started", occurred_at=self.at(t), time_source="simulator"
        )
        self.token[jid] = self.token.get(jid, 0) + 1
        self.push(t + self.run_s[jid], FINISH, (jid, self.token[jid]))

    def finish(self, t: float, jid: int, token: int) -> bool:
        if self.token.get(jid) != token:
            return False  # a preempted run
        job = Job.objects.get(pk=jid)
        return job_transition(
            job, JobState.SUCCEEDED, reason="completed", occurred_at=self.at(t), time_source="simulator"
        )

    def exit(self, t: float, jid: int) -> None:
        """A victim's exit (as jobs.clusters.dispatch._finish then _requeue), at the backend's instant."""
        job = Job.objects.get(pk=jid)
        if job.terminating_since is None or job.state not in (JobState.ADMITTED, JobState.RUNNING):
            return  # listed twice by two cycles at one instant: already out
        at = self.at(t)
        self.token[jid] = self.token.get(jid, 0) + 1
        job_transition(job, JobState.PREEMPTED, reason="preempted", occurred_at=at, time_source="simulator")
        job_transition(
            job,
            JobState.QUEUED,
            reason="requeued after preemption",
            occurred_at=at,
            placement=[],
            granted_workers=None,
            on_loan=None,
            terminating_since=None,
            admitted_at=None,
            requeue_count=job.requeue_count + 1,
        )
        # the portal's own clock stamped the state change; the virtual clock is the truth here
        Job.objects.filter(pk=jid).update(state_changed_at=at, finished_at=None)

    def cycle(self, t: float) -> None:
        now = self.at(t)
        schedule_once(now, warm=False)
        self.cycles += 1
        admitted = Job.objects.filter(state=JobState.ADMITTED, admitted_at=now).values_list("id", flat=True)
        for jid in admitted:
            if ("admit", jid, now) not in self.seen:  # a second cycle at one instant lists them again
                self.seen.add(("admit", jid, now))
                self.push(t + self.latency, START, jid)
        victims = Job.objects.filter(terminating_since=now).values_list("id", "priority_class__grace_seconds")
        for jid, grace in victims:
            if ("signal", jid, now) not in self.seen:
                self.seen.add(("signal", jid, now))
                self.preemptions += 1
                self.push(t + grace, EXIT, jid)

    def waiting(self) -> bool:
        return Job.objects.filter(state=JobState.QUEUED, project__in=self.projects.values()).exists()

    def run(self, specs) -> float:
        for spec in specs:
            self.push(spec[0], SUBMIT, spec)
        last = 0.0
        while self.heap:
            t = self.heap[0][0]
            changed = tick = False
            while self.heap and self.heap[0][0] == t:
                _t, kind, _s, payload = heapq.heappop(self.heap)
                if kind == SUBMIT:
                    self.submit(t, payload)
                    changed = True
                elif kind == START:
                    self.start(t, payload)
                elif kind == FINISH:
                    changed |= self.finish(t, *payload)
                elif kind == EXIT:
                    self.exit(t, payload)
                    changed = True
                else:
                    tick = True
            last = t
            if changed or tick:
                self.cycle(t)
            if self.waiting() and not any(k == TICK for _t, k, _s, _p in self.heap):
                self.push((math.floor(t / self.period) + 1) * self.period, TICK, None)  # beat's grid
        return last


def record(
    *,
    seed: int = 7,
    jobs: int = 80,
    span_s: float = 4 * 3600,
    nodes: int = 4,
    latency: float = 5.0,
    period: float = 60.0,
    loan: bool = True,
    window: bool = True,
) -> Recorded:
    """Build the pool and record the workload; the clock starts at 18:00 (site zone) three days
    ago, so the night window opens at 20:00 during the run; the loan (lab lends ai a quarter of
    its quota) runs from 1 h to 2.5 h."""
    zone = site_zone()
    local = timezone.now().astimezone(zone) - timedelta(days=3)
    t0 = local.replace(hour=18, minute=0, second=0, microsecond=0)
    flavor, projects, q = build_pool(nodes=nodes, window=window)
    if loan:
        Loan.objects.create(
            lender=q["lab"],
            borrower=q["ai"],
            amount=q["lab"].quota / 4,
            state=LoanState.ACTIVE,
            starts_at=t0 + timedelta(hours=1),
            ends_at=t0 + timedelta(hours=2.5),
        )
    driver = _Driver(t0, flavor, projects, latency, period)
    last = driver.run(workload(seed, jobs, span_s))
    return Recorded(t0, t0 + timedelta(seconds=last + 1), jobs, driver.cycles, driver.preemptions)
