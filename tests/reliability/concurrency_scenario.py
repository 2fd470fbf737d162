"""The concurrency scenario (issue 8), shared by ``test_concurrency.py`` and
``bench/concurrency.py``: many HTTP clients submit, cancel and decide approvals against tight
quotas while two Celery workers run scheduling cycles, all real processes:

* gunicorn (gthread, one thread per client: every client request runs on its own thread and
  database connection) serving the real API;
* two solo-pool Celery workers on a private queue plus beat (a cycle every second, and one
  after every submit/cancel/finish): the cycles race for the advisory lock;
* the simulated cluster server: dispatched jobs really run there and finish, so GPUs free up
  and are handed out again during the run.

Django must be set up on the database the processes share (``build_tenancy`` writes it,
``collect`` reads it back). Decided from what is collected: ``concurrency_checks``.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import requests

from tests.waiting import wait_until

from . import concurrency_checks as checks

ROOT = Path(__file__).resolve().parents[2]
FLAVOR = "H800"
GPUS_PER_NODE = 8
# (workers, gpus_per_worker) and weights: mostly small jobs, some gangs up to 16 GPUs.
SHAPES = [((1, 1), 3), ((1, 2), 3), ((1, 4), 3), ((1, 8), 2), ((2, 4), 1), ((2, 8), 1)]
TERMINAL = {"succeeded", "failed", "cancelled", "rejected", "expired"}


@dataclass(frozen=True)
class Config:
    clients: int = 50
    duration: float = 60.0
    seed: int = 8
    nodes: int = 4  # × 8 GPUs
    speed: float = 100.0  # simulated seconds per real second: jobs of 100–500 s last 1–5 s
    think: tuple[float, float] = (0.8, 2.0)  # seconds a client waits between two requests


@dataclass
class Persona:
    name: str
    role: str  # "member" | "approver"
    token: str
    project: int | None = None
    cap: int | None = None  # the most its project may ever hold (GPUs): a larger job is refused


@dataclass
class Tenancy:
    personas: list[Persona]
    admin_token: str


# --- the tenant tree ------------------------------------------------------------------------


def build_tenancy(config: Config, sim_url: str) -> Tenancy:
    """C = 8 × nodes GPUs. Quotas (GPUs; b = borrow limit, l = lend limit):

    A 16 (b 8, overcommit 1.5) ─ project a 8 (b 4), A1 8 (b 4, overcommit 1.5) ─ a1 6, a2 6 (b 2)
    B 12 (b 4, l 8) ─ b1 8 (b 0), b2 4
    C 4 ─ c 4

    A asks for approval above 4 GPUs (a platform admin too above 8), B above 8."""
    from django.db import transaction

    from jobs.clusters.backends.base import NodeInfo
    from jobs.clusters.backends.simulator import SimulatorBackend
    from jobs.models import ApprovalPolicy, PriorityClass
    from portal.models import Department, Membership, Project, Role, User
    from portal.tokens import api_token_create
    from quotas.models import Cluster, Flavor, Node
    from quotas.services import quota_node_set

    flavor = Flavor.objects.create(
        name=FLAVOR, vendor="nvidia", model="H800", memory_mib=81920, k8s_resource_name="nvidia.com/gpu"
    )
    cluster = Cluster.objects.create(name="conc", kind="simulator", config={"url": sim_url})
    nodes = [
        Node.objects.create(
            cluster=cluster,
            name=f"conc-{i}",
            flavor=flavor,
            gpu_count=GPUS_PER_NODE,
            zone="z",
            spine="s0",
            leaf=f"l{i // 2}",
        )
        for i in range(config.nodes)
    ]
    SimulatorBackend(sim_url).set_inventory(
        [NodeInfo(n.name, FLAVOR, n.gpu_count, "ready", n.zone, n.spine, n.leaf) for n in nodes]
    )
    admin = User.objects.create_user(username="conc-root")
    Membership.objects.create(user=admin, role=Role.PLATFORM_ADMIN)

    dept = {}
    for code, parent in (("A", None), ("A1", "A"), ("B", None), ("C", None)):
        dept[code] = Department.objects.create(code=code, name=f"Dept {code}", parent=dept.get(parent))
    proj = {
        code: Project.objects.create(code=code, name=f"Project {code}", department=dept[d])
        for code, d in (("a", "A"), ("a1", "A1"), ("a2", "A1"), ("b1", "B"), ("b2", "B"), ("c", "C"))
    }
    quotas = (
        (dept["A"], 16, 8, None, "1.5"),
        (dept["B"], 12, 4, 8, "1"),
        (dept["C"], 4, None, None, "1"),
        (dept["A1"], 8, 4, None, "1.5"),
        (proj["a"], 8, 4, None, "1"),
        (proj["a1"], 6, None, None, "1"),
        (proj["a2"], 6, 2, None, "1"),
        (proj["b1"], 8, 0, None, "1"),
        (proj["b2"], 4, None, None, "1"),
        (proj["c"], 4, None, None, "1"),
    )
    # Parents first: each level is validated against the one above (DESIGN §3 validation).
    for owner, q, b, lend, ratio in quotas:
        kind = "project" if isinstance(owner, Project) else "department"
        with transaction.atomic():  # the service locks the flavor row
            quota_node_set(
                actor=admin,
                flavor=flavor,
                quota=Decimal(q),
                overcommit_ratio=Decimal(ratio),
                borrow_limit=None if b is None else Decimal(b),
                lend_limit=None if lend is None else Decimal(lend),
                **{kind: owner},
            )
    common = {"premium_flavors": False, "over_budget": False}
    ApprovalPolicy.objects.create(department=dept["A"], max_gpus=4, platform_gpus=8, **common)
    ApprovalPolicy.objects.create(department=dept["B"], max_gpus=8, **common)
    PriorityClass.objects.create(name="train", value=100, preemptible=True, grace_seconds=0)
    PriorityClass.objects.create(name="train-high", value=500, preemptible=True, grace_seconds=0)

    approvers = max(6, config.clients // 5)
    # Approvers: department admins of A and B (several per department: they race on the same
    # requests) and platform admins (they decide everything, including A's platform steps).
    scopes = [("department", dept["A"]), ("department", dept["B"]), ("platform", None)]
    personas = []
    for i in range(config.clients):
        user = User.objects.create_user(username=f"conc-{i:03d}")
        if i < approvers:
            kind, target = scopes[i % len(scopes)]
            role = Role.PLATFORM_ADMIN if kind == "platform" else Role.DEPARTMENT_ADMIN
            Membership.objects.create(user=user, role=role, department=target)
            token = api_token_create(actor=user, name="concurrency").secret
            personas.append(Persona(user.username, "approver", token))
        else:
            project = list(proj.values())[i % len(proj)]
            Membership.objects.create(user=user, role=Role.MEMBER, project=project)
            token = api_token_create(actor=user, name="concurrency").secret
            personas.append(Persona(user.username, "member", token, project.pk, _cap(project, quotas)))
    return Tenancy(personas, api_token_create(actor=admin, name="concurrency").secret)


def _cap(project, quotas) -> int | None:
    """min(quota + borrow limit) over the project's path (issue 18 item 4: a job above it could
    never run and is refused at submission)."""
    path, dept = [project], project.department
    while dept is not None:
        path.append(dept)
        dept = dept.parent
    caps = [q + b for owner, q, b, _lend, _ratio in quotas if owner in path and b is not None]
    return min(caps, default=None)


# --- the real processes -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, proc: subprocess.Popen, what: str) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        return requests.get(url, timeout=2).status_code == 200

    wait_until(answers, f"{what} to answer {url}", retry_on=requests.RequestException)


@dataclass
class Services:
    """simserver, gunicorn, two Celery workers and beat; logs under ``workdir``."""

    database_url: str
    clients: int
    speed: float
    workdir: Path
    queue: str = field(default_factory=lambda: f"conc-{uuid.uuid4().hex[:8]}")
    sim_url: str = ""
    web_url: str = ""
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    stopped_in: dict[str, float] = field(default_factory=dict)  # seconds after the SIGTERM

    def _env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "DJANGO_SETTINGS_MODULE": "portal.settings.test",
            "DATABASE_URL": self.database_url,
            "CELERY_QUEUE": self.queue,  # tasks the web and the workers send stay on this queue
            "SCHEDULE_INTERVAL_SECONDS": "1",
            "SYNC_INTERVAL_SECONDS": "1",
            **extra,
        }

    def _spawn(self, name: str, command: list[str], **extra: str) -> subprocess.Popen:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            command, cwd=ROOT, env=self._env(**extra), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()  # the child holds its own descriptor
        self.procs[name] = proc
        return proc

    def start_cluster(self) -> None:
        port = _free_port()
        self.sim_url = f"http://127.0.0.1:{port}"
        proc = self._spawn(
            "simserver",
            [
                sys.executable,
                "-m",
                "jobs.clusters.backends.simserver",
                "--port",
                str(port),
                "--state",
                str(self.workdir / "sim-state.json"),
                "--speed",
                str(self.speed),
            ],
        )
        _wait_http(self.sim_url + "/healthz", proc, "simserver")

    def start_portal(self) -> None:
        """Web, two workers and beat. They boot while the caller writes the tenancy (nothing
        reads it before the first request or task); ``wait_portal`` waits for the web."""
        port = _free_port()
        self.web_url = f"http://127.0.0.1:{port}"
        threads = -(-self.clients // 2)
        self._spawn(
            "gunicorn",
            [
                sys.executable,
                "-m",
                "gunicorn",
                "portal.wsgi:application",
                "--bind",
                f"127.0.0.1:{port}",
                "--preload",
                "--worker-class",
                "gthread",
                "--workers",
                "2",
                "--threads",
                str(threads),
                "--log-level",
                "warning",
                "--graceful-timeout",
                "10",
                # Longer than any client's pause: an idle keep-alive connection the server closes
                # just as the client reuses it would be a reset no request caused.
                "--keep-alive",
                "20",
            ],
            # Connections are per request here: idle client threads do not pin 50 backends of
            # a PostgreSQL other test runs share (concurrent requests still use one each).
            DB_CONN_MAX_AGE="0",
        )
        celery = [sys.executable, "-m", "celery", "-A", "portal"]
        for i in (1, 2):
            self._spawn(
                f"worker{i}",
                [
                    *celery,
                    "worker",
                    "-Q",
                    self.queue,
                    "-n",
                    f"conc{i}-{self.queue}@localhost",
                    "--pool=solo",
                    "--without-heartbeat",
                    "--without-gossip",
                    "--without-mingle",
                    "--loglevel=INFO",
                ],
            )
        self._spawn("beat", [*celery, "beat", "--schedule", str(self.workdir / "beat"), "--loglevel=WARNING"])

    def wait_portal(self) -> None:
        _wait_http(self.web_url + "/healthz", self.procs["gunicorn"], "gunicorn")

    def stop(self, *names: str) -> None:
        """SIGTERM (a Celery worker finishes its task first), SIGKILL after 20 s."""
        names = names or tuple(self.procs)
        t0 = time.monotonic()
        for name in names:
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for name in names:
            proc = self.procs.get(name)
            if proc is None or proc.returncode is not None:
                continue
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            self.stopped_in[name] = round(time.monotonic() - t0, 1)

    def purge_queue(self) -> None:
        """Drop the tasks still waiting on the private queue (the broker is shared)."""
        import redis
        from django.conf import settings

        client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
        for key in client.scan_iter(match=f"{self.queue}*"):
            client.delete(key)

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def cycles(self) -> dict[str, dict[str, int]]:
        """Per worker: scheduling cycles run (``schedule_once`` logs one line per cycle) and
        cycle tasks taken — a task that found the other worker's cycle holding the advisory
        lock returns at once (``wait=False``)."""
        return {
            w: {
                "cycles": self.log(w).count("scheduling cycle: CycleReport"),
                "cycle_tasks": len(re.findall(r"Task jobs\.schedule_cycle\[\S+\] succeeded", self.log(w))),
            }
            for w in ("worker1", "worker2")
        }


# --- the clients ---------------------------------------------------------------------------


@dataclass
class Outcome:
    op: str
    status: int
    seconds: float
    expected: bool
    detail: str = ""


@dataclass
class ClientLog:
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)


# Statuses a client may get without anything being wrong (DESIGN §9: 4xx with a reason):
# a submission we made invalid on purpose, a cancel of a job that has just ended, a decision
# another approver (or the requester's cancel) got in first.
EXPECTED = {
    "submit": {201},
    "submit-invalid": {400},
    "submit-too-big": {400},  # more than the project may ever hold (issue 18 item 4)
    "cancel": {200, 400},
    "decide": {200, 400, 409},
    "inbox": {200},
    "read": {200},
}


def _call(log: ClientLog, session: requests.Session, op: str, method: str, url: str, judge=None, **kw):
    """One request, timed and judged: expected if its status is in ``EXPECTED[op]`` or
    ``judge(response)`` says the refusal was right."""
    t0 = time.perf_counter()
    try:
        response = session.request(method, url, timeout=30, **kw)
    except requests.RequestException as exc:
        log.add(Outcome(op, 0, time.perf_counter() - t0, False, repr(exc)[:300]))
        return None
    elapsed = time.perf_counter() - t0
    ok = response.status_code in EXPECTED[op] or (judge is not None and judge(response))
    detail = "" if response.status_code < 300 else response.text[:300]
    log.add(Outcome(op, response.status_code, elapsed, ok, detail))
    return response


class Client(threading.Thread):
    """One persona, its own HTTP session (and so its own server thread and connection)."""

    def __init__(self, persona: Persona, base: str, deadline: float, seed: int, think, log: ClientLog):
        super().__init__(name=persona.name, daemon=True)
        self.persona, self.base, self.deadline, self.think, self.log = persona, base, deadline, think, log
        self.rng = random.Random(seed)
        self.live: list[int] = []  # own jobs not known to have ended
        self.serial = 0

    def run(self) -> None:
        with requests.Session() as session:
            session.headers.update({"Authorization": f"Token {self.persona.token}", "Accept-Language": "en"})
            self.session = session
            time.sleep(self.rng.uniform(0, self.think[1]))  # do not all start in the same instant
            while time.monotonic() < self.deadline:
                (self.approve if self.persona.role == "approver" else self.member_step)()
                time.sleep(self.rng.uniform(*self.think))

    def _call(self, op, method, path, judge=None, **kw):
        return _call(self.log, self.session, op, method, self.base + "/api/v1/" + path, judge, **kw)

    def member_step(self) -> None:
        r = self.rng.random()
        if r < 0.55 or not self.live:
            self.submit()
        elif r < 0.85:
            self.cancel(self.rng.choice(self.live))
        else:
            job = self.rng.choice(self.live)
            self._call("read", "GET", f"jobs/{job}/explain/" if r < 0.93 else f"quota-usage/?flavor={FLAVOR}")

    def submit(self) -> None:
        ((workers, gpus),) = self.rng.choices([s for s, _ in SHAPES], [w for _, w in SHAPES])
        invalid = self.rng.random() < 0.05
        self.serial += 1
        body = {
            "name": f"{self.persona.name}-{self.serial}",
            "project": self.persona.project,
            "kind": "training",
            "flavor": FLAVOR,
            "workers": workers,
            "gpus_per_worker": GPUS_PER_NODE + 1 if invalid else gpus,
            "priority": "train-high" if self.rng.random() < 0.2 else "train",
            "image": "registry.local/train:1",
            "command": "python train.py",
            "max_runtime_seconds": 3600,
            "sim_duration_seconds": self.rng.randint(100, 500),
        }
        too_big = self.persona.cap is not None and workers * gpus > self.persona.cap
        op = "submit-invalid" if invalid else "submit-too-big" if too_big else "submit"
        response = self._call(op, "POST", "jobs/", json=body)
        if response is not None and response.status_code == 201:
            self.live.append(response.json()["id"])

    def cancel(self, job_id: int) -> None:
        response = self._call("cancel", "POST", f"jobs/{job_id}/cancel/")
        if response is None:
            return
        if response.status_code != 200 or response.json().get("state") in TERMINAL:
            self.live.remove(job_id)

    def approve(self) -> None:
        response = self._call("inbox", "GET", "approvals/?inbox=1&state=pending")
        if response is None or response.status_code != 200:
            return
        pending = {
            r["id"]: r["current_step"]["id"]
            for r in response.json().get("results", [])
            if r.get("can_decide")
        }
        for request_id in self.rng.sample(sorted(pending), min(2, len(pending))):
            approve = self.rng.random() < 0.8
            self._call(
                "decide",
                "POST",
                f"approvals/{request_id}/decide/",
                lambda r, rid=request_id: r.status_code == 403 and self._moved_on(rid, pending[rid]),
                json={"approve": approve},
            )

    def _moved_on(self, request_id: int, seen_step: int) -> bool:
        """A 403 is right only if another admin decided the step we saw and the request went
        on to a step we may not decide (A's platform step): a lost race, like a 409."""
        detail = self.session.get(f"{self.base}/api/v1/approvals/{request_id}/", timeout=30)
        if detail.status_code != 200:
            return False
        seen = [s for s in detail.json()["steps"] if s["id"] == seen_step]
        return bool(seen) and seen[0]["state"] != "pending" and seen[0]["decided_by"] != self.persona.name


def run_clients(tenancy: Tenancy, base: str, config: Config) -> ClientLog:
    log = ClientLog()
    deadline = time.monotonic() + config.duration
    clients = [
        Client(p, base, deadline, config.seed * 1000 + i, config.think, log)
        for i, p in enumerate(tenancy.personas)
    ]
    for c in clients:
        c.start()
    for c in clients:
        c.join(timeout=config.duration + 60)
    return log


# --- after the run: what the database says ---------------------------------------------------


@dataclass
class Collected:
    jobs: dict[int, checks.JobInfo]
    events: list[checks.Event]
    limits: dict[tuple[str, str], checks.Limit]
    capacity: dict[str, int]
    rows: dict[int, dict]  # job id → granted_workers, on_loan, placement milli of holding jobs


def _json(value) -> dict:
    # A raw cursor hands jsonb over as text (Django decodes it only for model fields).
    return (json.loads(value) if isinstance(value, str) else value) or {}


def _tree_paths() -> dict[int, tuple[str, ...]]:
    from portal.models import Department, Project

    parent = dict(Department.objects.values_list("id", "parent_id"))
    paths = {}
    for pk, dept in Project.objects.values_list("id", "department_id"):
        path = [f"p{pk}"]
        while dept is not None:
            path.append(f"d{dept}")
            dept = parent[dept]
        paths[pk] = tuple(path)
    return paths


def collect() -> Collected:
    from django.db import connection

    from jobs.models import Job
    from quotas.models import Node, QuotaNode

    paths = _tree_paths()
    jobs, rows = {}, {}
    for job in Job.objects.select_related("flavor"):
        jobs[job.pk] = checks.JobInfo(
            job.pk,
            job.flavor.name,
            paths[job.project_id],
            job.gpus_per_worker * (job.gpu_milli or checks.MILLI),
            job.state,
        )
        if job.state in ("admitted", "running"):
            milli = sum(m for worker in job.placement for _n, _g, m in worker)
            rows[job.pk] = {"workers": job.granted_workers, "on_loan": job.on_loan, "placement_milli": milli}
    with connection.cursor() as cursor:
        # xmin: the transaction that inserted the row (events are never updated: append-only).
        cursor.execute(
            "SELECT id, xmin::text::bigint, job_id, kind, from_state, to_state, data FROM jobs_jobevent"
        )
        events = [checks.Event(*row[:6], _json(row[6])) for row in cursor.fetchall()]
    limits = {}
    for node in QuotaNode.objects.select_related("flavor"):
        key = f"p{node.project_id}" if node.project_id else f"d{node.department_id}"
        quota = int(node.quota * checks.MILLI)
        cap = None if node.borrow_limit is None else int((node.quota + node.borrow_limit) * checks.MILLI)
        limits[(key, node.flavor.name)] = checks.Limit(quota, cap)
    capacity: dict[str, int] = defaultdict(int)
    for flavor, gpus in Node.objects.filter(state="ready").values_list("flavor__name", "gpu_count"):
        capacity[flavor] += gpus * checks.MILLI
    return Collected(jobs, events, limits, dict(capacity), rows)


def usage_mismatches(collected: Collected, replayed: checks.Replay, api_rows: list[dict]) -> list[str]:
    """The portal's quota-usage report, the job rows and the replayed log must agree."""
    found = []
    if set(replayed.holding) != set(collected.rows):
        found.append(f"holding by the log {sorted(replayed.holding)} ≠ by the rows {sorted(collected.rows)}")
    expected: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for job_id, row in collected.rows.items():
        job = collected.jobs[job_id]
        milli = row["workers"] * job.worker_milli
        if row["placement_milli"] != milli:
            found.append(f"job {job_id}: placement holds {row['placement_milli']}, granted {milli}")
        held = replayed.holding.get(job_id)
        if held is not None and (held.workers, held.on_loan) != (row["workers"], bool(row["on_loan"])):
            found.append(f"job {job_id}: log says {held.workers} workers on_loan={held.on_loan}, row {row}")
        for node in job.path:
            expected[node][0] += milli
            expected[node][1] += milli if row["on_loan"] else 0
    for api in api_rows:
        key = ("p" if api["kind"] == "project" else "d") + str(api["owner_id"])
        used, borrowed = (Decimal(v) / checks.MILLI for v in expected[key])
        if (Decimal(api["used"]), Decimal(api["borrowed"])) != (used, borrowed):
            found.append(
                f"quota-usage {key}: used {api['used']} borrowed {api['borrowed']},"
                f" the jobs say {used} {borrowed}"
            )
    return found


def ledger_mismatches() -> tuple[int, list[str]]:
    """Meter the run (a watermark past its end) and compare each job's ledger card-seconds per
    tier with its running intervals recomputed from the log here."""
    from django.db import connection
    from django.db.models import Sum
    from django.utils import timezone

    from billing.meter import lag, usage_meter, watermark
    from billing.models import UsageRecord

    now = timezone.now() + lag() + timedelta(hours=1)
    upto = watermark(now)
    usage_meter(now=now)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT e.job_id, e.kind, e.from_state, e.to_state, e.data, e.occurred_at,"
            " j.gpus_per_worker * coalesce(j.gpu_milli, 1000) * f.fraction_numerator"
            " / (f.fraction_denominator * 1000.0)"
            " FROM jobs_jobevent e JOIN jobs_job j ON j.id = e.job_id"
            " JOIN quotas_flavor f ON f.id = j.flavor_id"
            " ORDER BY e.job_id, e.occurred_at, e.id"
        )
        rows = cursor.fetchall()
    expected: dict[tuple[int, str], Decimal] = defaultdict(Decimal)
    state: dict[int, list] = {}  # job → [running since, workers, on_loan, cards per worker]
    for job_id, kind, from_state, to_state, raw, at, cards in rows:
        data = _json(raw)
        s = state.setdefault(job_id, [None, 0, False, Decimal(cards)])
        if kind == "transition" and to_state == "admitted":
            s[1], s[2] = data.get("workers", 1), bool(data.get("on_loan"))
        if s[0] is not None and (
            kind in ("on_loan", "scaled") or (kind == "transition" and from_state == "running")
        ):
            expected[(job_id, _tier(s[2]))] += _card_seconds(s, at)
            s[0] = at if kind != "transition" else None
        if kind == "on_loan":
            s[2] = bool(data.get("on_loan"))
        elif kind == "scaled":
            s[1] = data.get("workers", s[1])
        elif kind == "transition" and to_state == "running":
            s[0] = at
    for job_id, s in state.items():
        if s[0] is not None:
            expected[(job_id, _tier(s[2]))] += _card_seconds(s, upto)
    metered = {
        (r["job_id"], r["tier"]): r["total"]
        for r in UsageRecord.objects.values("job_id", "tier").annotate(total=Sum("card_seconds"))
    }
    found = []
    for key in sorted(set(expected) | set(metered)):
        want, got = expected.get(key, Decimal(0)), metered.get(key, Decimal(0))
        if abs(want - got) > Decimal("0.001") * 4:  # rounding of a few hourly rows to 1e-6
            found.append(f"job {key[0]} {key[1]}: ledger {got} card-s, log says {want}")
    return len(metered), found


