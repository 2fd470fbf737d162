"""Demo rates, and a closed last month so finance personas have a statement to read.

Prices per card-hour (CNY, whole-card units — a MIG slice pays its card_fraction of the card):
on-loan time is 20 % cheaper than in-quota time, because it is reclaimable — an on-loan job
may be preempted whenever the lender wants its quota back — and because idle capacity earns
nothing, so a discount that fills it is revenue the centre would otherwise not have.

Last month's history is written the way the services write it (transition events, an admission
carrying the in-quota/on-loan flag, an ``on_loan`` flip), then metered and closed like any month.
"""

from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from jobs.models import Job, JobEvent, JobGpuSample, PriorityClass
from portal.models import Department, Project, User
from quotas.models import Flavor, Node
from quotas.selectors import site_zone

from .meter import watermark
from .models import Budget, MonthClose, Rate, Resource, Tier
from .periods import month_bounds, month_of, previous_month

RATES_FROM = datetime(2025, 1, 1)  # site-zone midnight
ON_LOAN_DISCOUNT = Decimal("0.8")
STANDARD = {
    "A100-80G": "12.00",
    "H800": "28.00",
    "A100-1g.10gb": "12.00",  # per whole card: a 1g.10gb slice costs 12 × 1/7 per hour
    "T4-shared": "3.00",
    "Ascend-910B": "8.00",
    "MLU370": "5.00",
    "DCU-Z100": "4.00",
}

# project, user, flavor, workers, gpus/worker, gpu_milli, priority, day, hour, duration h, on-loan after h
HISTORY = [
    ("nlp-llm", "alice", "A100-80G", 4, 8, None, "training-high", 2, 9, 30, None),
    ("nlp-llm", "alice", "A100-80G", 2, 8, None, "training", 5, 20, 12, 6),
    ("nlp-asr", "alice", "Ascend-910B", 1, 8, None, "training", 7, 10, 18, None),
    ("cv-detect", "bob", "A100-1g.10gb", 1, 3, None, "best-effort", 8, 14, 6, 0),
    ("cv-gen", "ai-admin", "MLU370", 2, 8, None, "training", 11, 0, 40, None),
    ("ad-bev", "carol", "Ascend-910B", 4, 8, None, "training", 13, 8, 22, 10),
    ("ad-replay", "ad-admin", "A100-80G", 1, 4, None, "best-effort", 15, 23, 5, None),
    ("svc-chat", "dave", "H800", 2, 4, None, "inference-online", 1, 0, 24 * 20, None),
    ("svc-rank", "svc-admin", "T4-shared", 1, 1, 500, "inference-online", 3, 12, 24 * 10, None),
    ("plat-bench", "admin", "DCU-Z100", 4, 8, None, "best-effort", 20, 2, 3, None),
    ("nlp-llm", "alice", "H800", 1, 8, None, "training", 28, 18, 80, 20),  # runs into this month
]
# Mean GPU utilisation (%) of each HISTORY job, for the samples the reports page draws; the
# scenario replay sat idle (and was flagged).
UTILISATION = [88, 72, 64, 45, 80, 76, 2, 38, 52, 95, 84]
IDLE_JOB = 6
SAMPLE_EVERY = timedelta(minutes=5)  # a sample every five minutes is plenty for a demo month

# Monthly card-hour budgets: (department code or None, project code or None, card-hours).
BUDGETS = [("ai-nlp", None, "6000"), (None, "cv-detect", "300"), ("ad", None, "8000")]


def seed(stdout) -> None:
    made = 0
    for flavor in Flavor.objects.filter(name__in=STANDARD):
        price = Decimal(STANDARD[flavor.name])
        for tier, value in (
            (Tier.STANDARD, price),
            (Tier.ON_LOAN, (price * ON_LOAN_DISCOUNT).quantize(Decimal("0.01"))),
        ):
            _, created = Rate.objects.get_or_create(
                flavor=flavor,
                tier=tier,
                resource=Resource.CARD,
                valid_from=timezone.make_aware(RATES_FROM, site_zone()),
                defaults={"price": value, "note": "demo price list"},
            )
            made += created
    stdout.write(f"billing: {made} demo rates")
    _seed_budgets(stdout)
    _seed_last_month(stdout)


