"""Cordon, drain and return to service (jobs.clusters.nodes, issue 24) against a real simulated cluster:
state changes, events, what reaches the backend, the engine placing around a held node, the
inventory sync keeping the hold, requeue through the preemption path, refusals, and two admins
at once."""

from __future__ import annotations

import threading

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection

from jobs.clusters import dispatch
from jobs.clusters.inventory import push_simulated_inventory, refresh_node_states
from jobs.clusters.node_map import node_map
from jobs.clusters.nodes import jobs_on_node, node_cordon, node_drain, node_return
from jobs.models import Job
from jobs.scheduling.cycle import schedule_once
from portal.models import Membership, Role, User
from quotas.models import Cluster, Node, NodeEvent
from tests import factories as fx
from tests.backends import k8s_standin
from tests.waiting import settle

pytestmark = pytest.mark.django_db

k8s_api = k8s_standin.k8s_api  # the fixture, under this module's name


def _sim_state(sim, name: str) -> str:
    return {n.name: n.state for n in sim.backend().list_nodes()}[name]


def _node(name: str) -> Node:
    return Node.objects.select_related("cluster", "flavor").get(name=name)


def test_cordon_reaches_the_simulator_and_is_recorded_once(sim_pool):
    _f, _cluster, _pa, _pb, sim = sim_pool
    admin = fx.platform_admin()
    out = node_cordon(actor=admin, node=_node("sim-0"), reason="  XID 79 on GPU 3 ")
    assert out.event is not None and (out.node.state, out.node.hold) == ("cordoned", "cordoned")
    assert _sim_state(sim, "sim-0") == "cordoned" and _sim_state(sim, "sim-1") == "ready"
    event = NodeEvent.objects.get()
    assert (event.action, event.from_state, event.to_state, event.reason, event.actor) == (
        "cordon", "ready", "cordoned", "XID 79 on GPU 3", admin)
    again = node_cordon(actor=admin, node=_node("sim-0"), reason="again")
    assert again.event is None and NodeEvent.objects.count() == 1  # idempotent
    back = node_return(actor=admin, node=_node("sim-0"), reason="GPU replaced")
    assert back.node.state == "ready" and back.node.hold == ""
    assert _sim_state(sim, "sim-0") == "ready"
    assert list(NodeEvent.objects.order_by("at", "id").values_list("action", "to_state")) == [
        ("cordon", "cordoned"), ("return", "ready")]


def test_the_engine_places_around_a_cordoned_or_draining_node(sim_pool):
    f, _cluster, pa, pb, _sim = sim_pool
    admin = fx.platform_admin()
    node_cordon(actor=admin, node=_node("sim-0"), reason="maintenance")
    first = fx.submit(pa, f, gpus=8, name="first", sim_duration_seconds=100000)
    second = fx.submit(pb, f, gpus=8, name="second", sim_duration_seconds=100000)
    schedule_once()
    first.refresh_from_db()
    second.refresh_from_db()
    sim1 = _node("sim-1").pk
    placed = [j for j in (first, second) if j.state == "admitted"]
    assert len(placed) == 1 and {slot[0] for w in placed[0].placement for slot in w} == {sim1}
    node_drain(actor=admin, node=_node("sim-0"), reason="firmware", requeue=False)
    schedule_once()
    assert Job.objects.filter(state="queued").count() == 1  # still nothing on sim-0
    node_return(actor=admin, node=_node("sim-0"), reason="done")
    schedule_once()
    assert Job.objects.filter(state="admitted").count() == 2


def test_the_inventory_sync_never_lifts_a_hold(sim_pool):
    _f, cluster, _pa, _pb, sim = sim_pool
    node_drain(actor=fx.platform_admin(), node=_node("sim-1"), reason="swap PSU", requeue=False)
    # The simulator forgets the cordon (as after a restart with a fresh inventory) ...
    sim.backend().set_node_state("sim-1", "ready")
    refresh_node_states(cluster)
    push_simulated_inventory()
    assert (_node("sim-1").state, _node("sim-1").hold) == ("draining", "draining")
    # ... but down shows through the hold, and the hold is back when the node is.
    sim.backend().set_node_state("sim-1", "down")
    refresh_node_states(cluster)
    assert _node("sim-1").state == "down"
    sim.backend().set_node_state("sim-1", "ready")
    refresh_node_states(cluster)
    assert _node("sim-1").state == "draining"


