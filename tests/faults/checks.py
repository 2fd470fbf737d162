"""What every fault test asserts after recovery: nothing lost, nothing duplicated, and the
portal and the backend agree."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from decimal import Decimal
from itertools import pairwise

import requests
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.models import Job, JobEvent

# Backend phase each settled portal state must have (convergence).
AGREES = {"succeeded": {"succeeded"}, "failed": {"failed"}, "cancelled": {"cancelled"},
          "running": {"running"}}


def transitions(job_id: int) -> list[tuple[str, str]]:
    events = JobEvent.objects.filter(job_id=job_id, kind="transition").order_by("occurred_at", "id")
    return list(events.values_list("from_state", "to_state"))


def assert_event_log_consistent(job_ids) -> None:
    """One event per transition: each job's log is one unbroken chain (every event leaves the
    state the previous one entered, so nothing was recorded twice or skipped), it begins with
    the submission, and there is one ``dispatched`` event per run."""
    for job_id in job_ids:
        dispatched = JobEvent.objects.filter(job_id=job_id, kind="dispatched").count()
        assert_chain(job_id, transitions(job_id), Job.objects.get(pk=job_id).state, dispatched)


def assert_chain(job_id, chain: list[tuple[str, str]], state: str, dispatched: int) -> None:
    assert chain and chain[0] == ("", "queued"), (job_id, chain)
    for (_, entered), (left, _) in pairwise(chain):
        assert left == entered, (job_id, chain)
    assert chain[-1][1] == state, (job_id, chain)
    runs = sum(1 for _, to in chain if to == "running")
    admitted = sum(1 for _, to in chain if to == "admitted")
    assert runs <= dispatched <= admitted, (job_id, chain, dispatched)


def assert_agrees_with_simulator(sim, job_ids) -> dict:
    """Exactly the dispatched jobs exist in the simulator, and each settled job's phase there
    is its state in the portal. The simulator's jobs, by name."""
    everything = requests.get(sim.base_url + "/jobs", timeout=10).json()["jobs"]
    events = JobEvent.objects.filter(job_id__in=job_ids, kind="dispatched")
    dispatched = set(events.values_list("job_id", flat=True))
    assert set(everything) == {f"gp-{pk}" for pk in dispatched}, sorted(everything)
    for job in Job.objects.filter(pk__in=job_ids, state__in=list(AGREES)):
        assert everything[f"gp-{job.pk}"]["phase"] in AGREES[job.state], (job.pk, job.state)
    return everything


def running_intervals(job_id: int) -> list[tuple]:
    intervals, opened = [], None
    for event in JobEvent.objects.filter(job_id=job_id, kind="transition").order_by("occurred_at", "id"):
        if event.to_state == "running":
            opened = event.occurred_at
        elif event.from_state == "running" and opened is not None:
            intervals.append((opened, event.occurred_at))
            opened = None
    return intervals


def assert_ledger_exact(job_ids) -> int:
    """Meter everything (the jobs have ended, so a watermark in the future is exact) and compare
    with the event log: one ledger row per job-hour piece of each run, and the card-seconds of
    each job exactly its GPUs × its running time. The number of rows."""
    usage_meter(now=timezone.now() + timedelta(hours=2))
    rows = 0
    for job in Job.objects.filter(pk__in=job_ids):
        intervals = running_intervals(job.pk)
        pieces = sum(_hours_spanned(start, end) for start, end in intervals)
        records = UsageRecord.objects.filter(job=job)
        per_hour = Counter(records.values_list("hour_start", "segment_start"))
        assert all(n == 1 for n in per_hour.values()), job.pk
        assert records.count() == pieces, (job.pk, records.count(), pieces)
        micros = sum((end - start) // timedelta(microseconds=1) for start, end in intervals)
        seconds = Decimal(micros) / 10**6
        metered = sum(records.values_list("card_seconds", flat=True), Decimal(0))
        assert abs(metered - seconds * job.gpus_per_worker * job.workers) < Decimal("0.0001"), job.pk
        rows += records.count()
    return rows


def _hours_spanned(start, end) -> int:
    first = start.replace(minute=0, second=0, microsecond=0)
    last = (end - timedelta(microseconds=1)).replace(minute=0, second=0, microsecond=0)
    return int((last - first) / timedelta(hours=1)) + 1