def _tier(on_loan: bool) -> str:
    return "on_loan" if on_loan else "standard"


def _card_seconds(s: list, end) -> Decimal:
    return Decimal(s[1]) * s[3] * Decimal(str((end - s[0]).total_seconds()))


# --- the whole run ---------------------------------------------------------------------------


@dataclass
class Result:
    config: Config
    log: ClientLog
    cycles: dict[str, int]
    collected: Collected
    replayed: checks.Replay
    chains: list[str]
    usage: list[str]
    ledger_rows: int
    ledger: list[str]
    logs: dict[str, str]
    wall_seconds: float
    phases: dict[str, float]
    stopped_in: dict[str, float]

    def unexpected(self) -> list[Outcome]:
        return [o for o in self.log.outcomes if not o.expected]

    def summary(self) -> dict:
        counts = Counter((o.op, o.status) for o in self.log.outcomes)
        by_op: dict[str, list[float]] = defaultdict(list)
        for o in self.log.outcomes:
            by_op[o.op].append(o.seconds * 1e3)
        return {
            "clients": self.config.clients,
            "duration_s": self.config.duration,
            "requests": len(self.log.outcomes),
            "submits": counts[("submit", 201)],
            "invalid_submits_refused": counts[("submit-invalid", 400)],
            "too_big_submits_refused": counts[("submit-too-big", 400)],
            "cancels": counts[("cancel", 200)],
            "approvals": sum(n for (op, st), n in counts.items() if op == "decide" and st == 200),
            "decisions_lost_to_a_race": counts[("decide", 409)] + counts[("decide", 400)],
            "jobs": len(self.collected.jobs),
            "events": len(self.collected.events),
            "transactions_replayed": self.replayed.transactions,
            "admissions": self.replayed.admissions,
            "event_kinds": dict(
                Counter(
                    e.kind if e.kind != "transition" else f"→{e.to_state}" for e in self.collected.events
                ).most_common()
            ),
            "cycles": self.cycles,
            "max_over_admission_gpus": self.replayed.max_over / checks.MILLI,
            "violations": len(self.replayed.violations) + len(self.chains),
            "usage_mismatches": len(self.usage),
            "ledger_rows": self.ledger_rows,
            "ledger_mismatches": len(self.ledger),
            "errors": len(self.unexpected()),
            "statuses": {f"{op} {st}": n for (op, st), n in sorted(counts.items())},
            "latency_ms": {
                op: {"p50": round(_pct(v, 50), 1), "p95": round(_pct(v, 95), 1), "n": len(v)}
                for op, v in sorted(by_op.items())
            },
            "wall_seconds": round(self.wall_seconds, 1),
            "phases_s": {k: round(v, 1) for k, v in self.phases.items()},
            "stopped_in_s": self.stopped_in,
        }


