"""Elastic scaling end to end on PostgreSQL: an inference service starts with the replicas that
fit, grows when capacity frees (one ``scaled`` event per change, the backend told), its owner
scales it down (GPUs and quota released at once) or sets a new target, and what it borrowed
is reclaimed worker by worker. The simulated cluster is a real server process; the Kubernetes
case runs against the local API stand-in."""


import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse
from django.utils import translation
from rest_framework.test import APIClient

from jobs.clusters import dispatch
from jobs.models import Job, JobEvent, backend_name
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.warm import warm_engine
from jobs.selectors import quota_usage
from jobs.services import job_scale, job_submit
from portal.models import Membership, Role, User
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.backends import k8s_standin
from tests.waiting import settle

pytestmark = pytest.mark.django_db
k8s_api = k8s_standin.k8s_api


def _run(cluster, job):
    """Dispatch an admitted job and sync until the backend reports it running."""
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    return settle(cluster, job, {"running"})


def _inference(project, f, *, workers=4, min_workers=1, name="svc"):
    return job_submit(
        actor=fx.platform_admin(),
        project=project,
        name=name,
        kind="inference",
        flavor=f,
        priority_class=fx.priority(),
        image="vllm:0.6",
        workers=workers,
        min_workers=min_workers,
        gpus_per_worker=1,
        sim_duration_seconds=10**6,
    )


def _scaled(job):
    return list(job.events.filter(kind="scaled").order_by("occurred_at", "id").values_list("reason", "data"))


def _used(f, project):
    rows = quota_usage(fx.platform_admin(), f.pk)
    return next(r["used"] for r in rows if r["row"].kind == "project" and r["row"].owner_id == project.pk)


@pytest.fixture
def owner(sim_pool):
    user = User.objects.create(username="svc-owner")
    Membership.objects.create(user=user, role=Role.MEMBER, project=sim_pool[2])
    return user


def test_inference_starts_small_grows_when_capacity_frees_and_scales_down(sim_pool, owner):
    f, cluster, pa, pb, sim = sim_pool
    big = fx.submit(pb, f, gpus=8, name="big", sim_duration_seconds=10**6)
    filler = fx.submit(pa, f, gpus=6, name="filler", sim_duration_seconds=10**6)
    schedule_once()
    svc = _inference(pa, f)
    Job.objects.filter(pk=svc.pk).update(submitted_by=owner)
    schedule_once()
    svc.refresh_from_db()
    assert (svc.state, svc.granted_workers, len(svc.placement)) == ("admitted", 2, 2)  # only 2 fit
    for job in (big, filler, svc):
        job.refresh_from_db()
        _run(cluster, job)
    assert sim.backend().view(backend_name(svc.pk))["workers"] == 2
    assert schedule_once().grown == 0  # nothing has freed yet

    sim.backend().crash(backend_name(filler.pk))  # another job ends: 6 GPUs free
    settle(cluster, filler, {"failed"})
    report = schedule_once()
    svc.refresh_from_db()
    assert report.grown == 1 and svc.granted_workers == len(svc.placement) == 4
    assert len(svc.grown_at) == 2 and svc.resize_requested_at is not None
    # The event carries the placement after the change (the concurrency replay checks devices).
    grown = {"workers": 4, "from": 2, "placement": svc.placement}
    assert _scaled(svc) == [("scaled 2→4 by the scheduler", grown)]
    with translation.override("zh-hans"):  # the same reason for people (issue 18 item 13)
        assert svc.events.get(kind="scaled").reason_text == "调度器将规模从 2 调整为 4"
    assert svc.state == "running" and _used(f, pa) == 4
    assert dispatch.resize_job(svc.pk) == "resized"  # the outbox: the backend gets the new size
    assert sim.backend().view(backend_name(svc.pk))["workers"] == 4
    svc.refresh_from_db()
    assert svc.resize_requested_at is None
    assert schedule_once().grown == 0  # at its maximum

    job_scale(actor=owner, job=svc, replicas=1)  # down: released at once
    svc.refresh_from_db()
    assert (svc.granted_workers, len(svc.placement), svc.target_workers, svc.grown_at) == (1, 1, 1, [])
    assert _scaled(svc)[-1] == (
        "scaled 4→1 by its owner", {"workers": 1, "from": 4, "target": 1, "placement": svc.placement}
    )
    assert _used(f, pa) == 1  # quota usage follows the placement
    dispatch.resize_job(svc.pk)
    assert sim.backend().view(backend_name(svc.pk))["workers"] == 1
    assert schedule_once().grown == 0  # the target holds it at 1

    job_scale(actor=owner, job=svc, replicas=3)  # up: a target for the grow pass
    svc.refresh_from_db()
    assert svc.granted_workers == 1 and svc.target_workers == 3
    assert svc.events.filter(kind="scale_target").get().reason == "target 1→3"
    with translation.override("zh-hans"):
        assert svc.events.get(kind="scale_target").reason_text == "目标规模从 1 改为 3"
        assert svc.events.filter(kind="scaled").last().reason_text == "所有者将规模从 4 调整为 1"
    assert schedule_once().grown == 1
    svc.refresh_from_db()
    assert svc.granted_workers == 3  # up to the target, not to its maximum of 4
    assert schedule_once().grown == 0


