"""The fair share's usage read (billing/fairshare.py, issue 34) at scale, on PostgreSQL in a scratch
database (bench/scratchdb.py): ``--jobs`` jobs (default 50,000) of 200 projects in 20 departments,
each admitted at a random instant of the last 90 days, running 1–24 h (still running when that
passes now), one in ten preempted and run again 10 min later; events as the services write them.

Timed (best of 5, warm cache): the one statement per snapshot (``usage_ms``, default 7-day
half-life: runs that ended within 70 days are read), the report's selector (``report_ms``) and the
chart's 30 daily reads (``history_ms``). Prints one JSON object. Needs DATABASE_URL and REDIS_URL."""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django

NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _populate(jobs: int, seed: int) -> int:
    from jobs.models import Job, JobEvent, PriorityClass
    from portal.models import Department, Project, User
    from quotas.models import Flavor, QuotaNode

    rng = random.Random(seed)
    flavor = Flavor.objects.create(name="A100", vendor="nvidia", model="A100", memory_mib=81920,
                                   k8s_resource_name="nvidia.com/gpu")
    prio = PriorityClass.objects.create(name="training", value=100)
    user = User.objects.create_user(username="bench")
    projects = []
    for d in range(20):
        dept = Department.objects.create(code=f"d{d}", name=f"d{d}")
        QuotaNode.objects.create(flavor=flavor, department=dept, quota=64)
        for p in range(10):
            project = Project.objects.create(code=f"d{d}p{p}", name=f"d{d}p{p}", department=dept)
            QuotaNode.objects.create(flavor=flavor, project=project, quota=rng.choice((4, 8, 16)))
            projects.append(project)
    rows, events, plans = [], [], []
    for i in range(jobs):
        at = NOW - timedelta(seconds=rng.uniform(3600, 90 * 86400))
        runs = []  # (admitted, ended or None: still running at NOW)
        for _k in range(2 if rng.random() < 0.1 else 1):
            end = at + timedelta(hours=rng.uniform(1, 24))
            runs.append((at, end if end < NOW else None))
            if end >= NOW:
                break
            at = end + timedelta(minutes=10)
            if at >= NOW:
                break
        plans.append(runs)
        rows.append(Job(name=f"j{i}", project=rng.choice(projects), submitted_by=user, kind="training",
                        flavor=flavor, priority_class=prio, workers=1,
                        gpus_per_worker=rng.choice((1, 2, 4, 8)), image="img",
                        state="running" if runs[-1][1] is None else "succeeded",
                        state_changed_at=runs[-1][1] or runs[-1][0],
                        submitted_at=runs[0][0] - timedelta(minutes=5)))
    Job.objects.bulk_create(rows, batch_size=5000)
    for job, runs in zip(rows, plans, strict=True):
        events.append(JobEvent(job=job, from_state="", to_state="queued", occurred_at=job.submitted_at))
        for k, (admitted, ended) in enumerate(runs):
            events.append(JobEvent(job=job, from_state="queued", to_state="admitted", occurred_at=admitted,
                                   data={"workers": 1, "flavor": "A100", "on_loan": False}))
            events.append(JobEvent(job=job, from_state="admitted", to_state="running",
                                   occurred_at=admitted + timedelta(seconds=30)))
            if ended is not None:
                last = k == len(runs) - 1
                events.append(JobEvent(job=job, from_state="running",
                                       to_state="succeeded" if last else "preempted", occurred_at=ended))
                if not last:
                    events.append(JobEvent(job=job, from_state="preempted", to_state="queued",
                                           occurred_at=ended))
    JobEvent.objects.bulk_create(events, batch_size=5000)
    return len(events)


def _best(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return round(min(times), 2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with scratch_django():
        from django.db import connection

        from billing.fairshare import project_usage
        from billing.fairshare_report import fair_share_report, share_history
        from portal.models import User

        events = _populate(args.jobs, args.seed)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        admin = User.objects.create_superuser(username="root", password="x")
        usage = project_usage(NOW, 7 * 86400)
        print(json.dumps({
            "jobs": args.jobs, "events": events, "projects_with_usage": len(usage),
            "usage_ms": _best(lambda: project_usage(NOW, 7 * 86400)),
            "report_ms": _best(lambda: fair_share_report(admin, NOW)),
            "history_ms": _best(lambda: share_history(admin, NOW), repeat=2),
        }))


if __name__ == "__main__":
    main()