def _pct(values: list[float], p: int) -> float:
    if len(values) < 2:
        return values[0] if values else 0.0
    return statistics.quantiles(values, n=100, method="inclusive")[p - 1]


def run(config: Config, database_url: str, workdir: Path | None = None) -> Result:
    """Build the tenancy, run the clients against the real processes, stop them, collect."""
    t0 = time.monotonic()
    phases: dict[str, float] = {}
    workdir = workdir or Path(tempfile.mkdtemp(prefix="conc-"))
    services = Services(database_url, config.clients, config.speed, workdir)
    try:
        services.start_cluster()
        services.start_portal()
        tenancy = build_tenancy(config, services.sim_url)
        phases["tenancy_s"] = time.monotonic() - t0
        services.wait_portal()
        phases["start_s"] = time.monotonic() - t0
        log = run_clients(tenancy, services.web_url, config)
        phases["clients_s"] = time.monotonic() - t0 - phases["start_s"]
        # Quiesce before reading: no cycle or status sync may write while the log is replayed.
        # Beat only sends messages: it is killed; the workers finish their task and stop.
        services.procs["beat"].kill()
        services.stop("beat", "worker1", "worker2")
        api = requests.get(
            f"{services.web_url}/api/v1/quota-usage/?flavor={FLAVOR}",
            headers={"Authorization": f"Token {tenancy.admin_token}"},
            timeout=30,
        )
        api.raise_for_status()
    finally:
        services.stop()
        services.purge_queue()
    phases["stop_s"] = time.monotonic() - t0 - phases["start_s"] - phases["clients_s"]
    t2 = time.monotonic()
    collected = collect()
    replayed = checks.replay(collected.jobs, collected.events, collected.limits, collected.capacity)
    chains = checks.chain_violations(collected.jobs, collected.events)
    usage = usage_mismatches(collected, replayed, api.json()["nodes"])
    ledger_rows, ledger = ledger_mismatches()
    phases["check_s"] = time.monotonic() - t2
    logs = {name: services.log(name)[-3000:] for name in services.procs}
    return Result(
        config,
        log,
        services.cycles(),
        collected,
        replayed,
        chains,
        usage,
        ledger_rows,
        ledger,
        logs,
        time.monotonic() - t0,
        phases,
        services.stopped_in,
    )


def to_json(result: Result) -> str:
    return json.dumps(result.summary(), sort_keys=False)
