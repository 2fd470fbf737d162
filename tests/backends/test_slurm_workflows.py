"""Arrays and dependencies (DESIGN §17) through the portal on a real Slurm cluster (started for this
module as tests/backends/test_slurm.py starts its own): an array of 20 tasks with ``%4`` never has
more than 4 tasks on the cluster at once — counted from the portal's event log and from Slurm's own
accounting records, not from timing — and each task reads its ``GPUPOOL_ARRAY_INDEX``; ``after_ok`` on
a job that fails cancels the dependent, which never reaches Slurm."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.clusters.backends.slurm import SlurmBackend
from tests.backends.test_slurm import cluster, portal_on_slurm  # noqa: F401 - the fixtures
from tests.waiting import wait_until

pytestmark = pytest.mark.slurm

TERMINAL = {"succeeded", "failed", "cancelled"}


def _drive(portal_cluster, ids: list[int]) -> None:
    """What the portal's beat and workers do, in this thread: a scheduling cycle, the dispatch of
    what it admitted, a status sync — until every job in ``ids`` has ended."""
    from jobs.clusters import dispatch
    from jobs.models import Job
    from jobs.scheduling.cycle import schedule_once

    def ended() -> bool:
        schedule_once()
        for pk in Job.objects.filter(pk__in=ids, state="admitted", dispatched_at__isnull=True).values_list(
            "pk", flat=True
        ):
            dispatch.dispatch_job(pk)
        dispatch.sync_cluster(portal_cluster.pk)
        return not Job.objects.filter(pk__in=ids).exclude(state__in=TERMINAL).exists()

    wait_until(ended, "every job to end", interval=0.2,
               about=lambda: str(list(Job.objects.filter(pk__in=ids).values_list("pk", "state"))))


def _most_at_once(spans: list[tuple[object, object]]) -> int:
    """The most spans open at one instant; an end at the instant another starts is counted first."""
    points = sorted([(start, 1) for start, _end in spans] + [(end, -1) for _start, end in spans],
                    key=lambda p: (p[0], p[1]))
    most = now = 0
    for _at, step in points:
        now += step
        most = max(most, now)
    return most


def test_an_array_of_20_with_a_cap_of_4_never_runs_more_than_4_tasks(portal_on_slurm, cluster):  # noqa: F811
    from jobs.models import Job, JobArray, JobEvent
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    first = fx.submit(project, flavor, workers=1, gpus=1, name="sweep", array="0-19%4",
                      command='echo "task index $GPUPOOL_ARRAY_INDEX"; sleep 1')
    array = JobArray.objects.get(pk=first.array_id)
    ids = list(array.tasks.values_list("pk", flat=True))
    assert len(ids) == 20
    _drive(portal_cluster, ids)
    tasks = {t.pk: t for t in array.tasks.all()}
    assert {t.state for t in tasks.values()} == {"succeeded"}

    # The portal's log: +1 at each admission, −1 at each end, in the order the rows were written.
    holding = most = 0
    for to_state in JobEvent.objects.filter(job_id__in=ids, kind="transition").order_by("id").values_list(
        "to_state", flat=True
    ):
        holding += {"admitted": 1, "succeeded": -1, "failed": -1, "cancelled": -1}.get(to_state, 0)
        most = max(most, holding)
    assert most == 4  # the cap was reached, never passed (32 GPUs free: only the cap binds)

    # Slurm's own accounting: the allocations' Start and End, as sacct recorded them.
    backend = SlurmBackend(cluster.conf)
    out = backend._run(["sacct", "-X", "-P", "-n", "--format=JobIDRaw,Start,End", "-j",
                        ",".join(t.backend_id for t in tasks.values())])
    spans = []
    for line in out.splitlines():
        _raw, start, end = line.split("|")
        spans.append((datetime.fromtimestamp(int(start)), datetime.fromtimestamp(int(end))))
    assert len(spans) == 20
    assert _most_at_once(spans) <= 4

    # Each task ran with its own index.
    for task in tasks.values():
        text = backend.log_tail(f"gp-{task.pk}", max_bytes=4096).text
        assert f"task index {task.array_index}\n" in text, (task.array_index, text)
    assert Job.objects.filter(pk__in=ids).values("array_index").distinct().count() == 20

    # Billed per task: each task is a job, metered from its own events into and out of running
    # (DESIGN §7), one GPU each.
    usage_meter(now=timezone.now() + timedelta(hours=2))
    for task in Job.objects.filter(pk__in=ids):
        billed = UsageRecord.objects.filter(job=task).aggregate(s=Sum("card_seconds"))["s"]
        start = task.events.get(kind="transition", to_state="running").occurred_at
        end = task.events.get(kind="transition", from_state="running").occurred_at
        assert billed == Decimal(str((end - start).total_seconds())), task.array_index


def test_after_ok_on_a_failing_job_cancels_the_dependent(portal_on_slurm):  # noqa: F811
    from jobs.models import JobEvent
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    failing = fx.submit(project, flavor, workers=1, gpus=1, name="prep", command="exit 3")
    then = fx.submit(project, flavor, workers=1, gpus=1, name="train", command="true",
                     dependencies=[{"condition": "after_ok", "job": failing.pk}])
    _drive(portal_cluster, [failing.pk, then.pk])
    failing.refresh_from_db()
    then.refresh_from_db()
    assert (failing.state, failing.exit_code) == ("failed", 3)
    assert then.state == "cancelled"
    assert then.backend_id == "" and then.dispatched_at is None  # it never reached Slurm
    event = JobEvent.objects.get(job=then, to_state="cancelled")
    assert event.reason == f"dependency after_ok on job {failing.pk} can no longer be met: it is failed"
    assert event.actor is None
    assert list(then.events.filter(kind="transition").values_list("to_state", flat=True)) == [
        "queued", "cancelled"]
