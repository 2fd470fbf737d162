"""Part (d) of the scheduler benchmark: the Kueue shape of part (a) end to end through the
Django ``schedule_once`` service on PostgreSQL — snapshot read from the database, the pure
engine, and every decision written (conditional updates + event rows).

Measured like part (a): from an empty cluster, ``schedule_once`` cycles on a virtual clock until
all workloads have been admitted (the queue is drained). Between cycles a stand-in for the
backend's status sync (one SQL statement, not timed) finishes the jobs whose runtime has elapsed
and lets preempted victims exit back to the queue. ``e2e_admissions_per_s`` = admissions ÷ wall
time of the ``schedule_once`` calls; ``e2e_fill_admissions_per_s`` is the first cycle alone.
The data set is written once per run into a
scratch database (``<name>_bench`` next to DATABASE_URL's), which is dropped at the end.
Needs DATABASE_URL and REDIS_URL (run it under ``scripts/devenv.py run`` for embedded ones).
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from scratchdb import scratch_django

T0 = datetime(2025, 3, 1, tzinfo=UTC)
CLASSES = ((1, 1, 50, 200), (5, 1, 100, 500), (8, 3, 200, 1000))  # gpus/worker, workers, priority, runtime s


def _populate(departments: int, projects: int, nodes: int, pending: int) -> None:
    from jobs.models import Job, PriorityClass
    from portal.models import Department, Project, User
    from quotas.models import Cluster, Flavor, Node, QuotaNode

    flavor = Flavor.objects.create(
        name="H800", vendor="nvidia", model="H800", memory_mib=81920, k8s_resource_name="nvidia.com/gpu"
    )
    cluster = Cluster.objects.create(name="bench", kind="simulator")
    Node.objects.bulk_create(
        Node(
            cluster=cluster,
            name=f"n{i:05d}",
            flavor=flavor,
            gpu_count=8,
            zone=f"z{i // 1280}",
            spine=f"s{i // 128}",
            leaf=f"l{i // 16}",
        )
        for i in range(nodes)
    )
    user = User.objects.create(username="bench")
    prios = {
        v: PriorityClass.objects.create(name=f"p{v}", value=v, grace_seconds=0) for _, _, v, _ in CLASSES
    }
    project_ids = []
    for d in range(departments):
        dept = Department.objects.create(code=f"d{d:02d}", name=f"d{d}")
        QuotaNode.objects.create(flavor=flavor, department=dept, quota=Decimal(projects * 24))
        made = Project.objects.bulk_create(
            Project(code=f"d{d:02d}-p{p:03d}", name="p", department=dept) for p in range(projects)
        )
        QuotaNode.objects.bulk_create(QuotaNode(flavor=flavor, project=p, quota=Decimal(24)) for p in made)
        project_ids += [p.pk for p in made]
    import random

    rng = random.Random(7)
    Job.objects.bulk_create(
        (
            Job(
                name=f"w{k}",
                project_id=rng.choice(project_ids),
                submitted_by=user,
                kind="training",
                flavor=flavor,
                priority_class=prios[CLASSES[k % 3][2]],
                workers=CLASSES[k % 3][1],
                gpus_per_worker=CLASSES[k % 3][0],
                image="bench",
                max_runtime_seconds=CLASSES[k % 3][3],
                state="queued",
                state_changed_at=T0,
                submitted_at=T0 + timedelta(milliseconds=k),
            )
            for k in range(pending)
        ),
        batch_size=5000,
    )


def _reset() -> None:
    """Every run starts like a fresh portal process: all jobs queued, no warm engine."""
    from django.db import connection

    from jobs.scheduling.warm import warm_engine

    warm_engine().invalidate()

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_jobevent")  # append-only: rows cannot be deleted one by one
        cursor.execute(
            "UPDATE jobs_job SET state = 'queued', placement = '[]', on_loan = NULL, "
            "admitted_at = NULL, granted_workers = NULL, terminating_since = NULL"
        )


def _backend_step(now: datetime) -> datetime | None:
    """Finish jobs whose runtime has elapsed by ``now``, let victims exit; return the next
    completion time (None when nothing holds GPUs)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE jobs_job SET state = 'queued', placement = '[]', terminating_since = NULL, "
            "on_loan = NULL, requeue_count = requeue_count + 1 "
            "WHERE state = 'admitted' AND terminating_since IS NOT NULL"
        )
        cursor.execute(
            "UPDATE jobs_job SET state = 'succeeded', finished_at = %s WHERE state = 'admitted' "
            "AND admitted_at + make_interval(secs => max_runtime_seconds) <= %s",
            [now, now],
        )
        cursor.execute(
            "SELECT min(admitted_at + make_interval(secs => max_runtime_seconds)) FROM jobs_job "
            "WHERE state = 'admitted'"
        )
        return cursor.fetchone()[0]


def _drain() -> tuple[int, float, int, float]:
    from jobs.scheduling.cycle import schedule_once

    admitted, cycles, spent, now, fill_rate = 0, 0, 0.0, T0, 0.0
    while True:
        started = time.perf_counter()
        report = schedule_once(now)
        elapsed = time.perf_counter() - started
        spent += elapsed
        cycles += 1
        admitted += report.admitted
        if cycles == 1:
            fill_rate = report.admitted / elapsed
        if report.waiting == 0 and report.admitted == 0:
            break
        upcoming = _backend_step(now)
        if upcoming is None and report.admitted == 0:
            break
        # Like part (a): the clock jumps to the next completion (a cycle runs on every finish).
        now = max(now + timedelta(seconds=1), upcoming) if upcoming else now + timedelta(seconds=1)
    return admitted, spent, cycles, fill_rate


def run(quick: bool, runs: int) -> dict:
    sizes = (10, 10, 250, 5_000) if quick else (10, 100, 2_500, 50_000)
    with scratch_django():
        started = time.perf_counter()
        _populate(*sizes)
        populate_s = time.perf_counter() - started
        samples = []
        for _ in range(runs):
            _reset()
            samples.append(_drain())
    rates = [a / s for a, s, _, _ in samples]
    return {
        "e2e_admissions_per_s": round(statistics.median(rates), 1),
        "e2e_fill_admissions_per_s": round(statistics.median(f for *_, f in samples), 1),
        "e2e_admitted": samples[0][0],
        "e2e_cycles": samples[0][2],
        "e2e_drain_s": round(statistics.median(s for _, s, _, _ in samples), 3),
        "e2e_populate_s": round(populate_s, 1),
        "e2e_runs": runs,
    }


if __name__ == "__main__":
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import logging

    logging.disable(logging.INFO)
    print(json.dumps(run("--quick" in sys.argv, 3 if "--quick" in sys.argv else 5)))
