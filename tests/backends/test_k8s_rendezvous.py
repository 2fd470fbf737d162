"""DESIGN §17 on Kubernetes (issue 35 items 3 and 4): a multi-worker training Job is Indexed, its
pods carry the rendezvous variables and a ``subdomain`` served by a headless Service (each
object valid against the official schema); a job its pods do not start within the start timeout
gives its GPUs back and is requeued with backoff and the pod's reason (ImagePullBackOff), and
fails after the centre's number of start timeouts (Unschedulable). The API is the stand-in of
tests/backends/k8s_standin.py."""

from __future__ import annotations

from datetime import timedelta

import pytest

from jobs.clusters.backends.kubernetes import build_training_job, rendezvous_service
from jobs.clusters.backends.rendezvous import COMPLETION_INDEX
from tests.backends import k8s_standin
from tests.backends.test_k8s_resources import _node
from tests.backends.test_kubernetes import container, make_spec, validate

k8s_api = k8s_standin.k8s_api


def _env(manifest: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container(manifest["spec"]["template"]["spec"])["env"]}


def test_a_four_worker_job_is_indexed_with_a_subdomain_and_the_rendezvous_variables():
    spec = make_spec(workers=4)
    manifest = build_training_job(spec, "jobs")
    validate(manifest)
    pod = manifest["spec"]["template"]["spec"]
    assert manifest["spec"]["completionMode"] == "Indexed" and manifest["spec"]["completions"] == 4
    assert pod["subdomain"] == "gp-42"
    env = _env(manifest)
    assert env["MASTER_ADDR"]["value"] == "gp-42-0.gp-42"  # worker 0's hostname . the Service
    assert (env["MASTER_PORT"]["value"], env["WORLD_SIZE"]["value"], env["NNODES"]["value"]) == (
        "29500", "4", "4")
    assert env["NODE_RANK"]["valueFrom"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
    service = rendezvous_service(spec, "jobs")
    validate(service)
    assert service["metadata"]["name"] == pod["subdomain"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    # The Service selects exactly the job's pods.
    labels = manifest["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_a_single_worker_job_has_no_rendezvous():
    manifest = build_training_job(make_spec(workers=1), "jobs")
    validate(manifest)
    assert "subdomain" not in manifest["spec"]["template"]["spec"]
    assert "MASTER_ADDR" not in _env(manifest)


@pytest.fixture
def on_k8s(k8s_api, db):
    from jobs.clusters.inventory import sync_inventory
    from quotas.models import Cluster
    from tests import factories as fx

    k8s_api.nodes = [_node("gpu-a"), _node("gpu-b")]
    flavor = fx.flavor("A100-k8s")
    cluster = Cluster.objects.create(name="k8s-rdv", kind="kubernetes", config={"host": k8s_api.url})
    assert sync_inventory(cluster)["created"] == 2
    dept = fx.department("K")
    project = fx.project("k1", dept)
    fx.quota(flavor, dept, 16)
    fx.quota(flavor, project, 16)
    return flavor, cluster, project


def _dispatched(project, flavor, **kw):
    from jobs.clusters import dispatch
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    job = fx.submit(project, flavor, **kw)
    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    job.refresh_from_db()
    return job


def test_a_portal_job_of_two_workers_gets_its_headless_service_and_loses_it_with_the_job(k8s_api, on_k8s):
    from jobs.clusters import dispatch
    from jobs.services import job_cancel
    from tests import factories as fx

    flavor, _cluster, project = on_k8s
    job = _dispatched(project, flavor, workers=2, gpus=4, name="ddp", command="torchrun train.py",
                      env=[{"name": "MASTER_PORT", "value": "1"}])
    name = f"gp-{job.pk}"
    stored = k8s_api.get("jobs", name)
    validate(stored)
    env = _env(stored)
    assert env["MASTER_ADDR"]["value"] == f"{name}-0.{name}"
    assert env["MASTER_PORT"]["value"] == "29500"  # the portal's, not the job's own "1"
    service = k8s_api.get("services", name)
    assert service["spec"]["clusterIP"] == "None"
    job_cancel(actor=fx.platform_admin(), job=job)
    assert dispatch.stop_job(job.pk) == "stopping"
    assert k8s_api.get("jobs", name) is None and k8s_api.get("services", name) is None


def test_a_job_whose_image_does_not_pull_is_requeued_after_the_start_timeout_with_the_reason(k8s_api, on_k8s):
    from django.utils import timezone, translation

    from jobs.clusters.start_timeout import requeue_unstarted
    from jobs.models import Job
    from jobs.retries import backoff, retry_policy
    from jobs.scheduling.cycle import explain_job, schedule_once
    from jobs.scheduling.explaining import readable
    from tests import factories as fx

    flavor, _cluster, project = on_k8s
    policy = retry_policy()
    timeout = timedelta(seconds=policy.start_timeout_seconds)
    job = _dispatched(project, flavor, workers=1, gpus=4, name="nopull", command="python train.py")
    name = f"gp-{job.pk}"
    pull = ("ImagePullBackOff", 'Back-off pulling image "pytorch:2.3"')
    k8s_api.pod_pending(f"{name}-0-abcde", name, waiting=pull)
    # Within the timeout nothing happens.
    assert requeue_unstarted(now=job.dispatched_at + timeout - timedelta(seconds=1)) == {}
    job.refresh_from_db()
    assert job.state == "admitted"
    at = job.dispatched_at + timeout
    assert requeue_unstarted(now=at) == {"requeued": 1}
    assert requeue_unstarted(now=at) == {}  # idempotent: nothing left to requeue
    job.refresh_from_db()
    assert job.state == "queued" and job.start_timeouts == 1 and job.retries == 0
    assert job.placement == [] and job.dispatched_at is None  # its GPUs are given back
    assert job.not_before == at + backoff(1)
    event = job.events.filter(kind="transition", from_state="admitted", to_state="queued").get()
    why = 'ImagePullBackOff: Back-off pulling image "pytorch:2.3"'
    assert event.reason == f"not running after the start timeout of {policy.start_timeout_seconds} s: {why}"
    assert k8s_api.get("jobs", name) is None  # taken off the cluster
    # Not admitted in its backoff; explain gives the pod's reason and until when.
    assert schedule_once(now=at).admitted == 0
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() + timedelta(minutes=1))
    job.refresh_from_db()
    with translation.override("en"):  # the text is read in English below
        text = readable(explain_job(job), fx.platform_admin())["text"]
    until = timezone.localtime(job.not_before).strftime("%H:%M")
    assert text == (f"It did not start within the start timeout ({why}): requeued, it waits out its "
                    f"backoff until {until}.")


def test_after_the_centres_number_of_start_timeouts_the_job_fails_with_the_reason(k8s_api, on_k8s):
    from django.utils import timezone

    from jobs.clusters.start_timeout import requeue_unstarted
    from jobs.models import Job
    from jobs.retries import retry_policy
    from jobs.retry_models import RetryPolicy

    flavor, _cluster, project = on_k8s
    RetryPolicy.objects.filter(pk=retry_policy().pk).update(max_start_timeouts=2)
    timeout = timedelta(seconds=retry_policy().start_timeout_seconds)
    job = _dispatched(project, flavor, workers=1, gpus=4, name="nofit", command="python train.py")
    name = f"gp-{job.pk}"
    nowhere = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    k8s_api.pod_pending(f"{name}-0-aaaaa", name, unschedulable=nowhere)
    assert requeue_unstarted(now=job.dispatched_at + timeout) == {"requeued": 1}
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))  # backoff over
    job = _redispatched(job)
    k8s_api.pod_pending(f"{name}-0-bbbbb", name, unschedulable=nowhere)
    assert requeue_unstarted(now=job.dispatched_at + timeout) == {"failed": 1}
    job.refresh_from_db()
    assert job.state == "failed" and job.start_timeouts == 2
    assert job.events.last().reason == f"not running after 2 start timeouts: Unschedulable: {nowhere}"


def _redispatched(job):
    from jobs.clusters import dispatch
    from jobs.scheduling.cycle import schedule_once

    assert schedule_once().admitted == 1
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    job.refresh_from_db()
    return job
