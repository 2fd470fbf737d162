"""Billing fixtures: job histories written the way the services write them, and an independent
card-second count straight from the event log (it shares no code with the meter)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest

from billing.models import Rate
from jobs.models import Job, JobEvent, PriorityClass
from quotas.models import Flavor

ZONE = ZoneInfo("Asia/Shanghai")


def local(*args) -> datetime:
    return datetime(*args, tzinfo=ZONE).astimezone(UTC)


class History:
    """Writes jobs and their events with the shapes of ``jobs.services`` / ``jobs.scheduling.cycle`` /
    ``jobs.clusters.dispatch``: transitions, an admission carrying ``workers`` and ``on_loan``, "on_loan"
    flips, "scaled" events."""

    def __init__(self, world):
        self.world = world
        self.prio = PriorityClass.objects.get_or_create(name="training", defaults={"value": 100})[0]
        self.user = world.users["pa1_member"]
        self.count = 0

    def job(self, project, flavor, *, workers=1, gpus=1, milli=None, user=None, submitted=None) -> Job:
        self.count += 1
        at = submitted or local(2026, 10, 1)
        job = Job.objects.create(
            name=f"j{self.count}",
            project=project,
            submitted_by=user or self.user,
            kind="training",
            flavor=flavor,
            priority_class=self.prio,
            workers=workers,
            gpus_per_worker=gpus,
            gpu_milli=milli,
            image="img",
            state="queued",
            state_changed_at=at,
            submitted_at=at,
        )
        self._event(job, "transition", "", "queued", at, reason="submitted")
        return job

    def _event(self, job, kind, source, target, at, data=None, reason=""):
        JobEvent.objects.create(
            job=job, kind=kind, from_state=source, to_state=target, occurred_at=at, data=data or {},
            reason=reason,
        )
        Job.objects.filter(pk=job.pk).update(state=target or job.state, state_changed_at=at)
        job.state = target or job.state

    def admit(self, job, at, *, on_loan=False, workers=None, flavor=None):
        data = {"workers": workers or job.workers, "on_loan": on_loan, "preempts": []}
        if flavor is not None:  # the engine chose among the job's alternatives (DESIGN §14)
            data["flavor"] = flavor.name
            Job.objects.filter(pk=job.pk).update(flavor=flavor)
        self._event(job, "transition", job.state, "admitted", at, data, "admitted by the scheduler")

    def start(self, job, at):
        self._event(job, "transition", "admitted", "running", at, reason="started")

    def end(self, job, at, state="succeeded"):
        self._event(job, "transition", "running", state, at, reason=state)
        if state in ("preempted", "lost"):
            self._event(job, "transition", state, "queued", at, reason="requeued")

    def flip(self, job, at, on_loan):
        self._event(job, "on_loan", job.state, job.state, at, {"on_loan": on_loan})

    def scale(self, job, at, workers):
        self._event(job, "scaled", job.state, job.state, at, {"workers": workers})

    def note(self, job, at, kind="preemption_signal"):
        self._event(job, kind, job.state, job.state, at)

    def run(self, project, flavor, begin, end, **kw) -> Job:
        job = self.job(project, flavor, **kw)
        self.admit(job, begin - timedelta(seconds=30))
        self.start(job, begin)
        if end is not None:
            self.end(job, end)
        return job


@pytest.fixture
def history(world):
    return History(world)


@pytest.fixture
def flavors(world):
    mig = Flavor.objects.create(
        name="A100-1g",
        vendor="nvidia",
        model="MIG",
        memory_mib=9728,
        fraction_numerator=1,
        fraction_denominator=7,
        k8s_resource_name="nvidia.com/mig-1g.10gb",
    )
    shared = Flavor.objects.create(
        name="T4s",
        vendor="nvidia",
        model="T4",
        memory_mib=15360,
        shareable=True,
        k8s_resource_name="nvidia.com/gpu",
    )
    return world.F, mig, shared


def rates(flavor, standard, on_loan, since=None, **more):
    valid_from = since or local(2026, 1, 1)
    Rate.objects.create(flavor=flavor, tier="standard", price=Decimal(standard), valid_from=valid_from)
    Rate.objects.create(flavor=flavor, tier="on_loan", price=Decimal(on_loan), valid_from=valid_from)
    for tier, price in more.items():
        Rate.objects.create(flavor=flavor, tier=tier, price=Decimal(price), valid_from=valid_from)


def month_range(month: date) -> tuple[datetime, datetime]:
    nxt = date(month.year + month.month // 12, month.month % 12 + 1, 1)
    return local(month.year, month.month, 1), local(nxt.year, nxt.month, 1)


def expected_card_seconds(until: datetime) -> dict[tuple, Decimal]:
    """{(month, department, tier): card-seconds} computed directly from the events, walking each
    job's log event by event and cutting at months only (no hours, no segments)."""
    found: dict[tuple, Decimal] = defaultdict(Decimal)
    for job in Job.objects.select_related("flavor", "project"):
        events = list(job.events.filter(occurred_at__lt=until).order_by("occurred_at", "id"))
        running, on_loan, workers, since = False, False, job.workers, None
        for e in [*events, None]:
            at = until if e is None else e.occurred_at
            if running and at > since:
                fraction = job.flavor.fraction
                per_second = workers * job.gpus_per_worker * fraction.numerator
                per_second *= Decimal(job.gpu_milli or 1000)
                per_second /= 1000 * fraction.denominator
                for (month, dept, tier), seconds in _by_month(since, at, job.project.department_id, on_loan):
                    found[(month, dept, tier)] += per_second * seconds
            since = at
            if e is None:
                break
            if e.kind == "transition" and e.to_state == "admitted":
                on_loan, workers = bool(e.data.get("on_loan")), e.data.get("workers") or job.workers
            elif e.kind == "on_loan":
                on_loan = e.data["on_loan"]
            elif e.kind == "scaled":
                workers = e.data["workers"]
            elif e.kind == "transition" and e.to_state == "running":
                running = True
            elif e.kind == "transition" and e.from_state == "running":
                running = False
    return found


def _by_month(start, end, dept, on_loan):
    tier = "on_loan" if on_loan else "standard"
    cursor = start
    while cursor < end:
        here = cursor.astimezone(ZONE)
        month = date(here.year, here.month, 1)
        _, month_end = month_range(month)
        stop = min(end, month_end)
        yield (month, dept, tier), Decimal((stop - cursor) // timedelta(microseconds=1)) / Decimal(10**6)
        cursor = stop