def test_scale_is_refused_outside_the_rules(sim_pool, owner, settings):
    settings.LANGUAGE_CODE = "en"  # the messages matched below are English
    f, cluster, pa, _pb, _sim = sim_pool
    svc = _inference(pa, f, workers=3, min_workers=2)
    fixed = fx.submit(pa, f, gpus=1, workers=2, name="fixed", sim_duration_seconds=10**6)
    plain_training = fx.submit(
        pa, f, gpus=1, workers=3, min_workers=1, name="elastic-train", sim_duration_seconds=10**6
    )
    with pytest.raises(ValidationError, match="running"):
        job_scale(actor=fx.platform_admin(), job=svc, replicas=2)  # still queued
    schedule_once()
    for job in (svc, fixed, plain_training):
        job.refresh_from_db()
        _run(cluster, job)
    with pytest.raises(PermissionDenied):
        job_scale(actor=owner, job=svc, replicas=2)  # a teammate, neither its owner nor an admin
    for replicas in (1, 4):
        with pytest.raises(ValidationError) as err:
            job_scale(actor=fx.platform_admin(), job=svc, replicas=replicas)
        assert "replicas" in err.value.message_dict
    with pytest.raises(ValidationError, match="fixed size"):
        job_scale(actor=fx.platform_admin(), job=fixed, replicas=1)
    with pytest.raises(ValidationError, match="checkpointing"):
        job_scale(actor=fx.platform_admin(), job=plain_training, replicas=1)
    assert not JobEvent.objects.filter(kind__in=["scaled", "scale_target"]).exists()


def test_scale_through_the_api(sim_pool):
    f, cluster, pa, _pb, sim = sim_pool
    svc = _inference(pa, f, workers=3)
    schedule_once()
    svc.refresh_from_db()
    _run(cluster, svc)
    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    url = reverse("api:job-scale", args=[svc.pk])
    assert client.post(url, {"replicas": 9}, format="json").status_code == 400
    assert client.post(url, {"replicas": "x"}, format="json").status_code == 400
    missing = reverse("api:job-scale", args=[10**6])
    assert client.post(missing, {"replicas": 1}, format="json").status_code == 404
    response = client.post(url, {"replicas": 2}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["granted_workers"], response.json()["target_workers"]) == (2, 2)
    dispatch.resize_job(svc.pk)
    assert sim.backend().view(backend_name(svc.pk))["workers"] == 2


