"""Soak: days of simulated load through the real stack, then check that nothing leaked.

Real parts: the simulated cluster (``jobs.clusters.backends.simserver``) at ``--speed``, a Celery worker
(prefork, 3 children) and beat with short intervals, PostgreSQL (a scratch database) and Redis.
This process is the driver: it builds a small centre (2 flavors, 6 nodes, 3 departments,
4 projects, 3 priority classes), then submits a realistic mix through ``job_submit`` (gangs,
single-node training, inference services, dev jobs with a lifetime, some checkpointing, three
priorities so reclaims and preemptions happen), records loans that start and expire, and takes
nodes down in the simulator and the portal and heals them again.

Time mapping (honest, not faked): the simulated clock is ``speed × real seconds since the
start``. Every duration the driver chooses is in simulated seconds: a job's run time and
``max_runtime_seconds`` and the grace periods go to the simulator, which runs them for
``seconds / speed`` real seconds; loan intervals, node outages and arrival instants are
converted to real instants with the same factor. The portal itself keeps the wall clock, so its
timestamps and the ledger's card-seconds are real seconds: the ledger is compared with the job
events in real seconds (exact), and card-hours are multiplied by ``speed`` only to report them
in simulated units. Portal timers with a fixed wall period (loan return and expiry sweeps every
60 s, the meter's whole-hour watermark) are not scaled; the meter is run once more at the end
with a clock past the last event so the last hour is in the ledger.

Prints one JSON object (see ``run``). Needs DATABASE_URL and REDIS_URL; works in a scratch
database next to DATABASE_URL's (bench/scratchdb.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratchdb import scratch_django  # noqa: E402

DAY = 86400.0
A100_NODES, L40_NODES = 4, 2  # 32 + 8 devices: a small centre, so a few jobs an hour fill it
HOUR = 3600.0
TERMINAL_SIM = {"succeeded", "failed", "cancelled"}


# ---------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_simserver(tmp: Path, speed: float) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    cmd = [sys.executable, "-m", "jobs.clusters.backends.simserver", "--port", str(port),
           "--state", str(tmp / "sim.json"), "--speed", str(speed)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1):
                return proc, url
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("simserver did not start")


def _celery_env(queue: str, intervals: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test", "CELERY_QUEUE": queue,
            "LOG_LEVEL": "WARNING", **intervals}


def _start_celery(tmp: Path, queue: str, intervals: dict[str, str]) -> tuple[subprocess.Popen, ...]:
    env = _celery_env(queue, intervals)
    base = [sys.executable, "-m", "celery", "-A", "portal"]
    worker = subprocess.Popen(
        [*base, "worker", "-Q", queue, "--concurrency=3", "--without-heartbeat", "--without-gossip",
         "--without-mingle", f"--loglevel={os.environ.get('SOAK_WORKER_LOGLEVEL', 'WARNING')}"],
        cwd=ROOT, env=env, stdout=open(tmp / "worker.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    beat = subprocess.Popen(
        [*base, "beat", "--schedule", str(tmp / "beat"), "--loglevel=WARNING"],
        cwd=ROOT, env=env, stdout=open(tmp / "beat.log", "wb"), stderr=subprocess.STDOUT)  # noqa: SIM115
    return worker, beat


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _rss_mib(pid: int) -> float:
    """Resident memory of a process and its children (the worker's prefork pool)."""
    import psutil

    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
        return sum(p.memory_info().rss for p in procs) / 2**20
    except psutil.NoSuchProcess:
        return float("nan")


# ---------------------------------------------------------------- the centre


@dataclass
class Centre:
    flavors: dict
    projects: list
    users: dict  # project pk -> [users]
    prios: dict
    nodes: list
    quota: dict  # (dept code, flavor name) -> QuotaNode
    admin: object
    backend: object


DEPARTMENTS = {  # code: {flavor: quota}, projects {code: {flavor: quota}}
    "research": ({"A100": 16, "L40": 4}, {"llm": {"A100": 10, "L40": 2}, "vision": {"A100": 6, "L40": 2}}),
    "product": ({"A100": 12, "L40": 4}, {"search": {"A100": 12, "L40": 4}}),
    "infra": ({"A100": 4}, {"ops": {"A100": 4}}),
}


def _build_centre(sim_url: str) -> Centre:
    from jobs.clusters.backends.simulator import SimulatorBackend
    from jobs.clusters.inventory import push_simulated_inventory
    from jobs.models import PriorityClass
    from portal.models import Department, Membership, Project, Role, User
    from quotas.models import Cluster, Flavor, Node, QuotaNode

    flavors = {
        "A100": Flavor.objects.create(name="A100", vendor="nvidia", model="A100", memory_mib=81920,
                                      k8s_resource_name="nvidia.com/gpu"),
        "L40": Flavor.objects.create(name="L40", vendor="nvidia", model="L40", memory_mib=49152,
                                     k8s_resource_name="nvidia.com/gpu", shareable=True),
    }
    cluster = Cluster.objects.create(name="soak", kind="simulator", config={"url": sim_url})
    nodes = [Node.objects.create(cluster=cluster, name=f"a100-{i}", flavor=flavors["A100"], gpu_count=8,
                                 zone="z1", spine="s0", leaf=f"l{i // 2}") for i in range(A100_NODES)]
    nodes += [Node.objects.create(cluster=cluster, name=f"l40-{i}", flavor=flavors["L40"], gpu_count=4,
                                  zone="z1", spine="s1", leaf="l9") for i in range(L40_NODES)]
    push_simulated_inventory()
    admin = User.objects.create_user(username="soak-admin")
    Membership.objects.create(user=admin, role=Role.PLATFORM_ADMIN)
    projects, users, quota = [], {}, {}
    for code, (dept_quota, project_quotas) in DEPARTMENTS.items():
        dept = Department.objects.create(code=code, name=code)
        for f, q in dept_quota.items():
            quota[(code, f)] = QuotaNode.objects.create(flavor=flavors[f], department=dept, quota=Decimal(q))
        for pcode, pq in project_quotas.items():
            project = Project.objects.create(code=pcode, name=pcode, department=dept)
            for f, q in pq.items():
                QuotaNode.objects.create(flavor=flavors[f], project=project, quota=Decimal(q))
            users[project.pk] = [User.objects.create_user(username=f"{pcode}-u{i}") for i in range(3)]
            for user in users[project.pk]:
                Membership.objects.create(user=user, role=Role.MEMBER, project=project)
            projects.append(project)
    prios = {
        "low": PriorityClass.objects.update_or_create(
            name="soak-low", defaults={"value": 10, "preemptible": True, "grace_seconds": 600})[0],
        "normal": PriorityClass.objects.update_or_create(
            name="soak-normal", defaults={"value": 100, "preemptible": True, "grace_seconds": 300})[0],
        "high": PriorityClass.objects.update_or_create(
            name="soak-high", defaults={"value": 1000, "preemptible": False, "grace_seconds": 0})[0],
    }
    return Centre(flavors, projects, users, prios, nodes, quota, admin, SimulatorBackend(sim_url, timeout=10))


# ---------------------------------------------------------------- the workload (simulated units)


def _hours(rng: random.Random, lo: float, hi: float) -> int:
    return int(rng.uniform(lo, hi) * HOUR)


def job_mix(rng: random.Random) -> dict:
    """One job of the mix, durations in simulated seconds."""
    r = rng.random()
    if r < 0.12:  # a training gang of whole nodes
        spec = {"kind": "training", "flavor": "A100", "workers": rng.choice((2, 2, 3)), "gpus": 8,
                "duration": _hours(rng, 2, 10), "prio": rng.choice(("normal", "normal", "low", "high"))}
    elif r < 0.45:
        spec = {"kind": "training", "flavor": "A100", "workers": 1, "gpus": rng.choice((1, 2, 4, 8)),
                "duration": _hours(rng, 1, 12), "prio": rng.choice(("normal", "low", "low", "high"))}
    elif r < 0.62:
        spec = {"kind": "training", "flavor": "L40", "workers": 1, "gpus": rng.choice((1, 2, 4)),
                "duration": _hours(rng, 1, 8), "prio": rng.choice(("normal", "low"))}
    elif r < 0.77:  # an inference service: long, high priority, not preemptible
        spec = {"kind": "inference", "flavor": rng.choice(("A100", "L40")), "workers": 1,
                "gpus": rng.choice((1, 1, 2)), "duration": _hours(rng, 6, 30), "prio": "high"}
    else:  # a dev job: one device (or half an L40), ended by its lifetime if it runs too long
        spec = {"kind": "dev", "flavor": rng.choice(("A100", "L40")), "workers": 1, "gpus": 1,
                "duration": _hours(rng, 1, 12), "prio": "normal", "lifetime": int(8 * HOUR)}
    spec["checkpointing"] = spec["kind"] == "training" and rng.random() < 0.6
    spec["milli"] = 500 if spec["kind"] == "dev" and spec["flavor"] == "L40" else None
    return spec


@dataclass(order=True)
class Event:
    at: float  # simulated seconds since the start
    kind: str = field(compare=False)
    data: dict = field(compare=False, default_factory=dict)


def plan(days: float, jobs_per_day: float, seed: int) -> list[Event]:
    """Poisson arrivals of jobs, node outages every ~8 simulated hours, loans every ~18 h."""
    rng = random.Random(seed)
    horizon = days * DAY
    events: list[Event] = []
    t = 0.0
    while (t := t + rng.expovariate(jobs_per_day / DAY)) < horizon:
        events.append(Event(t, "job", job_mix(rng)))
    t = 2 * HOUR
    while t < horizon - 6 * HOUR:
        down = rng.uniform(1, 4) * HOUR
        node = rng.randrange(A100_NODES + L40_NODES)
        events += [Event(t, "node_down", {"node": node}), Event(t + down, "node_up", {"node": node})]
        t += rng.expovariate(1 / (8 * HOUR))
    t = 3 * HOUR
    while t < horizon - 12 * HOUR:
        events.append(Event(t, "loan", {"length": rng.uniform(6, min(24, (horizon - t) / HOUR - 6)) * HOUR,
                                        "amount": rng.choice((4, 8))}))
        t += rng.uniform(12, 24) * HOUR
    return sorted(events)


# ---------------------------------------------------------------- the driver


@dataclass
class Tally:
    submitted: int = 0
    refused: int = 0  # refused by validation (the dev-job limit per user)
    node_failures: int = 0
    loans: int = 0
    loans_refused: int = 0


def _submit(centre: Centre, spec: dict, rng: random.Random, tally: Tally, n: int) -> None:
    from django.core.exceptions import ValidationError
    from django.db import transaction

    from jobs.services import job_submit

    flavor = centre.flavors[spec["flavor"]]
    project = rng.choice([p for p in centre.projects if (p.code != "ops" or spec["flavor"] == "A100")])
    lifetime = spec.get("lifetime") or max(3600, 3 * spec["duration"])
    try:
        with transaction.atomic():  # as the API view does: the service locks rows
            job_submit(actor=rng.choice(centre.users[project.pk]), project=project, name=f"soak-{n}",
                       kind=spec["kind"], flavor=flavor, priority_class=centre.prios[spec["prio"]],
                       image="registry.local/soak:1", workers=spec["workers"], gpus_per_worker=spec["gpus"],
                       gpu_milli=spec["milli"], max_runtime_seconds=lifetime,
                       checkpointing=spec["checkpointing"], sim_duration_seconds=spec["duration"])
        tally.submitted += 1
    except ValidationError:
        tally.refused += 1


def _set_node(centre: Centre, index: int, state: str) -> None:
    """A node fails in the cluster (its jobs die) and the operator marks it down in the portal;
    it is repaired in the cluster first and then marked ready — the other order would let the
    portal read the still-down state back from the cluster after marking it ready."""
    from quotas.services import node_update

    node = centre.nodes[index]
    node.refresh_from_db()
    centre.backend.set_node_state(node.name, "down" if state == "down" else "ready")
    node_update(actor=centre.admin, node=node, state="down" if state == "down" else "ready")


def _loan(centre: Centre, data: dict, speed: float, rng: random.Random) -> bool:
    """An active loan of A100 quota between departments, for ``length`` simulated seconds."""
    from django.db import transaction
    from django.utils import timezone

    from quotas.services import loan_create

    lender, borrower = rng.sample(["research", "product", "infra"], 2)
    amount = min(data["amount"], int(centre.quota[(lender, "A100")].quota))
    now = timezone.now()
    with transaction.atomic():  # refused (False) when the lender has lent its quota already
        loan_create(actor=centre.admin, lender=centre.quota[(lender, "A100")],
                    borrower=centre.quota[(borrower, "A100")], amount=Decimal(amount), starts_at=now,
                    ends_at=now + timedelta(seconds=data["length"] / speed), reason="soak", state="active")
    return True


def _apply(event: Event, centre: Centre, speed: float, rng: random.Random, tally: Tally, n: int) -> None:
    from django.core.exceptions import ValidationError

    if event.kind == "job":
        _submit(centre, event.data, rng, tally, n)
    elif event.kind == "node_down":
        _set_node(centre, event.data["node"], "down")
        tally.node_failures += 1
    elif event.kind == "node_up":
        _set_node(centre, event.data["node"], "up")
    else:
        try:
            _loan(centre, event.data, speed, rng)
            tally.loans += 1
        except ValidationError:  # the lender has lent that quota already in this period
            tally.loans_refused += 1


def drive(centre: Centre, events: list[Event], speed: float, procs: dict, sample_every: float, seed: int,
          horizon: float):
    """Replay the plan against the simulated clock up to ``horizon`` simulated seconds; sample
    RSS every ``sample_every`` real seconds."""
    rng = random.Random(seed + 1)
    tally = Tally()
    samples: list[tuple[float, float, float, float]] = []  # (real s, sim day, worker MiB, beat MiB)
    t0 = time.monotonic()
    next_sample = 0.0
    for n, event in enumerate([*events, Event(horizon, "end")]):
        while (now := time.monotonic() - t0) * speed < event.at:
            if now >= next_sample:
                samples.append(_sample(now, speed, procs))
                next_sample = now + sample_every
            time.sleep(min(0.05, event.at / speed - now))
        _check_alive(procs)
        if event.kind != "end":
            _apply(event, centre, speed, rng, tally, n)
    return tally, samples, t0


def _sample(now: float, speed: float, procs: dict) -> tuple[float, float, float, float]:
    return (round(now, 1), round(now * speed / DAY, 3), round(_rss_mib(procs["worker"].pid), 1),
            round(_rss_mib(procs["beat"].pid), 1))


def _check_alive(procs: dict) -> None:
    dead = [name for name, p in procs.items() if p.poll() is not None]
    if dead:
        raise SystemExit(f"{', '.join(dead)} exited during the soak")


def drain(t0: float, speed: float, procs: dict, samples: list, sample_every: float, limit_s: float) -> float:
    """Wait until no job waits or holds GPUs and every loan past its end is returned."""
    from django.utils import timezone

    from jobs.models import Job
    from jobs.states import TERMINAL
    from quotas.models import Loan

    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        now = time.monotonic() - t0
        if not samples or now - samples[-1][0] >= sample_every:
            samples.append(_sample(now, speed, procs))
        live = Job.objects.exclude(state__in=[s.value for s in TERMINAL]).exists()
        stale_loans = Loan.objects.filter(state="active", ends_at__lte=timezone.now()).exists()
        if not live and not stale_loans:
            break
        _check_alive(procs)
        time.sleep(0.5)
    return time.monotonic() - started


# ---------------------------------------------------------------- the checks


def ledger_vs_events() -> dict:
    """Card-seconds in the ledger against the same quantity recomputed from the job events
    (running intervals × devices), both in real seconds, per job."""
    from django.db.models import Sum

    from billing.models import UsageRecord
    from jobs.models import Job, JobEvent

    per_job = UsageRecord.objects.values("job_id").annotate(s=Sum("card_seconds"))
    ledger = dict(per_job.values_list("job_id", "s"))
    jobs = {j.pk: j for j in Job.objects.select_related("flavor")}
    expected: dict[int, float] = {}
    opened: dict[int, tuple] = {}
    workers: dict[int, int] = {}
    for e in JobEvent.objects.filter(kind="transition").order_by("job_id", "occurred_at", "id"):
        if e.to_state == "admitted":
            workers[e.job_id] = int(e.data.get("workers") or jobs[e.job_id].workers)
        if e.from_state == "running" and e.job_id in opened:
            start = opened.pop(e.job_id)
            job = jobs[e.job_id]
            devices = float(workers.get(e.job_id, job.workers) * job.gpus_per_worker * job.flavor.fraction
                            * Fraction(job.gpu_milli or 1000, 1000))
            held = (e.occurred_at - start).total_seconds()
            expected[e.job_id] = expected.get(e.job_id, 0.0) + devices * held
        if e.to_state == "running":
            opened[e.job_id] = e.occurred_at
    diffs = [abs(float(ledger.get(j, 0)) - expected.get(j, 0.0)) for j in set(ledger) | set(expected)]
    total_ledger = float(sum(ledger.values(), Decimal(0)))
    return {"ledger_card_seconds": round(total_ledger, 3),
            "events_card_seconds": round(sum(expected.values()), 3),
            "difference": round(total_ledger - sum(expected.values()), 3),
            "max_job_difference": round(max(diffs, default=0.0), 6),
            "jobs_differing": sum(d > 1e-3 for d in diffs),
            "still_open": len(opened)}


def final_checks(centre: Centre, speed: float) -> dict:
    from django.utils import timezone

    from billing.meter import lag, usage_meter
    from jobs.models import Job
    from jobs.scheduling.cycle import schedule_once
    from jobs.selectors import gpus_in_use_by_flavor, queue_ranking
    from jobs.states import HOLDING
    from quotas.models import Node

    # Past the last event by more than the lag: the meter's watermark covers the last hour.
    usage_meter(now=timezone.now() + timedelta(hours=1) + lag())
    used = gpus_in_use_by_flavor()
    sim_jobs = centre.backend._call("GET", "/jobs")["jobs"]
    orphans = sorted(n for n, j in sim_jobs.items() if j["phase"] not in TERMINAL_SIM)
    report = schedule_once(warm=False)  # a fresh engine from the database: nothing to reserve
    ranked = queue_ranking().ranked
    return {
        "final_usage": {name: float(used.get(f.pk, 0)) for name, f in centre.flavors.items()},
        "jobs_holding": Job.objects.filter(state__in=list(HOLDING)).count(),
        "orphan_backend_jobs": len(orphans),
        "backend_jobs": len(sim_jobs),
        "stale_reservations": report.reservations + report.waiting + len(ranked),
        "ledger": ledger_vs_events(),
        "unfinished_jobs": unfinished(sim_jobs, speed),
        "nodes_not_ready": list(Node.objects.exclude(state="ready").values_list("name", "state")),
    }


def unfinished(sim_jobs: dict, speed: float) -> list[dict]:
    """Jobs the drain left behind, with what the backend says and their last events (diagnosis)."""
    from jobs.models import Job, backend_name
    from jobs.states import TERMINAL

    out = []
    first = Job.objects.order_by("submitted_at").values_list("submitted_at", flat=True).first()
    for job in Job.objects.exclude(state__in=[s.value for s in TERMINAL]).order_by("pk")[:20]:
        sim = sim_jobs.get(backend_name(job.pk), {})
        admitted = job.events.filter(to_state="admitted").order_by("-occurred_at", "-id").first()
        victims = [int(v) for v in (admitted.data.get("preempts") or [])] if admitted else []
        out.append({
            "id": job.pk, "state": job.state, "kind": job.kind, "shape": [job.workers, job.gpus_per_worker],
            "flavor": job.flavor.name, "priority": job.priority_class.name, "project": job.project.code,
            "submitted_day": round((job.submitted_at - first).total_seconds() * speed / DAY, 2),
            "requeues": job.requeue_count,
            "claimed": job.dispatch_claimed_at is not None, "dispatched": job.dispatched_at is not None,
            "terminating": job.terminating_since is not None,
            "victims": list(Job.objects.filter(pk__in=victims).values_list("pk", "state")),
            "backend": [sim.get("phase"), sim.get("message")],
            "events": [[e.kind, e.from_state, e.to_state, e.reason[:60]]
                       for e in job.events.exclude(kind="reservation").order_by("-occurred_at", "-id")[:5]],
        })
    return out


def counts() -> dict:
    from django.db.models import Count

    from jobs.models import Job, JobEvent
    from quotas.models import Loan

    ev = JobEvent.objects.filter(kind="transition")
    return {
        "jobs_finished": dict(Job.objects.values_list("state").annotate(n=Count("id"))),
        "preempted": ev.filter(to_state="preempted").count(),
        "requeued": ev.filter(to_state="queued", from_state__in=["preempted", "lost"]).count(),
        "node_failure_losses": ev.filter(to_state="lost").count(),
        "loans_expired": Loan.objects.filter(state="returned").count(),
        "max_preemptions_of_one_job": max(Job.objects.values_list("requeue_count", flat=True), default=0),
        "preemption_ping_pong": ping_pong(),
        "events": JobEvent.objects.count(),
    }


def ping_pong() -> list[tuple[int, int, int]]:
    """(job, job, signals) for pairs of jobs that preempted each other: a livelock shows here."""
    from collections import Counter

    from jobs.models import JobEvent

    pairs: Counter = Counter()
    for victim, reason in JobEvent.objects.filter(kind="preemption_signal").values_list("job_id", "reason"):
        words = reason.split()
        if len(words) >= 2 and words[-2] == "job" and words[-1].isdigit():
            pairs[(victim, int(words[-1]))] += 1
    both = {tuple(sorted(p)) for p in pairs if (p[1], p[0]) in pairs}
    return sorted(((a, b, pairs[(a, b)] + pairs[(b, a)]) for a, b in both), key=lambda t: -t[2])[:10]


def rss_summary(samples: list, drive_end: float) -> dict:
    """First/last and the least-squares slope over the second half of the driving phase."""
    out = {}
    half = [s for s in samples if drive_end / 2 <= s[0] <= drive_end]
    for col, name in ((2, "worker"), (3, "beat")):
        xs = [s[0] / HOUR for s in half]
        ys = [s[col] for s in half]
        out[name] = {"first_mib": samples[0][col], "last_mib": samples[-1][col],
                     "max_mib": max(s[col] for s in samples),
                     "second_half_growth_mib": round(ys[-1] - ys[0], 1) if ys else None,
                     "slope_mib_per_hour": round(_slope(xs, ys), 2)}
    return out


def _slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2:
        return math.nan
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else math.nan


# ---------------------------------------------------------------- run


def run(days: float, speed: float, jobs_per_day: float, seed: int, sync_interval: int = 4,
        drain_days: float = 8.0) -> dict:

    started = time.perf_counter()
    events = plan(days, jobs_per_day, seed)
    queue = f"h4soak-{uuid.uuid4().hex[:8]}"
    os.environ["CELERY_QUEUE"] = queue  # before Django is set up: the driver's triggers reach the worker
    with scratch_django(), tempfile.TemporaryDirectory(prefix="h4soak-") as tmpdir:
        tmp = Path(tmpdir)
        from django.core.cache import cache

        cache.clear()  # our own Redis database: no queue positions left from an earlier run
        sim, sim_url = _start_simserver(tmp, speed)
        procs = {}
        try:
            centre = _build_centre(sim_url)
            # Status sync every 4 s: before the fan-out kept one waiting message per job
            # (jobs.clusters.tasks._enqueue_once), a shorter interval let duplicate dispatches outrun a
            # worker on 2 busy cores; kept so the figures compare with the earlier runs.
            intervals = {"SCHEDULE_INTERVAL_SECONDS": "2", "SYNC_INTERVAL_SECONDS": str(sync_interval),
                         "METER_INTERVAL_SECONDS": "20", "INVENTORY_INTERVAL_SECONDS": "30"}
            procs["worker"], procs["beat"] = _start_celery(tmp, queue, intervals)
            sample_every = max(1.0, days * DAY / speed / 80)
            tally, samples, t0 = drive(centre, events, speed, procs, sample_every, seed, days * DAY)
            drive_end = time.monotonic() - t0
            drain_limit = max(90.0, drain_days * DAY / speed)
            drain_s = drain(t0, speed, procs, samples, sample_every, limit_s=drain_limit)
            checks = final_checks(centre, speed)
            result = {"simulated_days": round(drive_end * speed / DAY, 2), "speedup": speed,
                      "submitting_seconds": round(drive_end, 1), "drain_seconds": round(drain_s, 1),
                      "jobs_submitted": tally.submitted, "submits_refused": tally.refused,
                      "node_failures_injected": tally.node_failures, "loans_created": tally.loans,
                      "loans_refused": tally.loans_refused,
                      **counts(), **checks, "rss": rss_summary(samples, drive_end),
                      "rss_samples": [[s[0], s[1], s[2], s[3]] for s in samples]}
        finally:
            for proc in (*procs.values(), sim):
                _stop(proc)
        result["simulated_days_total"] = round((drive_end + drain_s) * speed / DAY, 2)
        result["worker_log_tail"] = (tmp / "worker.log").read_text(errors="replace")[-1500:]
        if os.environ.get("SOAK_KEEP_LOG"):
            (tmp / "worker.log").replace(os.environ["SOAK_KEEP_LOG"])
    result["wall_seconds"] = round(time.perf_counter() - started, 1)
    return result


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=7.0, help="simulated days of submissions")
    parser.add_argument("--speed", type=float, default=1440.0, help="simulated seconds per real second")
    parser.add_argument("--jobs-per-day", type=float, default=40.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--drain-days", type=float, default=8.0,
                        help="simulated days to wait for the backlog to finish after the submissions")
    parser.add_argument("--quick", action="store_true", help="3 simulated days at 5,760×")
    args = parser.parse_args()
    if args.quick:
        args.days, args.speed, args.jobs_per_day = 3.0, 5760.0, 30.0
    print(json.dumps(run(args.days, args.speed, args.jobs_per_day, args.seed, drain_days=args.drain_days)))
