"""The scene of the approval-context tests (issue 24 item 3), shared by the service, API, page,
CLI and browser tests: jobs running now, a finished idle job, old decisions, rates and budgets —
all relative to ``now``, so a live server's "now" gives the same history figures."""

from __future__ import annotations

from datetime import datetime, timedelta

from billing.budgets import budget_set
from jobs.models import Job
from jobs.services import job_submit
from portal.models import ApprovalRequest
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.billing.conftest import History, rates


def _hold(job: Job, gpus: int, now: datetime, *, on_loan=False, started=None) -> None:
    """Make ``job`` run now on ``gpus`` whole GPUs of the world's first node."""
    node = Node.objects.order_by("name").first()
    Job.objects.filter(pk=job.pk).update(
        state="running",
        placement=[[[node.pk, i, 1000] for i in range(gpus)]],
        on_loan=on_loan,
        started_at=started or now - timedelta(hours=1),
    )


def make_scene(world, now: datetime):
    """Running now on F: pa1_member 2 GPUs in quota and pa1_admin 1 borrowed (both in pa1),
    pb_member 3 in pb: 6 held of 16 healthy. F costs 2.50 an hour at the standard rate. pa1_member
    ran a job in pa1 for 2 h on 4 GPUs this month (8 card-hours) that was flagged idle; pa1 has
    a budget of 100 card-hours, A1 one of 1000 card-hours and 500.00 in money. pa1_member's
    requests: one approved 10 days ago, one rejected 5 days ago, one rejected 100 days ago (too
    old to count)."""
    history = History(world)
    history.user = world.users["pa1_member"]
    _hold(history.job(world.pa1, world.F, gpus=2), 2, now)
    _hold(history.job(world.pa1, world.F, user=world.users["pa1_admin"]), 1, now, on_loan=True)
    _hold(history.job(world.pb, world.F, user=world.users["pb_member"], gpus=3), 3, now)
    began = now - timedelta(hours=20, minutes=30)  # 2 h yesterday
    done = history.run(world.pa1, world.F, began, began + timedelta(hours=2), gpus=4)
    Job.objects.filter(pk=done.pk).update(started_at=began, idle_since=began + timedelta(hours=1))
    old = history.job(world.pa1, world.F)
    Job.objects.filter(pk=old.pk).update(state="succeeded", started_at=now - timedelta(days=100))
    rates(world.F, "2.50", "1.00")
    budget_set(actor=None, card_hours="100", project=world.pa1)
    budget_set(actor=None, card_hours="1000", amount="500", department=world.A1)
    for state, days in (("approved", 10), ("rejected", 5), ("rejected", 100)):
        ApprovalRequest.objects.create(
            kind="quota",
            summary="old",
            requester=world.users["pa1_member"],
            department=world.A1,
            project=world.pa1,
            state=state,
            created_at=now - timedelta(days=days, hours=1),
            decided_at=now - timedelta(days=days),
        )
    return world


def job_request(world, gpus=4, runtime=3600, name="big") -> ApprovalRequest:
    job = job_submit(
        actor=world.users["pa1_member"],
        project=world.pa1,
        name=name,
        kind="training",
        flavor=world.F,
        priority_class=fx.priority("training", 100),
        image="pytorch:2.3",
        gpus_per_worker=gpus,
        max_runtime_seconds=runtime,
    )
    assert job.state == "pending_approval"
    return ApprovalRequest.objects.get(kind="job", subject_id=job.pk)


def grow_pool(world):
    Node.objects.create(
        cluster=Cluster.objects.get(name="c1"),
        name="n9",
        flavor=world.F,
        gpu_count=8,
        zone="z",
        spine="s",
        leaf="l9",
    )