def test_drain_with_requeue_sends_the_jobs_back_through_the_preemption_path(sim_pool):
    f, cluster, pa, _pb, _sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=100000, checkpointing=True)
    schedule_once()
    dispatch.dispatch_job(job.pk)
    settle(cluster, job, {"running"})
    node = Node.objects.get(pk=job.placement[0][0][0])
    assert [j.pk for j in jobs_on_node(node)] == [job.pk]
    out = node_drain(actor=fx.platform_admin(), node=node, reason="XID 48", requeue=True)
    assert out.requeued == (job.pk,) and out.event.data == {"jobs": [job.pk], "requeued": [job.pk]}
    signal = job.events.get(kind="preemption_signal")
    assert signal.reason == f"requeued off node {node.name} (drained: XID 48)"
    assert dispatch.stop_job(job.pk) == "stopping"
    settle(cluster, job, {"queued"})
    transitions = list(job.events.filter(kind="transition").values_list("to_state", flat=True))
    assert transitions[-3:] == ["running", "preempted", "queued"] and job.requeue_count == 1
    schedule_once()
    job.refresh_from_db()
    assert job.state == "admitted" and {s[0] for w in job.placement for s in w} == {
        _node("sim-0" if node.name == "sim-1" else "sim-1").pk}
    # Asking again requeues nothing more and records nothing: the node is drained, the job gone.
    assert node_drain(actor=fx.platform_admin(), node=node, reason="XID 48", requeue=True).event is None


def test_refusals_change_nothing(sim_pool):
    _f, _cluster, pa, _pb, sim = sim_pool
    member = User.objects.create(username="member")
    Membership.objects.create(user=member, role=Role.MEMBER, project=pa)
    with pytest.raises(PermissionDenied):
        node_cordon(actor=member, node=_node("sim-0"), reason="mine now")
    admin = fx.platform_admin()
    for bad in ("", "   ", "x" * 301):
        with pytest.raises(ValidationError):
            node_cordon(actor=admin, node=_node("sim-0"), reason=bad)
    # The cluster refuses (the simulator does not know the node): the portal stays as it was.
    Node.objects.filter(name="sim-0").update(name="ghost")
    with pytest.raises(ValidationError, match="no node ghost"):
        node_cordon(actor=admin, node=_node("ghost"), reason="gone")
    assert _node("ghost").state == "ready" and not NodeEvent.objects.exists()
    assert _sim_state(sim, "sim-0") == "ready"


def test_a_node_cordoned_outside_the_portal_can_be_returned(sim_pool):
    _f, _cluster, _pa, _pb, sim = sim_pool
    sim.backend().set_node_state("sim-0", "cordoned")
    Node.objects.filter(name="sim-0").update(state="cordoned")  # as the sync reads it
    out = node_return(actor=fx.platform_admin(), node=_node("sim-0"), reason="checked")
    assert out.event is not None and out.node.state == "ready" and _sim_state(sim, "sim-0") == "ready"


