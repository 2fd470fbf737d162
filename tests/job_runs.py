"""Jobs that really run on a simulator process (tests/simserver.py) through the portal: the
world's cluster c1 pointed at it, a real scheduling cycle, dispatch and status sync."""

from __future__ import annotations

import re

from django.db import transaction

from jobs.clusters import dispatch
from jobs.clusters.backends.base import NodeInfo
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_submit
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.waiting import settle

STEP = re.compile(r" step (\d+)/(\d+) loss=")
LONG = 10**6  # simulated seconds: a job that runs far longer than any test waits


def cluster_on(simserver) -> Cluster:
    """The world's cluster c1, served by the simulator process, with the same nodes."""
    cluster = Cluster.objects.get(name="c1")
    cluster.config = {"url": simserver.url}
    cluster.save(update_fields=["config"])
    nodes = Node.objects.filter(cluster=cluster).select_related("flavor").order_by("name")
    simserver.backend().set_inventory(
        [NodeInfo(n.name, n.flavor.name, n.gpu_count, "ready", n.zone, n.spine, n.leaf) for n in nodes]
    )
    return cluster


def submit(world, *, name="logged", persona="pa1_member", project=None, **kw) -> Job:
    fields = {"kind": "training", "gpus_per_worker": 1, "image": "pytorch:2.3", **kw}
    with transaction.atomic():  # as the views call it (a dev job locks its user's row)
        return job_submit(
            actor=world.users[persona],
            project=project or world.pa1,
            name=name,
            flavor=world.F,
            priority_class=fx.priority(),
            **fields,
        )


def start(cluster: Cluster, job: Job, *, until=frozenset({"running"})) -> Job:
    """Admit (a real cycle), dispatch and sync the job until it is in one of ``until``."""
    schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted", job.state
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    return settle(cluster, job, set(until))


def run(world, simserver, *, sim_seconds=LONG, until=frozenset({"running"}), **kw) -> Job:
    cluster = cluster_on(simserver)
    return start(cluster, submit(world, sim_duration_seconds=sim_seconds, **kw), until=until)


def steps(text: str) -> list[int]:
    return [int(m.group(1)) for m in STEP.finditer(text)]


def log_file(simserver, job: Job):
    """The simulator's log file of the job (docs/backends.md): the bytes a download must equal."""
    return simserver.state.parent / "logs" / simserver.state.stem / f"gp-{job.pk}.log"
