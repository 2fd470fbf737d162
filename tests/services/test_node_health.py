"""Node health (issue 35 item 5), the simulator and a real Prometheus: an XID error series for one
GPU cordons its node within one poll of the metrics task, with the reason on the node and in its
events; the checkpointing job on it resumes on the other node from its last step, the plain job and
the service are requeued (no retry), and the ledger counts each job's card-hours once. The flapping
rule and the backends' own signals are checked without a cluster."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import override_settings
from django.utils import timezone

from jobs.clusters import dispatch, health, tasks
from jobs.clusters.backends.k8s_status import node_problem as k8s_problem
from jobs.clusters.backends.slurm import node_problem as slurm_problem
from jobs.clusters.nodes import node_return
from jobs.models import Job, JobEvent, ProjectStorage
from jobs.scheduling.cycle import schedule_once
from quotas.models import Node, NodeEvent
from tests import factories as fx
from tests.faults.checks import assert_event_log_consistent, assert_ledger_exact
from tests.services.test_gpu_metrics import _gpupool
from tests.waiting import settle, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

LONG = 10**6  # simulated seconds: the jobs run far longer than any wait


def _node_ids(job: Job) -> set[int]:
    job.refresh_from_db()
    return {n for worker in job.placement for n, _g, _m in worker}


def _step(directory: Path) -> int:
    try:
        return int((directory / "step").read_text())
    except FileNotFoundError:
        return 0


@pytest.mark.prometheus
def test_an_xid_error_cordons_the_node_in_one_poll_and_its_jobs_move(sim_pool, prometheus_for, tmp_path):
    f, cluster, pa, pb, simserver = sim_pool
    sim = simserver.backend()
    ProjectStorage.objects.create(project=pa, name="ckpt", kind="hostpath", host_path=str(tmp_path / "pa"),
                                  mount_path="/shared", checkpoints=True)
    ckpt = fx.submit(pa, f, gpus=4, name="ckpt", checkpointing=True, sim_duration_seconds=LONG)
    plain = fx.submit(pb, f, gpus=2, name="plain", sim_duration_seconds=LONG)
    service = fx.submit(pb, f, gpus=2, name="svc", kind="inference", sim_duration_seconds=LONG)
    jobs = (ckpt, plain, service)
    assert schedule_once().admitted == 3
    (bad_id,) = _node_ids(ckpt)
    assert _node_ids(plain) == _node_ids(service) == {bad_id}  # packed on one node, the other free
    for job in jobs:
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        settle(cluster, job, {"running"})
    directory = Path(ckpt.checkpoint["mount"]["host_path"]) / ckpt.checkpoint["subdir"]
    wait_until(lambda: (dispatch.sync_cluster(cluster.pk), _step(directory))[1] >= 2,
               "a checkpoint at step 2")

    bad = Node.objects.get(pk=bad_id)
    sim.set_xid(bad.name, 3, 79)  # XID 79: the GPU has fallen off the bus
    prom = prometheus_for([simserver.url.removeprefix("http://")])
    prom.wait_for_scrapes(2)
    assert prom.query(f'DCGM_FI_DEV_XID_ERRORS{{Hostname="{bad.name}",gpu="3"}} == 79')
    with override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": prom.url}):
        tasks.poll_metrics.apply()  # one poll
        bad.refresh_from_db()
        assert (bad.state, bad.hold, bad.health_reason) == ("cordoned", "cordoned", "XID 79 on GPU 3")
        event = NodeEvent.objects.get(node=bad)
        assert (event.action, event.actor, event.reason) == ("health", None, "XID 79 on GPU 3")
        assert sorted(event.data["requeued"]) == sorted(j.pk for j in jobs)
        assert {n.name: n.state for n in sim.list_nodes()}[bad.name] == "cordoned"
        tasks.poll_metrics.apply()  # the signal persists: no second cordon, no second event
        assert NodeEvent.objects.filter(node=bad).count() == 1

    for job in jobs:  # stopped with its grace period, recorded preempted, requeued
        dispatch.stop_job(job.pk)
        settle(cluster, job, {"queued"})
    saved = _step(directory)
    assert saved >= 2
    assert schedule_once().admitted == 3
    for job in jobs:
        assert _node_ids(job) == {Node.objects.exclude(pk=bad_id).get().pk}  # elsewhere
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        settle(cluster, job, {"running"})
        assert job.requeue_count == 1
        reasons = JobEvent.objects.filter(job=job, kind="preemption_signal").values_list("reason", flat=True)
        assert list(reasons) == [f"requeued off node {bad.name} (unhealthy: XID 79 on GPU 3)"]
    assert sim.view(f"gp-{ckpt.pk}")["resumed_from"] == saved  # from its last step, not later
    log = sim.log_tail(f"gp-{ckpt.pk}", max_bytes=10**6).text
    assert re.search(rf"end cancelled exit=143 step {saved}/\d+", log)
    assert sim.view(f"gp-{plain.pk}")["resumed_from"] == 0  # no checkpoint: from the beginning
    assert sim.view(f"gp-{service.pk}")["resumed_from"] == 0

    for job in jobs:
        Job.objects.filter(pk=job.pk).update(cancel_requested_at=timezone.now())
        dispatch.stop_job(job.pk)
        settle(cluster, job, {"cancelled"})
    ids = [j.pk for j in jobs]
    assert_event_log_consistent(ids)
    assert assert_ledger_exact(ids) >= 6  # two runs each, every interval counted once


def test_flapping_is_damped_and_an_operator_returns_the_node(sim_pool):
    _f, _cluster, _pa, _pb, _sim = sim_pool
    node = Node.objects.order_by("name").first()
    now = timezone.now()
    for k in range(health.FLAP_LIMIT):
        at = now + timedelta(minutes=10 * k)
        assert health.cordon_unhealthy(node.pk, "XID 48 on GPU 0", at) == []
        assert health.cordon_unhealthy(node.pk, "XID 48 on GPU 0", at) is None  # once per episode
        node.refresh_from_db()
        assert node.hold == "cordoned" and node.health_damped == (k + 1 == health.FLAP_LIMIT)
        returned = health.recover(node.pk, at + timedelta(minutes=5))  # the signal cleared
        node.refresh_from_db()
        if k + 1 < health.FLAP_LIMIT:
            assert returned == 1 and (node.state, node.hold, node.health_reason) == ("ready", "", "")
    assert returned == 0  # the third time in the window: held until an operator returns it
    assert (node.state, node.health_reason) == ("cordoned", "XID 48 on GPU 0")
    node_return(actor=fx.platform_admin(), node=node, reason="GPU 0 replaced")
    node.refresh_from_db()
    assert (node.state, node.hold, node.health_reason, node.health_damped) == ("ready", "", "", False)
    actions = list(NodeEvent.objects.filter(node=node).order_by("id").values_list("action", flat=True))
    assert actions == ["health", "recovered"] * (health.FLAP_LIMIT - 1) + ["health", "return"]
    # Outside the window the count starts again.
    later = now + health.FLAP_WINDOW + timedelta(hours=1)
    health.cordon_unhealthy(node.pk, "XID 48 on GPU 0", later)
    node.refresh_from_db()
    assert not node.health_damped


def test_a_lost_node_requeues_every_job_on_it(sim_pool):
    """Not only the checkpointing ones: the plain job and the service are requeued, not failed."""
    f, cluster, _pa, pb, simserver = sim_pool
    plain = fx.submit(pb, f, gpus=4, name="plain", sim_duration_seconds=LONG)
    service = fx.submit(pb, f, gpus=4, name="svc", kind="inference", sim_duration_seconds=LONG)
    assert schedule_once().admitted == 2
    for job in (plain, service):
        assert dispatch.dispatch_job(job.pk) == "dispatched"
        settle(cluster, job, {"running"})
    for node_id in _node_ids(plain) | _node_ids(service):
        simserver.backend().set_node_state(Node.objects.get(pk=node_id).name, "down")
    for job in (plain, service):
        settle(cluster, job, {"queued"})
        states = JobEvent.objects.filter(job=job, kind="transition").order_by("occurred_at", "id")
        assert list(states.values_list("to_state", flat=True))[-2:] == ["lost", "queued"]
        assert states.last().reason == "requeued after node failure" and job.requeue_count == 1


@pytest.mark.parametrize(
    ("state", "reason", "problem"),
    [
        ("idle", "none", ""),
        ("idle~", "none", ""),  # powered down by Slurm's power saving: not a fault
        ("down*", "Not responding", "Slurm down*: Not responding"),
        ("drained", "gpu 3 XID 79", "Slurm drained: gpu 3 XID 79"),
        ("failing", "none", "Slurm failing"),
    ],
)
def test_slurm_node_problems(state, reason, problem):
    assert slurm_problem(state, reason) == problem


def test_kubernetes_node_conditions():
    class C:
        def __init__(self, type_, status, message=""):
            self.type, self.status, self.message = type_, status, message

    assert k8s_problem([C("Ready", "True"), C("DiskPressure", "False")]) == ""
    assert k8s_problem([C("Ready", "Unknown", "Kubelet stopped posting node status"),
                        C("DiskPressure", "True")]) == (
        "Kubernetes Ready=Unknown: Kubelet stopped posting node status; DiskPressure=True")


def test_an_outage_of_a_source_is_no_all_clear_and_an_admins_hold_is_the_admins(sim_pool):
    from jobs.clusters.nodes import node_cordon

    _f, _cluster, _pa, _pb, _sim = sim_pool
    sick, held = Node.objects.order_by("name")
    assert health.cordon_unhealthy(sick.pk, "XID 79 on GPU 3", timezone.now()) == []
    unreachable = {**_gpupool(), "PROMETHEUS_URL": "http://127.0.0.1:9"}  # nothing listens there
    with override_settings(GPUPOOL=unreachable):
        assert health.poll_node_health() == {"cordoned": 0, "requeued": 0, "recovered": 0}
    sick.refresh_from_db()
    assert sick.health_reason == "XID 79 on GPU 3"  # Prometheus did not answer: not "healthy"

    node_cordon(actor=fx.platform_admin(), node=held, reason="BIOS update")
    assert health.cordon_unhealthy(held.pk, "XID 48 on GPU 0", timezone.now()) is None
    with override_settings(GPUPOOL={**_gpupool(), "PROMETHEUS_URL": ""}):  # every source answered
        assert health.poll_node_health()["recovered"] == 1
    sick.refresh_from_db()
    held.refresh_from_db()
    assert (sick.state, sick.health_reason) == ("ready", "")
    assert (held.state, held.hold, held.health_reason) == ("cordoned", "cordoned", "")  # still the admin's