def test_the_map_names_only_visible_jobs_and_flags_idle_ones(sim_pool):
    f, cluster, pa, pb, _sim = sim_pool
    mine = fx.submit(pa, f, gpus=4, name="mine", sim_duration_seconds=100000)
    theirs = fx.submit(pb, f, gpus=8, name="theirs", sim_duration_seconds=100000)
    schedule_once()
    Job.objects.filter(pk=mine.pk).update(idle_since=mine.submitted_at)
    alice = User.objects.create(username="alice")
    Membership.objects.create(user=alice, role=Role.MEMBER, project=pa)
    built = node_map(alice, cluster=cluster)
    holders = {h.job_id: h for v in built.nodes for g in v.gpus for h in g.holders}
    assert holders[mine.pk].name == "mine" and holders[theirs.pk].name == ""
    statuses = sorted(g.status for v in built.nodes for g in v.gpus)
    assert statuses.count("idle") == 4 and statuses.count("used") == 8 and statuses.count("free") == 4
    # nodes without CPU, memory or disk figures: every free GPU is usable, none stranded
    assert built.totals == {"nodes": 2, "gpus": 16, "free": 4, "usable": 4, "stranded": 0, "used": 12,
                            "idle": 4}
    only_free = node_map(alice, cluster=cluster, has_free=True)
    assert len(only_free.nodes) == 1 and only_free.nodes[0].free == 4


@pytest.mark.django_db(transaction=True)
def test_two_admins_cordoning_at_once_record_one_change(simserver):
    f = fx.flavor()
    cluster = Cluster.objects.create(name="race", kind="simulator", config={"url": simserver.url})
    node = Node.objects.create(
        cluster=cluster, name="r-0", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l"
    )
    from jobs.clusters.backends.base import NodeInfo

    simserver.backend().set_inventory([NodeInfo("r-0", f.name, 8, "ready", "z", "s", "l")])
    admins = [fx.platform_admin("ops-1"), fx.platform_admin("ops-2")]
    start = threading.Barrier(2)
    outcomes, errors = [], []

    def cordon(admin):
        try:
            start.wait()
            outcomes.append(node_cordon(actor=admin, node=node, reason=f"by {admin.username}"))
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=cordon, args=(a,)) for a in admins]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(o.event is not None for o in outcomes) == [False, True]
    assert NodeEvent.objects.filter(node=node).count() == 1
    assert Node.objects.get(pk=node.pk).state == "cordoned"


def test_kubernetes_cordon_through_the_service_and_the_sync_keeps_it(k8s_api):
    from jobs.clusters.inventory import sync_inventory

    f = fx.flavor()
    ready = [{"type": "Ready", "status": "True"}]
    k8s_api.nodes = [
        {
            "metadata": {"name": name, "labels": {"gpupool.io/spine": "s1", "gpupool.io/leaf": "l1"}},
            "spec": {},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "conditions": ready},
        }
        for name in ("k-0", "k-1")
    ]
    config = {"host": k8s_api.url, "token": "t"}
    cluster = Cluster.objects.create(name="k8s", kind="kubernetes", config=config)
    assert sync_inventory(cluster)["created"] == 2
    node = Node.objects.get(cluster=cluster, name="k-0")
    assert node.flavor == f
    node_cordon(actor=fx.platform_admin(), node=node, reason="NVLink errors")
    assert k8s_api.nodes[0]["spec"]["unschedulable"] is True
    assert k8s_api.nodes[0]["metadata"]["annotations"]["gpupool.io/cordon-reason"] == "NVLink errors"
    # Someone uncordons it behind the portal's back: the next sync keeps the portal's hold.
    k8s_api.nodes[0]["spec"] = {}
    sync_inventory(cluster)
    assert Node.objects.get(pk=node.pk).state == "cordoned"
    node_return(actor=fx.platform_admin(), node=Node.objects.get(pk=node.pk), reason="cables reseated")
    assert "unschedulable" not in k8s_api.nodes[0]["spec"]
    sync_inventory(cluster)
    assert Node.objects.get(pk=node.pk).state == "ready"


def test_the_node_api_patch_does_not_go_around_a_hold(sim_pool):
    from quotas.services import node_update

    admin = fx.platform_admin()
    node_cordon(actor=admin, node=_node("sim-0"), reason="hold it")
    with pytest.raises(ValidationError, match="uncordon"):
        node_update(actor=admin, node=_node("sim-0"), state="ready")
    assert _node("sim-0").state == "cordoned"
    node_update(actor=admin, node=_node("sim-0"), leaf="l9")  # other fields still change