def _seed_budgets(stdout) -> None:
    from .budgets import budget_set

    made = 0
    for dept, project, hours in BUDGETS:
        owner = (
            {"department": Department.objects.filter(code=dept).first()}
            if dept
            else {"project": Project.objects.filter(code=project).first()}
        )
        if None in owner.values() or Budget.objects.filter(**owner).exists():
            continue
        budget_set(actor=None, card_hours=hours, **owner)
        made += 1
    stdout.write(f"billing: {made} demo budgets")


def _seed_last_month(stdout) -> None:
    now = timezone.now()
    zone = site_zone()
    month = previous_month(month_of(now, zone))
    start, end = month_bounds(month, zone)
    if MonthClose.objects.exists() or Job.objects.filter(name__startswith="hist-").exists():
        return
    if watermark(now) < end:
        return  # the first minutes of a month: last month cannot close yet
    for i, row in enumerate(HISTORY):
        _history_job(i, row, start, now)
    from .services import statement_close_month

    report = statement_close_month(month=month, now=now)
    stdout.write(f"billing: {month:%Y-%m} closed with {report.statements} statements, total {report.total}")


def _history_job(i, row, month_start: datetime, now: datetime) -> None:
    project, user, flavor, workers, gpus, milli, prio, day, hour, hours, loan_after = row
    began = month_start + timedelta(days=day - 1, hours=hour, minutes=7 * i)
    ended = min(began + timedelta(hours=hours, minutes=13), now - timedelta(hours=1))
    job = Job.objects.create(
        name=f"hist-{i:02d}-{flavor.lower().replace('.', '-')}",
        project=Project.objects.get(code=project),
        submitted_by=User.objects.get(username=user),
        kind="inference" if prio == "inference-online" else "training",
        flavor=Flavor.objects.get(name=flavor),
        priority_class=PriorityClass.objects.get(name=prio),
        workers=workers,
        gpus_per_worker=gpus,
        gpu_milli=milli,
        image="registry.local/ai/base:2026.10",
        state="succeeded",
        state_changed_at=ended,
        submitted_at=began - timedelta(minutes=3),
        admitted_at=began - timedelta(minutes=1),
        started_at=began,
        finished_at=ended,
        exit_code=0,
    )
    on_loan = loan_after == 0
    events = [
        ("transition", "", "queued", "submitted", began - timedelta(minutes=3), {}),
        (
            "transition",
            "queued",
            "admitted",
            "admitted by the scheduler",
            began - timedelta(minutes=1),
            {"workers": workers, "on_loan": on_loan, "preempts": []},
        ),
        ("transition", "admitted", "running", "started", began, {}),
    ]
    if loan_after and began + timedelta(hours=loan_after) < ended:
        at = began + timedelta(hours=loan_after)
        events.append(
            ("on_loan", "running", "running", "in-quota / on-loan split recomputed", at, {"on_loan": True})
        )
    events.append(("transition", "running", "succeeded", "completed", ended, {}))
    JobEvent.objects.bulk_create(
        JobEvent(job=job, kind=k, from_state=f, to_state=t, reason=r, occurred_at=at, data=d)
        for k, f, t, r, at, d in events
    )
    _utilisation(job, i, began, ended)


def _utilisation(job: Job, i: int, began: datetime, ended: datetime) -> None:
    """A placement on the flavor's first nodes and a utilisation sample every few minutes, so
    the reports page has a heatmap and idle jobs for last month (live jobs get theirs from
    Prometheus)."""
    nodes = list(Node.objects.filter(flavor=job.flavor).order_by("name")[: job.workers])
    if not nodes:
        return
    milli = job.gpu_milli or 1000
    placement = [
        [[nodes[w % len(nodes)].pk, g, milli] for g in range(job.gpus_per_worker)] for w in range(job.workers)
    ]
    fields = {"placement": placement, "granted_workers": job.workers}
    if i == IDLE_JOB:
        fields["idle_since"] = min(began + timedelta(hours=2), ended)
    Job.objects.filter(pk=job.pk).update(**fields)
    base = UTILISATION[i % len(UTILISATION)]
    steps = int((ended - began) / SAMPLE_EVERY)
    JobGpuSample.objects.bulk_create(
        (
            JobGpuSample(
                job=job,
                minute=(began + k * SAMPLE_EVERY).replace(second=0, microsecond=0),
                gpu_util_pct=float(max(0, min(100, base + (k * 7) % 15 - 7))) if base > 5 else float(base),
                fb_used_mib=1024.0 * job.gpus_per_worker * (0.3 + base / 150),
                gpus=job.workers * job.gpus_per_worker,
            )
            for k in range(steps)
        ),
        batch_size=2000,
    )