def test_borrowed_replicas_are_reclaimed_one_by_one(sim_pool):
    f, cluster, pa, pb, sim = sim_pool
    svc = _inference(pb, f, workers=16, min_workers=4)  # B's quota is 8; A is idle
    filler = fx.submit(pb, f, gpus=4, name="filler", sim_duration_seconds=10**6)
    schedule_once()
    for job in (svc, filler):
        job.refresh_from_db()
        _run(cluster, job)
    assert svc.granted_workers == 12  # 16 GPUs, 4 taken by the filler
    sim.backend().crash(backend_name(filler.pk))
    settle(cluster, filler, {"failed"})
    assert schedule_once().grown == 1
    svc.refresh_from_db()
    assert svc.granted_workers == 16 and len(svc.grown_at) == 4
    rebuilds = warm_engine().rebuilds
    a1 = fx.submit(pa, f, gpus=4, name="a1")  # in quota for A: takes back what B borrowed
    report = schedule_once()
    svc.refresh_from_db()
    a1.refresh_from_db()
    assert a1.state == "admitted" and report.preempted == 4
    assert svc.state == "running" and svc.terminating_since is None  # it runs on, smaller
    assert svc.granted_workers == len(svc.placement) == 12 and svc.grown_at == []
    [event] = [e for e in _scaled(svc) if "reclaim" in e[0]]
    assert event[0] == f"scaled 16→12: reclaim for job {a1.pk}"
    assert event[1]["removed"] == [12, 13, 14, 15]
    assert a1.events.get(to_state="admitted").data["preempts"] == []  # nothing to wait for
    dispatch.resize_job(svc.pk)
    assert sim.backend().view(backend_name(svc.pk))["workers"] == 12
    schedule_once()
    assert warm_engine().rebuilds > rebuilds  # the workers were renumbered: a fresh engine


def test_jobs_on_slurm_clusters_keep_their_size(sim_pool):
    f, _cluster, pa, _pb, _sim = sim_pool
    slurm = Cluster.objects.create(name="slurm-x", kind="slurm", config={"slurm_conf": "/nonexistent"})
    Node.objects.filter(flavor=f).update(cluster=slurm)  # the pool is a Slurm cluster now
    svc = _inference(pa, f, workers=12, min_workers=1)
    fx.submit(pa, f, gpus=8, name="first", sim_duration_seconds=10**6)
    schedule_once()
    svc.refresh_from_db()
    # as if dispatched and started there (no Slurm here: the service decides before any call)
    Job.objects.filter(pk=svc.pk).update(state="running", dispatched_at=svc.admitted_at, cluster=slurm)
    Job.objects.exclude(pk=svc.pk).update(state="succeeded")
    assert schedule_once().grown == 0
    with pytest.raises(ValidationError, match="Slurm"):
        job_scale(actor=fx.platform_admin(), job=svc, replicas=2)


@pytest.mark.kubernetes
def test_kubernetes_deployment_replicas_follow_the_portal(sim_pool, k8s_api):
    f, _sim_cluster, pa, _pb, _sim = sim_pool
    kube = Cluster.objects.create(name="kube", kind="kubernetes", config={"host": k8s_api.url, "token": "t"})
    Node.objects.filter(flavor=f).update(cluster=kube)
    svc = _inference(pa, f, workers=4, min_workers=1)
    blocker = fx.submit(pa, f, gpus=8, name="blocker")
    schedule_once()
    blocker.refresh_from_db()
    assert blocker.state == "admitted"
    Job.objects.filter(pk=blocker.pk).update(state="running", dispatched_at=blocker.admitted_at, cluster=kube)
    svc.refresh_from_db()
    assert dispatch.dispatch_job(svc.pk) == "dispatched"
    name = backend_name(svc.pk)
    assert k8s_api.get("deployments", name)["spec"]["replicas"] == 4
    k8s_api.set_status("deployments", name, {"replicas": 4, "availableReplicas": 4})
    dispatch.sync_cluster(kube.pk)
    svc.refresh_from_db()
    assert svc.state == "running"
    job_scale(actor=fx.platform_admin(), job=svc, replicas=2)
    assert dispatch.resize_job(svc.pk) == "resized"
    stored = k8s_api.get("deployments", name)
    assert stored["spec"]["replicas"] == 2
    assert ("PATCH", f"/apis/apps/v1/namespaces/gpupool-jobs/deployments/{name}") in k8s_api.calls()
    job_scale(actor=fx.platform_admin(), job=svc, replicas=4)  # up again: the grow pass, then a patch
    assert schedule_once().grown == 1
    dispatch.resize_job(svc.pk)
    assert k8s_api.get("deployments", name)["spec"]["replicas"] == 4
