"""Node health on a real slurmctld (issue 35 item 5): a node drained outside the portal, with
Slurm's reason, is cordoned by one health poll with that reason — and the portal writes nothing
back, so Slurm's reason stays — and the job on it is sent back to the queue; when the cluster's
admin resumes the node, the next poll returns it to service."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

from jobs.clusters.health import backend_signals, poll_node_health
from tests.backends.test_slurm import Cluster, settle, slurm_cluster, wait_until
from tests.services.test_gpu_metrics import _gpupool

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

REASON = "gpu 3 fell off the bus"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with slurm_cluster(2, 8, prefix="gp-slurm-health-") as started:
        yield started


def test_a_node_slurm_drains_is_cordoned_with_slurms_reason_and_returns_when_resumed(cluster):
    from jobs.clusters import dispatch
    from jobs.clusters.inventory import sync_inventory
    from jobs.scheduling.cycle import schedule_once
    from quotas.models import Cluster as PortalCluster
    from quotas.models import Node, NodeEvent
    from tests import factories as fx

    flavor = fx.flavor("A100-slurm")
    flavor.slurm_gres = "gpu:a100"
    flavor.save()
    portal = PortalCluster.objects.create(
        name="slurm-health", kind="slurm", config={"slurm_conf": cluster.conf}
    )
    sync_inventory(portal)
    dept = fx.department("S")
    project = fx.project("s1", dept)
    fx.quota(flavor, dept, 16)
    fx.quota(flavor, project, 16)
    job = fx.submit(project, flavor, gpus=8, name="on-bad-node", command="sleep 300")
    schedule_once()
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    settle(portal, job, {"running"})
    node = Node.objects.get(pk=job.placement[0][0][0])

    cluster.scontrol("update", f"NodeName={node.name}", "State=DRAIN", f"Reason={REASON}")
    with override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": ""}):  # Slurm's word only
        counts = poll_node_health()
        node.refresh_from_db()
        assert counts["cordoned"] == 1 and counts["requeued"] == 1
        assert (node.state, node.hold) == ("cordoned", "cordoned")
        assert node.health_reason.startswith("Slurm drain") and node.health_reason.endswith(f": {REASON}")
        assert f"Reason={REASON} " in cluster.scontrol("show", "node", node.name, "-o")  # not overwritten
        job.refresh_from_db()
        assert job.terminating_since is not None  # on its way back to the queue
        dispatch.stop_job(job.pk)
        settle(portal, job, {"queued"})

        cluster.scontrol("update", f"NodeName={node.name}", "State=RESUME")
        # A loaded machine may leave slurmd unanswered a while (``idle*``): that is a signal too,
        # so wait until Slurm reports the node healthy before the poll that returns it.
        wait_until(lambda: node.name not in backend_signals(portal), "Slurm to report the node healthy")
        assert poll_node_health()["recovered"] == 1
    node.refresh_from_db()
    assert (node.state, node.hold, node.health_reason) == ("ready", "", "")
    assert list(NodeEvent.objects.filter(node=node).order_by("id").values_list("action", flat=True)) == [
        "health", "recovered"]
