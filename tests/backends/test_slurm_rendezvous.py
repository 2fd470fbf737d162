"""DESIGN §17 on a real Slurm cluster (issue 35 items 3 and 4), through the portal: a 4-worker job
whose workers read the rendezvous variables and meet worker 0 over TCP; a job that fails with
exit code 1 is retried after its backoff and its second run succeeds, each run billed once; a
final exit code is not retried.

Four fake 8-GPU nodes (deploy/slurm/start.sh via tests/backends/test_slurm.py's
``slurm_cluster``), all reached at 127.0.0.1 (their NodeAddr)."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal

import pytest

from tests.backends import test_slurm
from tests.backends.test_slurm import NODES, Cluster, slurm_cluster
from tests.waiting import settle

pytestmark = pytest.mark.slurm

# Worker 0 listens on MASTER_PORT and exits 0 only after each other rank has connected and said
# who it is; the others connect to MASTER_ADDR:MASTER_PORT (retrying while worker 0 starts) and
# send their NODE_RANK. Each worker also writes what it was given.
MEET = r"""
import os, socket, sys, time
rank, world = int(os.environ["NODE_RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
with open(f"rdv-{rank}.txt", "w") as out:
    out.write(" ".join(f"{k}={os.environ[k]}" for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                                                        "NNODES", "NODE_RANK")))
if rank == 0:
    server = socket.create_server(("0.0.0.0", port))
    server.settimeout(120)
    heard = set()
    while len(heard) < world - 1:
        conn, _ = server.accept()
        heard.add(int(conn.recv(16).decode()))
        conn.close()
    with open("heard.txt", "w") as out:
        out.write(",".join(map(str, sorted(heard))))
    sys.exit(0 if heard == set(range(1, world)) else 3)
deadline = time.time() + 120
while True:
    try:
        sock = socket.create_connection((addr, port), timeout=5)
        break
    except OSError:
        if time.time() > deadline:
            sys.exit(4)
        time.sleep(0.2)
sock.sendall(str(rank).encode())
sock.close()
"""


portal_on_slurm = test_slurm.portal_on_slurm  # the fixture: the portal's view of this module's cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with slurm_cluster(len(NODES), 8, prefix="gp-slurm-rdv-") as started:
        yield started


def _transitions(job) -> list[str]:
    events = job.events.filter(kind="transition").order_by("occurred_at", "id")
    return list(events.values_list("to_state", flat=True))


def test_four_workers_meet_worker_0_over_tcp_with_the_rendezvous_variables(portal_on_slurm, cluster):
    from jobs.clusters import dispatch
    from jobs.clusters.backends.rendezvous import slurm_port
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    command = f"{shlex.quote(sys.executable)} - <<'PY'\n{MEET}\nPY"
    job = fx.submit(project, flavor, workers=4, gpus=8, name="meet", command=command)
    assert schedule_once().admitted == 1
    job.refresh_from_db()
    assert len({node for worker in job.placement for node, _g, _m in worker}) == 4  # one node each
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal_cluster, job, {"succeeded", "failed"}, timeout=300)
    assert job.state == "succeeded", (job.exit_code, job.message)
    workdir = cluster.run_dir / "jobs" / f"gp-{job.pk}"
    assert (workdir / "heard.txt").read_text() == "1,2,3"
    port = slurm_port(job.pk)
    for rank in range(4):
        # Worker 0's node's address (NodeAddr: every fake node is 127.0.0.1), one port per job.
        assert (workdir / f"rdv-{rank}.txt").read_text() == (
            f"MASTER_ADDR=127.0.0.1 MASTER_PORT={port} WORLD_SIZE=4 NNODES=4 NODE_RANK={rank}"
        )


def test_a_failed_run_is_retried_after_its_backoff_and_each_run_is_billed_once(portal_on_slurm, cluster):
    from django.db.models import Sum
    from django.utils import timezone, translation

    from billing.meter import usage_meter
    from billing.models import UsageRecord
    from jobs.clusters import dispatch
    from jobs.models import Job
    from jobs.scheduling.cycle import explain_job, schedule_once
    from jobs.scheduling.explaining import readable
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    # The first run fails with exit code 1; the next one finds its mark and succeeds. Each lasts
    # a few seconds: Slurm's times are whole seconds, and each run must show in the ledger.
    command = "sleep 2; if [ -e tried ]; then echo second run; exit 0; fi; touch tried; exit 1"
    job = fx.submit(project, flavor, workers=1, gpus=8, name="flaky", command=command, max_retries=2)
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal_cluster, job, {"queued", "failed"})
    assert job.state == "queued" and job.retries == 1 and job.exit_code == 1
    retry = job.events.filter(kind="transition", from_state="running", to_state="queued").get()
    assert retry.reason == "retry 1 of 2 after exit code 1"
    assert retry.data["retry"] == 1 and retry.data["exit_code"] == 1
    assert retry.data["not_before"] == job.not_before.isoformat()
    assert job.placement == [] and job.dispatched_at is None  # its GPUs are given back
    # In its backoff it is not admitted, and explain says until when.
    assert schedule_once().admitted == 0
    with translation.override("en"):  # the text is read in English below
        explain = readable(explain_job(job), fx.platform_admin())
    until = timezone.localtime(job.not_before).strftime("%H:%M")
    assert explain["reason"] == "backoff"
    assert explain["text"] == f"Retry 1 of 2 after backoff until {until}."
    # The backoff has passed (60 s, moved rather than waited for).
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal_cluster, job, {"succeeded", "failed", "queued"})
    assert job.state == "succeeded" and job.retries == 1
    run = ["admitted", "running"]
    assert _transitions(job) == ["queued", *run, "queued", *run, "succeeded"]
    # Billing: each run's card-hours once — the two runs' Slurm Start→End, nothing more.
    usage_meter(now=timezone.now() + timedelta(days=1))
    starts = job.events.filter(kind="transition", to_state="running").order_by("occurred_at")
    ends = job.events.filter(kind="transition", from_state="running").order_by("occurred_at")
    runs = [end.occurred_at - start.occurred_at for start, end in zip(starts, ends, strict=True)]
    assert len(runs) == 2 and all(run >= timedelta(seconds=1) for run in runs)
    seconds = Decimal(str(sum(run.total_seconds() for run in runs)))
    billed = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    # Rows are rounded to the microsecond card-second each: nothing else may differ.
    assert abs(billed - 8 * flavor.card_fraction * seconds) < Decimal("0.0001")


def test_a_final_exit_code_is_not_retried(portal_on_slurm):
    from jobs.clusters import dispatch
    from jobs.retries import retry_policy
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    flavor, portal_cluster, project = portal_on_slurm
    assert 78 in retry_policy().final_exit_codes  # EX_CONFIG: the centre's default final codes
    job = fx.submit(project, flavor, workers=1, gpus=8, name="final", command="exit 78", max_retries=2)
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal_cluster, job, {"failed", "queued"})
    assert job.state == "failed" and job.retries == 0 and job.exit_code == 78
    assert _transitions(job) == ["queued", "admitted", "running", "failed"]


def test_a_job_slurm_holds_back_is_requeued_after_the_start_timeout_with_slurms_reason(
    portal_on_slurm, cluster
):
    """Issue 35 item 3: the start timeout on Slurm gives the controller's pending reason."""
    from jobs.clusters import dispatch
    from jobs.clusters.backends.slurm import SlurmBackend
    from jobs.clusters.start_timeout import requeue_unstarted
    from jobs.retries import retry_policy
    from jobs.scheduling.cycle import schedule_once
    from quotas.models import Node
    from tests import factories as fx
    from tests.backends.test_slurm import wait_for

    flavor, _portal_cluster, project = portal_on_slurm
    job = fx.submit(project, flavor, workers=1, gpus=8, name="held", command="true")
    assert schedule_once().admitted == 1
    job.refresh_from_db()
    node = Node.objects.get(pk=job.placement[0][0][0]).name
    # Slurm's own view of the node changes after the portal placed the job there.
    cluster.scontrol("update", f"NodeName={node}", "State=DRAIN", "Reason=held-for-test")
    try:
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        job.refresh_from_db()
        name, backend = f"gp-{job.pk}", SlurmBackend(cluster.conf)
        pending = wait_for(lambda: (st := backend.status([name])[name]).message != "PENDING" and st,
                           "slurmctld to give the job a pending reason")
        assert pending.message.startswith("PENDING (ReqNodeNotAvail")
        timeout = timedelta(seconds=retry_policy().start_timeout_seconds)
        assert requeue_unstarted(now=job.dispatched_at + timeout) == {"requeued": 1}
        job.refresh_from_db()
        assert job.state == "queued" and job.start_timeouts == 1 and job.retries == 0
        event = job.events.filter(kind="transition", from_state="admitted", to_state="queued").get()
        assert event.reason.startswith(
            f"not running after the start timeout of {timeout.seconds} s: PENDING (ReqNodeNotAvail")
        # Taken off the cluster: no unfinished Slurm job of that name is left.
        wait_for(lambda: backend.status([name])[name].phase != "pending", "scancel to reach slurmctld")
        assert [st.phase for st in backend.status([name]).values()] == ["cancelled"]
    finally:
        cluster.scontrol("update", f"NodeName={node}", "State=RESUME")
