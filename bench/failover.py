"""Failover (issue 35, the seed's stability test): nodes fail under a busy pool; how many of the jobs
on them finish elsewhere, how much work is lost, whether checkpoints stay consistent, and whether
the ledger counts any card-hour twice.

Real parts, the live path: PostgreSQL (a scratch database, bench/scratchdb.py), the simulated
cluster as a process (``jobs.clusters.backends.simserver``) at ``--speed``, and a real Prometheus
scraping the simulator's DCGM exporter every second. This process drives the portal's own services
the way beat and the worker run them — ``schedule_once``, ``dispatch_job``, ``stop_job``,
``sync_cluster``, ``poll_node_health``, ``refresh_node_states``, ``usage_meter`` — in one loop, so
the run is reproducible (no Celery timing).

The pool: ``--nodes`` × 8 simulated GPUs; ``--jobs`` training jobs of 1 or 2 GPUs (every other one
checkpointing, its checkpoint every simulated step of 10 s) and ``--services`` inference services
of 2 replicas. ``--failures`` nodes fail over the run, one every ``--every`` simulated seconds, each
the busiest node still in service (every other one a node with a service replica), alternately

- an XID error on one of its GPUs, scraped by Prometheus: one ``poll_node_health`` cordons the
  node and sends its jobs back (their grace period, then requeued);
- the node lost (down in the simulator): the status sync records its jobs lost and requeues them;

and each comes back ``--outage`` simulated seconds later (the XID cleared and one more health poll;
the node up again and the inventory read).

Measured (simulated time for work, real seconds for the ledger, which bills by the wall clock):

- migration: of the training jobs on a failed node, the share that later succeeded — overall and
  for the checkpointing ones; for services, the replicas on failed nodes that were placed again;
- work lost (training jobs; a service has no work to lose): GPU-hours run on a failed node and not
  kept (for a checkpointing job the time since
  its last saved step, for the others the whole interrupted run);
- checkpoint consistency: no run resumed from a step later than the one saved when its predecessor
  stopped, and no checkpointing job lost more than one checkpoint interval;
- double counting: overlapping ledger segments of a job, and ledger card-seconds beyond the running
  intervals of its events (both must be 0);
- the free-GPU watermark on nodes in service: before the first failure, the lowest during, and
  after the last node came back.

Prints one JSON object. Needs DATABASE_URL, REDIS_URL and Debian's ``prometheus``.

    python bench/failover.py                      # 40 nodes (320 GPUs), 200 jobs, 8 services, 8 failures
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratchdb import scratch_django  # noqa: E402

GPUS_PER_NODE = 8
STEP_SECONDS = 10  # the simulator's step: one checkpoint per step (jobs.clusters.backends.simserver)
LONG = 10**7  # simulated seconds: a service runs until it is stopped


# ---------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(check, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"gave up waiting for {what}")


def _start_simserver(tmp: Path, speed: float) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobs.clusters.backends.simserver", "--port", str(port),
         "--state", str(tmp / "sim.json"), "--speed", str(speed)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    _wait(lambda: urllib.request.urlopen(url + "/healthz", timeout=1).status == 200, "the simulator")
    return proc, url


def _start_prometheus(tmp: Path, target: str) -> tuple[subprocess.Popen, str]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed (Debian's package)")
    port = _free_port()
    config = tmp / "prometheus.yml"
    config.write_text(json.dumps({
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [
            {"job_name": "dcgm", "honor_labels": True, "static_configs": [{"targets": [target]}]}
        ],
    }))
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'prom'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    _wait(lambda: _query(url, 'up{job="dcgm"} == 1'), "Prometheus's first scrape")
    return proc, url


def _query(url: str, expr: str) -> list:
    query = urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=5) as r:
        return json.load(r)["data"]["result"]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


# ---------------------------------------------------------------- the pool


def build(sim_url: str, args, tmp: Path):
    from django.db import transaction

    from jobs.clusters.backends.base import NodeInfo
    from jobs.clusters.backends.simulator import SimulatorBackend
    from jobs.models import ProjectStorage
    from jobs.services import job_submit
    from quotas.models import Cluster, Node
    from tests import factories as fx

    f = fx.flavor()
    cluster = Cluster.objects.create(name="failover", kind="simulator", config={"url": sim_url})
    nodes = [
        Node.objects.create(cluster=cluster, name=f"fo-{i:02d}", flavor=f, gpu_count=GPUS_PER_NODE, zone="z",
                            spine=f"s{i // 16}", leaf=f"l{i // 4}")
        for i in range(args.nodes)
    ]
    SimulatorBackend(sim_url).set_inventory(
        [NodeInfo(n.name, f.name, n.gpu_count, "ready", n.zone, n.spine, n.leaf) for n in nodes])
    dept, total = fx.department("D"), args.nodes * GPUS_PER_NODE
    project = fx.project("p", dept)
    fx.quota(f, dept, total)
    fx.quota(f, project, total)
    ProjectStorage.objects.create(project=project, name="ckpt", kind="hostpath", host_path=str(tmp / "ckpt"),
                                  mount_path="/ckpt", checkpoints=True)
    admin, prio, rng = fx.platform_admin(), fx.priority(), random.Random(args.seed)
    jobs = []
    for i in range(args.jobs):
        with transaction.atomic():
            jobs.append(job_submit(
                actor=admin, project=project, name=f"train-{i}", kind="training", flavor=f,
                priority_class=prio, image="pytorch:2.3", workers=1, gpus_per_worker=2 if i % 4 == 3 else 1,
                checkpointing=i % 2 == 0, sim_duration_seconds=rng.randrange(args.shortest, args.longest, 10),
            ))
    for i in range(args.services):
        with transaction.atomic():
            jobs.append(job_submit(
                actor=admin, project=project, name=f"svc-{i}", kind="inference", flavor=f,
                priority_class=prio, image="vllm:0.5", workers=2, gpus_per_worker=1,
                sim_duration_seconds=LONG,
            ))
    return cluster, [j.pk for j in jobs]


# ---------------------------------------------------------------- the run


class Driver:
    """One loop of what beat and the worker do, the failures on a simulated schedule, and what is
    measured along the way."""

    def __init__(self, cluster, sim, prom_url: str, speed: float, tmp: Path):
        self.cluster, self.sim, self.prom_url, self.speed, self.tmp = cluster, sim, prom_url, speed, tmp
        self.t0 = time.monotonic()
        # job → its interrupted runs, as the simulator had them
        self.runs: dict[int, list[dict]] = defaultdict(list)
        self.hit: dict[int, dict] = {}  # job → what it was when its node failed (first failure only)
        self.failures: list[dict] = []
        self.free: list[tuple[float, int]] = []
        self.peak = {"jobs_holding": 0, "gpus_busy": 0}
        self.cordoned_in_one_poll = 0

    def sim_now(self) -> float:
        return (time.monotonic() - self.t0) * self.speed

    def step(self) -> None:
        from jobs.clusters import dispatch
        from jobs.models import Job
        from jobs.scheduling.cycle import schedule_once
        from jobs.states import HOLDING, JobState

        schedule_once()
        admitted = Job.objects.filter(state=JobState.ADMITTED, dispatched_at__isnull=True)
        for pk, requeues in admitted.values_list("pk", "requeue_count"):
            if requeues > len(self.runs[pk]):
                self._snapshot(pk)
            dispatch.dispatch_job(pk)
        stopping = Job.objects.filter(state__in=list(HOLDING), dispatched_at__isnull=False,
                                      stop_requested_at__isnull=True, terminating_since__isnull=False)
        for pk in stopping.values_list("pk", flat=True):
            dispatch.stop_job(pk)
        dispatch.sync_cluster(self.cluster.pk)
        self.free.append((self.sim_now(), free_gpus(self.cluster)))
        holding = list(Job.objects.filter(state__in=list(HOLDING)).values_list("workers", "gpus_per_worker"))
        self.peak["jobs_holding"] = max(self.peak["jobs_holding"], len(holding))
        self.peak["gpus_busy"] = max(self.peak["gpus_busy"], sum(w * g for w, g in holding))

    def _snapshot(self, pk: int) -> None:
        """The run a failure ended, before the next run replaces it in the simulator: where it
        began and ended, the step it reached, and the step its checkpoint holds now."""
        from jobs.models import Job

        view = self.sim.view(f"gp-{pk}")
        job = Job.objects.get(pk=pk)
        saved = None
        if job.checkpoint:
            path = Path(job.checkpoint["mount"]["host_path"]) / job.checkpoint["subdir"] / "step"
            saved = int(path.read_text()) if path.exists() else 0
        self.runs[pk].append({**{k: view[k] for k in ("step", "resumed_from", "started_at", "finished_at")},
                              "saved": saved})

    def fail(self, how: str) -> dict:
        from jobs.clusters.health import poll_node_health
        from jobs.clusters.nodes import jobs_on_node
        from quotas.models import Node, NodeState

        failed = {f["node"] for f in self.failures}
        ready = Node.objects.filter(cluster=self.cluster, state=NodeState.READY).exclude(name__in=failed)
        # Every other failure takes a node with a service replica (while one is left in service).
        node = max(ready, key=lambda n: _busiest(n, len(self.failures) % 2 == 0))
        on_node = jobs_on_node(node)
        for job in on_node:
            replicas = sum(1 for w in job.placement if any(s[0] == node.pk for s in w))
            self.hit.setdefault(job.pk, {
                "node": node.name, "kind": job.kind, "checkpointing": job.checkpointing,
                "gpus": job.gpus_per_worker, "requeues": job.requeue_count, "replicas": replicas,
            })
        record = {"node": node.name, "how": how, "at": round(self.sim_now()), "jobs": len(on_node),
                  "free_before": free_gpus(self.cluster)}
        if how == "xid":
            self.sim.set_xid(node.name, 3, 79)
            _wait(lambda: _query(self.prom_url, _xid(node.name)), "the XID")
            poll_node_health()
            node.refresh_from_db()
            self.cordoned_in_one_poll += node.health_reason != ""
            record["cordoned_in_one_poll"] = node.health_reason != ""
        else:
            self.sim.set_node_state(node.name, "down")
        self.failures.append(record)
        return record

    def recover(self, record: dict) -> None:
        from jobs.clusters.health import poll_node_health
        from jobs.clusters.inventory import refresh_node_states

        if record["how"] == "xid":
            self.sim.set_xid(record["node"], 3, 0)
            _wait(lambda: not _query(self.prom_url, _xid(record["node"])), "the XID to clear")
            record["returned_by_health_check"] = poll_node_health()["recovered"] == 1
        else:
            self.sim.set_node_state(record["node"], "ready")
            refresh_node_states(self.cluster)
        record["back_at"] = round(self.sim_now())


def _busiest(node, services_first: bool) -> tuple[int, ...]:
    """How much failing ``node`` hits: its jobs, and whether it holds a service replica (first when
    ``services_first``)."""
    from jobs.clusters.nodes import jobs_on_node

    jobs = jobs_on_node(node)
    service = int(any(j.kind == "inference" for j in jobs))
    return (service, len(jobs)) if services_first else (len(jobs), service)


def _within(started: float, seconds: float) -> bool:
    return time.monotonic() - started < seconds


def _xid(node: str) -> str:
    return f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{node}"}} > 0'


def free_gpus(cluster) -> int:
    """GPUs no job holds, on nodes in service."""
    from jobs.models import Job
    from jobs.states import HOLDING
    from quotas.models import Node, NodeState

    ready = dict(Node.objects.filter(cluster=cluster, state=NodeState.READY).values_list("pk", "gpu_count"))
    held = sum(
        1 for placement in Job.objects.filter(state__in=list(HOLDING)).values_list("placement", flat=True)
        for worker in placement for node, _g, _m in worker if node in ready
    )
    return sum(ready.values()) - held


def run(args) -> dict:
    from django.conf import settings
    from django.db import connection

    from jobs.clusters import dispatch
    from jobs.clusters.backends.simulator import SimulatorBackend
    from jobs.models import Job
    from jobs.services import job_cancel

    with tempfile.TemporaryDirectory(prefix="failover-") as tmpdir:
        tmp = Path(tmpdir)
        sim_proc, sim_url = _start_simserver(tmp, args.speed)
        prom_proc, prom_url = _start_prometheus(tmp, sim_url.removeprefix("http://"))
        settings.GPUPOOL["PROMETHEUS_URL"] = prom_url
        try:
            cluster, ids = build(sim_url, args, tmp)
            driver = Driver(cluster, SimulatorBackend(sim_url, timeout=30), prom_url, args.speed, tmp)
            started = time.monotonic()
            while _within(started, 120) and Job.objects.filter(pk__in=ids, state="queued").exists():
                driver.step()
            # The schedule of failures counts from a busy pool (dispatching every job takes a while:
            # the simulator's clock runs meanwhile, so the shortest jobs are partly done by then).
            driver.t0, driver.free = time.monotonic(), []
            busy = {"jobs_holding": Job.objects.filter(pk__in=ids, state__in=["admitted", "running"]).count(),
                    "free_gpus": free_gpus(cluster), "dispatch_real_seconds": round(driver.t0 - started, 1)}
            due = [(args.every * (k + 1), "xid" if k % 2 == 0 else "down") for k in range(args.failures)]
            outages: list[tuple[float, dict]] = []
            services = [pk for pk in ids if Job.objects.get(pk=pk).kind == "inference"]
            training = [pk for pk in ids if pk not in services]
            deadline = time.monotonic() + args.timeout
            while time.monotonic() < deadline:
                driver.step()
                now = driver.sim_now()
                while due and due[0][0] <= now:
                    _, how = due.pop(0)
                    outages.append((now + args.outage, driver.fail(how)))
                for back in [o for o in outages if o[0] <= now]:
                    outages.remove(back)
                    driver.recover(back[1])
                    driver.step()  # the node in service again, the queue placed
                    back[1]["free_after"] = free_gpus(cluster)
                if not due and not outages and not Job.objects.filter(
                        pk__in=training, state__in=["queued", "admitted", "running"]).exists():
                    break
            else:
                raise SystemExit("the run did not finish within --timeout")
            after = free_gpus(cluster)
            services_back = {pk: Job.objects.get(pk=pk).state == "running" for pk in services}
            for pk in services:
                job_cancel(actor=Job.objects.get(pk=pk).submitted_by, job=Job.objects.get(pk=pk))
            while Job.objects.filter(pk__in=services, state="running").exists():
                for pk in services:
                    dispatch.stop_job(pk)
                driver.step()
            return report(args, driver, ids, services, services_back, busy, after)
        finally:
            _stop(prom_proc)
            _stop(sim_proc)
            connection.close()


# ---------------------------------------------------------------- the figures


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def report(args, driver: Driver, ids, services, services_back, busy, free_after) -> dict:
    from django.utils import timezone

    from billing.meter import usage_meter
    from jobs.models import Job

    final = {j.pk: j for j in Job.objects.filter(pk__in=ids)}
    hit_training = {pk: h for pk, h in driver.hit.items() if h["kind"] != "inference"}
    ckpt = {pk for pk, h in hit_training.items() if h["checkpointing"]}
    migrated = {pk for pk in hit_training if final[pk].state == "succeeded"}
    elsewhere = {pk for pk in migrated if driver.hit[pk]["node"] not in _nodes_of(final[pk])}
    lost_seconds, lost_ckpt, later_than_saved, over_interval = Decimal(0), Decimal(0), [], []
    for pk, runs in driver.runs.items():
        if not runs or pk in services:  # a service's replicas are counted apart
            continue
        nxt = [r["resumed_from"] for r in runs[1:]] + [driver.sim.view(f"gp-{pk}")["resumed_from"]]
        for run_, resumed in zip(runs, nxt, strict=True):
            real = (_iso(run_["finished_at"]) - _iso(run_["started_at"])).total_seconds()
            ran = Decimal(str(real * args.speed))
            kept = Decimal((resumed - run_["resumed_from"]) * STEP_SECONDS) if final[pk].checkpointing else 0
            lost = max(Decimal(0), ran - kept)
            gpu_seconds = lost * final[pk].gpus_per_worker * final[pk].workers
            lost_seconds += gpu_seconds
            lost_ckpt += gpu_seconds if final[pk].checkpointing else 0
            if run_["saved"] is not None and resumed > run_["saved"]:
                later_than_saved.append(pk)
            if final[pk].checkpointing and lost > STEP_SECONDS:
                over_interval.append({"job": pk, "lost_seconds": float(lost)})
    replicas_hit = sum(h["replicas"] for pk, h in driver.hit.items() if pk in services)
    replicas_back = sum(h["replicas"] for pk, h in driver.hit.items() if pk in services and services_back[pk]
                        and final[pk].requeue_count > h["requeues"])
    usage_meter(now=timezone.now() + timedelta(hours=2))
    overlap, excess = ledger_double_counting(ids)
    xids = sum(1 for f in driver.failures if f["how"] == "xid")
    last = driver.failures[-1] if driver.failures else {}
    during = [free for at, free in driver.free if driver.failures and at >= driver.failures[0]["at"]]
    return {
        "bench": "failover",
        "path": "live services on PostgreSQL, simulator backend, real Prometheus (one driver loop)",
        "pool": {"nodes": args.nodes, "gpus": args.nodes * GPUS_PER_NODE, "training_jobs": args.jobs,
                 "checkpointing": sum(1 for pk in ids if final[pk].checkpointing),
                 "services": len(services), "replicas": 2 * len(services), "speed": args.speed, **busy},
        "failures": driver.failures,
        "xid_cordoned_in_one_poll": f"{driver.cordoned_in_one_poll}/{xids}",
        "training_on_failed_nodes": len(hit_training),
        "migration_success_rate": _rate(len(migrated), len(hit_training)),
        "migration_success_rate_checkpointing": _rate(len(migrated & ckpt), len(ckpt)),
        "migration_success_rate_plain": _rate(len(migrated - ckpt), len(hit_training) - len(ckpt)),
        "finished_on_another_node": len(elsewhere),
        "requeues": sum(final[pk].requeue_count for pk in ids),
        "service_replicas_on_failed_nodes": replicas_hit,
        "service_replicas_replaced": replicas_back,
        "service_replica_migration_rate": _rate(replicas_back, replicas_hit),
        "work_lost_gpu_hours": round(float(lost_seconds) / 3600, 3),
        "work_lost_gpu_hours_checkpointing": round(float(lost_ckpt) / 3600, 3),
        "checkpoint": {"resumed_later_than_saved": later_than_saved,
                       "lost_more_than_one_interval": over_interval, "interval_seconds": STEP_SECONDS},
        "card_hours_double_counted": round((overlap + excess) / 3600, 6),
        "ledger": {"overlapping_card_seconds": overlap, "card_seconds_beyond_events": excess},
        "free_gpus": {"before_first_failure": driver.failures[0]["free_before"] if driver.failures else None,
                      "lowest_during": min(during) if during else None,
                      # the last node to come back is the last to fail (one outage length for all)
                      "after_last_recovery": last.get("free_after"),
                      "at_the_end": free_after},
        "peak": driver.peak,
        "final_states": _count(final[pk].state for pk in ids if pk not in services),
    }


def _nodes_of(job) -> set[str]:
    from quotas.models import Node

    ids = {s[0] for w in job.placement or () for s in w}
    return set(Node.objects.filter(pk__in=ids).values_list("name", flat=True))


def ledger_double_counting(ids) -> tuple[float, float]:
    """Card-seconds counted twice: ledger segments of one job that overlap, and ledger card-seconds
    beyond the job's running intervals in its events (the wall clock: the ledger's)."""
    from billing.models import UsageRecord
    from jobs.models import Job, JobEvent

    overlap = excess = Decimal(0)
    for job in Job.objects.filter(pk__in=ids):
        records = list(UsageRecord.objects.filter(job=job).order_by("segment_start"))
        for a, b in pairwise(records):
            if b.segment_start < a.segment_end:
                seconds = (min(a.segment_end, b.segment_end) - b.segment_start).total_seconds()
                overlap += Decimal(str(seconds)) * job.gpus_per_worker * job.workers
        running, opened = Decimal(0), None
        for e in JobEvent.objects.filter(job=job, kind="transition").order_by("occurred_at", "id"):
            if e.to_state == "running":
                opened = e.occurred_at
            elif e.from_state == "running" and opened is not None:
                running += Decimal((e.occurred_at - opened) // timedelta(microseconds=1)) / 10**6
                opened = None
        metered = sum((r.card_seconds for r in records), Decimal(0))
        excess += max(Decimal(0), metered - running * job.gpus_per_worker * job.workers - Decimal("0.001"))
    return float(overlap), float(excess)


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _count(values) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        out[v] += 1
    return dict(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--services", type=int, default=8)
    parser.add_argument("--failures", type=int, default=8)
    parser.add_argument("--every", type=float, default=600, help="simulated seconds between failures")
    parser.add_argument("--outage", type=float, default=1500, help="simulated seconds a node stays out")
    parser.add_argument("--shortest", type=int, default=9600, help="shortest training job, simulated seconds")
    parser.add_argument("--longest", type=int, default=16000)
    parser.add_argument("--speed", type=float, default=100)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--timeout", type=float, default=1800, help="real seconds")
    args = parser.parse_args()
    if args.nodes * GPUS_PER_NODE < 256 or args.jobs < 200:
        print("note: the issue's bar is >= 256 GPUs and >= 200 jobs", file=sys.stderr)
    os.environ["CELERY_QUEUE"] = f"failover-{uuid.uuid4().hex[:8]}"  # nobody consumes it: dropped below
    with scratch_django():
        logging.getLogger("jobs").setLevel(logging.WARNING)  # a line per cycle would bury the JSON
        result = run(args)
        _drop_queue(os.environ["CELERY_QUEUE"])
    print(json.dumps(result, indent=2))


def _drop_queue(name: str) -> None:
    """The messages the services queued for a worker (none runs here: this loop does their work)."""
    import redis

    redis.Redis.from_url(os.environ["REDIS_URL"]).delete(name)


if __name__ == "__main__":
    main()
