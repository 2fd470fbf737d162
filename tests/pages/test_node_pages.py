"""The node page and the node map (issue 32 item 7): a draining node with no job left is shown
drained; draining with requeue asks once more, naming the jobs, and its message counts them
in proper English. Against a real simulated cluster (the node actions reach its backend)."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.clusters.backends.base import NodeInfo
from jobs.clusters.backends.registry import backend_for
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_cancel
from quotas.models import Cluster, Node, NodeEvent
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def one_node(simserver):
    """One simulated 8-GPU node sim-0 and an 8-GPU job of project pa admitted on it."""
    f = fx.flavor()
    cluster = Cluster.objects.create(name="sim-pages", kind="simulator", config={"url": simserver.url})
    node = Node.objects.create(
        cluster=cluster, name="sim-0", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l"
    )
    simserver.backend().set_inventory([NodeInfo("sim-0", f.name, 8, "ready", "z", "s", "l")])
    a = fx.department("A")
    pa = fx.project("pa", a)
    fx.quota(f, a, 8)
    fx.quota(f, pa, 8)
    job = fx.submit(pa, f, gpus=8, name="on-sim-0")
    schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted" and job.placement[0][0][0] == node.pk
    admin = fx.platform_admin()
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(admin)
    return node, job, client, admin


def _badge(html: str) -> str:
    start = html.index('id="node-state">') + len('id="node-state">')
    return html[start : html.index("</mark>", start)]


def test_item7_a_draining_node_is_drained_once_its_last_job_has_left(one_node):
    node, job, client, admin = one_node
    url = f"/nodes/{node.pk}/"
    client.post(url, {"action": "drain", "jobs": "finish", "reason": "firmware"})
    assert _badge(client.get(url).content.decode()) == "Draining"  # the job still runs there
    job_cancel(actor=admin, job=job)
    assert Job.objects.get(pk=job.pk).state == "cancelled"
    page = client.get(url).content.decode()
    assert _badge(page) == "Drained"
    the_map = client.get("/nodes/", {"cluster": node.cluster.name}).content.decode()
    assert 'class="badge node-drained">Drained</mark>' in the_map
    only = client.get("/nodes/", {"cluster": node.cluster.name, "state": "drained"})
    assert [v.node.name for v in only.context["map"].nodes] == ["sim-0"]
    # It is still held: the hold and the stored state stay until it is returned to service.
    node.refresh_from_db()
    assert (node.state, node.hold) == ("draining", "draining")


def test_item7_drain_with_requeue_asks_first_and_names_the_jobs(one_node):
    node, job, client, _admin = one_node
    url = f"/nodes/{node.pk}/"
    body = {"action": "drain", "jobs": "requeue", "reason": "XID 48"}
    asked = client.post(url, body)
    assert asked.status_code == 200
    html = asked.content.decode()
    assert "Requeue 1 job and drain sim-0?" in html and f"on-sim-0 #{job.pk}" in html
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.state == "ready" and not NodeEvent.objects.exists() and job.terminating_since is None
    done = client.post(url, {**body, "confirmed": "True"}, follow=True)
    messages = [str(m) for m in done.context["messages"]]
    assert "1 job is being requeued." in messages, messages
    node.refresh_from_db()
    job.refresh_from_db()
    assert node.hold == "draining" and job.terminating_since is not None
    # Nothing on it to stop: no question asked.
    other = Node.objects.create(cluster=node.cluster, name="sim-1", flavor=node.flavor, gpu_count=8,
                                zone="z", spine="s", leaf="l")
    inventory = [NodeInfo(n, node.flavor.name, 8, "ready", "z", "s", "l") for n in ("sim-0", "sim-1")]
    backend_for("simulator", node.cluster.config).set_inventory(inventory, keep_states=True)
    response = client.post(f"/nodes/{other.pk}/", body)
    assert response.status_code == 302
    other.refresh_from_db()
    assert other.hold == "draining"
