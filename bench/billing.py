"""Billing at the scale of a busy month: 100,000 jobs (≈ 1 M ledger rows) metered, closed and
exported, on PostgreSQL in a scratch database (bench/scratchdb.py).

The month is November 2026 (Asia/Shanghai). 20 departments × 10 projects, 50 users, two
flavors (A100 whole cards, a 1/7 MIG slice) with a rate change on the 15th. Each job runs
8–10 h from a random instant of the month, so the hour split gives ≈ 10 rows per job; 30 %
start on loan, a quarter flip tier once, one in ten is preempted and re-runs. The events are
written the way the services write them (admission with ``workers``/``on_loan``, "on_loan"
flips, transitions into and out of ``running``).

Timed: the meter's first run over the whole month (``meter_seconds``, target ≤ 30 s), the
month close plus the CSV chargeback file (``close_csv_seconds``, ≤ 10 s) and the XLSX file
(``xlsx_seconds``, ≤ 20 s). Then one job in ten receives a late correction after the close (the
backend's tier flip at an instant inside its run, recorded now — DESIGN §7 "Facts and
corrections"): a plain meter run finds and corrects them with reversal rows
(``correction_meter_seconds``, ``late_corrected_jobs``, ``reversal_rows``) and December closes
with the adjustment lines naming November (``correction_close_csv_seconds``,
``adjustment_lines``). Finally, with a budget on every department and project, what the
scheduler's per-cycle budget hold costs (``budget_hold_first_ms``, ``budget_hold_cycle_ms``).
CPU and memory (issue 33): whole-card jobs carry a share per card, a third ask beyond it, and
core-hour / GiB-hour rates price that part (``ledger_core_hours``, ``ledger_extra_core_hours``,
``ledger_extra_gib_hours``, ``core_gib_lines``).
Prints one JSON object. ``--quick``: 10,000 jobs; ``--jobs 1000000``: the large month (the
target there is the meter: ≤ 5 min).
Needs DATABASE_URL and REDIS_URL.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import random
import sys
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django

ZONE = ZoneInfo("Asia/Shanghai")
MONTH = date(2026, 11, 1)
MONTH_START = datetime(2026, 11, 1, tzinfo=ZONE).astimezone(UTC)
MONTH_END = datetime(2026, 12, 1, tzinfo=ZONE).astimezone(UTC)


def _populate(jobs: int, seed: int) -> None:
    from billing.models import Rate
    from jobs.models import Job, JobEvent, PriorityClass
    from portal.models import Department, Project, User
    from quotas.models import Flavor

    rng = random.Random(seed)
    whole = Flavor.objects.create(
        name="A100-80G", vendor="nvidia", model="A100", memory_mib=81920, k8s_resource_name="nvidia.com/gpu"
    )
    mig = Flavor.objects.create(
        name="A100-1g.10gb",
        vendor="nvidia",
        model="A100 MIG",
        memory_mib=9728,
        fraction_numerator=1,
        fraction_denominator=7,
        k8s_resource_name="nvidia.com/mig-1g.10gb",
    )
    start = datetime(2026, 1, 1, tzinfo=ZONE)
    change = datetime(2026, 11, 15, tzinfo=ZONE)
    for flavor, price in ((whole, Decimal("12")), (mig, Decimal("12"))):
        for valid_from, factor in ((start, Decimal(1)), (change, Decimal("0.9"))):
            Rate.objects.create(flavor=flavor, tier="standard", price=price * factor, valid_from=valid_from)
            Rate.objects.create(
                flavor=flavor, tier="on_loan", price=price * factor * Decimal("0.8"), valid_from=valid_from
            )
    # CPU and memory beyond the share, in quota (issue 33): priced on the whole cards.
    for resource, price in (("core", Decimal("0.20")), ("gib", Decimal("0.01"))):
        Rate.objects.create(flavor=whole, tier="standard", resource=resource, price=price, valid_from=start)
    prio = PriorityClass.objects.create(name="training", value=100)
    users = User.objects.bulk_create(User(username=f"u{i:02d}") for i in range(50))
    projects = []
    for d in range(20):
        dept = Department.objects.create(
            code=f"d{d:02d}", name=f"Department {d}", cost_centre=f"CC-{1000 + d}"
        )
        projects += Project.objects.bulk_create(
            Project(code=f"d{d:02d}-p{p}", name="p", department=dept) for p in range(10)
        )
    plan = []
    rows = []
    for i in range(jobs):
        flavor = whole if rng.random() < 0.8 else mig
        gpus = rng.choice((1, 2, 4, 8)) if flavor is whole else rng.randint(1, 7)
        began = MONTH_START + timedelta(
            seconds=rng.randrange(int((MONTH_END - MONTH_START).total_seconds()) - 12 * 3600)
        )
        plan.append(began)
        rows.append(
            Job(
                name=f"b{i}",
                project=rng.choice(projects),
                submitted_by=rng.choice(users),
                kind="training",
                flavor=flavor,
                priority_class=prio,
                workers=rng.choice((1, 1, 1, 2)),
                gpus_per_worker=gpus,
                image="bench",
                state="succeeded",
                state_changed_at=began,
                submitted_at=began - timedelta(minutes=5),
            )
        )
    Job.objects.bulk_create(rows, batch_size=5000)
    _machine_requests(whole.pk)
    events = []
    for job, began in zip(rows, plan, strict=True):
        events += _events(job, began, rng)
        if len(events) >= 50_000:
            JobEvent.objects.bulk_create(events, batch_size=10_000)
            events = []
    JobEvent.objects.bulk_create(events, batch_size=10_000)


def _machine_requests(flavor_id: int) -> None:
    """CPU and memory (issue 33): every whole-card job comes with a share of 12 cores and 128 GiB a
    card, one in three asks 1.5 × that (so its ledger rows carry core- and MiB-seconds beyond the
    share). Deterministic and drawn from no random stream: the jobs and events are those of a run
    without it, so a base without CPU metering is timed on the same month."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """UPDATE jobs_job SET unit_share = '{"cpu_millicores": 12000, "memory_mib": 131072}'::jsonb,
                   cpu_millicores = CASE WHEN id %% 3 = 0 THEN 18000 * gpus_per_worker END,
                   memory_mib = CASE WHEN id %% 3 = 0 THEN 196608 * gpus_per_worker END
               WHERE flavor_id = %s""",
            [flavor_id],
        )


def _events(job, began: datetime, rng: random.Random) -> list:
    from jobs.models import JobEvent

    def ev(kind, source, target, at, data=None):
        return JobEvent(
            job=job, kind=kind, from_state=source, to_state=target, occurred_at=at, data=data or {}, reason=""
        )

    found = [ev("transition", "", "queued", began - timedelta(minutes=5))]
    at = began
    runs = 2 if rng.random() < 0.1 else 1
    for run in range(runs):
        on_loan = rng.random() < 0.3
        found.append(
            ev(
                "transition",
                "queued",
                "admitted",
                at - timedelta(seconds=30),
                {"workers": job.workers, "on_loan": on_loan, "preempts": []},
            )
        )
        found.append(ev("transition", "admitted", "running", at))
        length = timedelta(seconds=rng.randrange(8 * 3600, 10 * 3600)) / runs
        if rng.random() < 0.25:
            found.append(
                ev("on_loan", "running", "running", at + length * rng.random(), {"on_loan": not on_loan})
            )
        at += length
        last = run == runs - 1
        found.append(ev("transition", "running", "succeeded" if last else "preempted", at))
        if not last:
            found.append(ev("transition", "preempted", "queued", at))
            at += timedelta(minutes=rng.randrange(1, 30))
    return found


def run(jobs: int) -> dict:
    with scratch_django():
        from django.db import connection
        from django.db.models import Sum

        from billing import exports
        from billing.meter import usage_meter
        from billing.models import StatementLine, UsageRecord
        from billing.services import statement_close_month

        started = time.perf_counter()
        _populate(jobs, seed=20261101)
        populate_s = time.perf_counter() - started
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
        now = MONTH_END + timedelta(days=1)

        t0 = time.perf_counter()
        report = usage_meter(now=now)
        meter_s = time.perf_counter() - t0
        ledger_rows = UsageRecord.objects.count()
        machine = UsageRecord.objects.aggregate(
            core=Sum("core_seconds"), extra=Sum("extra_core_seconds"), mib=Sum("extra_mib_seconds")
        )

        t0 = time.perf_counter()
        close = statement_close_month(month=MONTH, now=now)
        csv_out = io.StringIO()
        exports.write_csv(exports.chargeback_rows(MONTH), csv_out)
        close_csv_s = time.perf_counter() - t0

        t0 = time.perf_counter()
        xlsx_out = io.BytesIO()
        exports.write_xlsx(exports.chargeback_rows(MONTH), xlsx_out)
        xlsx_s = time.perf_counter() - t0
        corrections = _late_corrections(share=0.1, seed=20261202, now=now)
        hold = _budget_hold(at=MONTH_END - timedelta(hours=2))
        return {
            "jobs": jobs,
            "ledger_rows": ledger_rows,
            "meter_seconds": round(meter_s, 2),
            "ledger_core_hours": str(round((machine["core"] or 0) / 3600, 2)),
            "ledger_extra_core_hours": str(round((machine["extra"] or 0) / 3600, 2)),
            "ledger_extra_gib_hours": str(round((machine["mib"] or 0) / 3600 / 1024, 2)),
            "core_gib_lines": StatementLine.objects.filter(statement__month=MONTH).exclude(
                resource="card").count(),
            "close_csv_seconds": round(close_csv_s, 2),
            "xlsx_seconds": round(xlsx_s, 2),
            **corrections,
            "statements": close.statements,
            "statement_lines": close.lines,
            "total": str(close.total),
            "meter_batches": report.batches,
            "csv_bytes": len(csv_out.getvalue()),
            "xlsx_bytes": len(xlsx_out.getvalue()),
            "populate_seconds": round(populate_s, 1),
            **hold,
        }


def _late_corrections(share: float, seed: int, now: datetime) -> dict:
    """After November closed, ``share`` of its jobs get the backend's tier flip at a random
    instant of their (last) run, recorded now; then a plain meter run and December's close."""
    from django.db import connection

    from billing import exports
    from billing.meter import usage_meter
    from billing.models import StatementLine, UsageRecord
    from billing.services import statement_close_month
    from jobs.models import JobEvent

    rng = random.Random(seed)
    with connection.cursor() as cursor:  # each job's last run: [start, end) and its tier at the start
        cursor.execute(
            """SELECT r.job_id, r.occurred_at, min(e.occurred_at)
               FROM jobs_jobevent r
               JOIN jobs_jobevent e ON e.job_id = r.job_id AND e.occurred_at > r.occurred_at
                AND e.kind = 'transition' AND e.from_state = 'running'
               WHERE r.kind = 'transition' AND r.to_state = 'running'
               GROUP BY r.job_id, r.occurred_at
               ORDER BY r.job_id, r.occurred_at"""  # the last run of each job wins below
        )
        runs = {job: (start, end) for job, start, end in cursor.fetchall()}
    chosen = rng.sample(sorted(runs), int(len(runs) * share))
    flips = []
    for job_id in chosen:
        start, end = runs[job_id]
        at = start + (end - start) * rng.uniform(0.05, 0.95)
        flips.append(JobEvent(job_id=job_id, kind="on_loan", from_state="succeeded", to_state="succeeded",
                              occurred_at=at, data={"on_loan": rng.random() < 0.5}, reason="",
                              time_source="slurm"))
    JobEvent.objects.bulk_create(flips, batch_size=10_000)
    later = now + timedelta(hours=2)
    t0 = time.perf_counter()
    report = usage_meter(now=later)
    meter_s = time.perf_counter() - t0
    december = date(2026, 12, 1)
    t0 = time.perf_counter()
    statement_close_month(month=december, now=datetime(2027, 1, 2, tzinfo=ZONE).astimezone(UTC))
    csv_out = io.StringIO()
    exports.write_csv(exports.chargeback_rows(december), csv_out)
    close_s = time.perf_counter() - t0
    return {
        "late_corrected_jobs": report.corrected_jobs,
        "reversal_rows": UsageRecord.objects.filter(reverses__isnull=False).count(),
        "correction_meter_seconds": round(meter_s, 2),
        "correction_close_csv_seconds": round(close_s, 2),
        "adjustment_lines": StatementLine.objects.filter(
            statement__month=december, kind="adjustment"
        ).count(),
    }


def _budget_hold(at: datetime, calls: int = 20) -> dict:
    """What the scheduler's budget hold (``billing.budgets.over_budget_tenants``, read every
    cycle) costs with a budget on every department and project, half of them spent: the first
    read (cold cache) and the mean of the next ``calls`` (one scheduling cycle each)."""
    from billing.budgets import over_budget_tenants
    from billing.models import Budget
    from portal.models import Department, Project

    rng = random.Random(7)
    owners = [{"department": d} for d in Department.objects.all()]
    owners += [{"project": p} for p in Project.objects.all()]
    Budget.objects.bulk_create(
        Budget(card_hours=Decimal(rng.choice((10, 10**7))), **owner) for owner in owners
    )
    t0 = time.perf_counter()
    held = over_budget_tenants(at)
    cold_ms = (time.perf_counter() - t0) * 1e3
    t0 = time.perf_counter()
    for _ in range(calls):
        over_budget_tenants(at)
    warm_ms = (time.perf_counter() - t0) * 1e3 / calls
    return {"budgets": len(owners), "budgets_spent": len(held), "budget_hold_first_ms": round(cold_ms, 1),
            "budget_hold_cycle_ms": round(warm_ms, 1)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10,000 jobs instead of 100,000")
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    print(json.dumps(run(args.jobs or (10_000 if args.quick else 100_000))))
