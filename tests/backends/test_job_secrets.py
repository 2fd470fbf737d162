"""Issue 32 item 17, through the Kubernetes API stand-in: a job may read only the Secrets its own
project declares (``ProjectSecret``), and jobs never run in the namespace that holds the portal's
own Secret (``gpupool-secrets``: DATABASE_URL, SECRET_KEY).

Before: a member's job with ``{"secret": "gpupool-secrets", "key": "DATABASE_URL"}`` (or another
project's Secret) was accepted, and the backend created it in namespace ``gpupool`` — the
portal's own, where that Secret lives — so the pod read the portal's database URL."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from jobs.clusters import dispatch
from jobs.clusters.backends.kubernetes import KubernetesBackend
from jobs.models import Job, JobEvent, ProjectSecret, backend_name
from jobs.reasons import reason_text
from jobs.scheduling.cycle import schedule_once
from portal.models import Membership, Role, User
from quotas import services as quota_services
from quotas.models import Cluster, Node
from quotas.queues import JOBS_NAMESPACE
from tests import factories as fx
from tests.backends import k8s_standin

pytestmark = pytest.mark.django_db

k8s_api = k8s_standin.k8s_api  # the fixture, under this module's name
PORTAL = "gpupool"  # the base manifests' namespace: gpupool-secrets lives there
PORTAL_SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "gpupool-secrets"},
                 "stringData": {"DATABASE_URL": "postgresql://portal", "SECRET_KEY": "x" * 50}}


@pytest.fixture
def pool(k8s_api, monkeypatch):
    """A Kubernetes cluster on the stand-in (its config names no namespace: the default), the
    portal's Secret in the portal's namespace, projects k1 and k2 with one member each."""
    monkeypatch.delenv("GPUPOOL_SECRETS_NAMESPACE", raising=False)
    k8s_api.add("secrets", PORTAL_SECRET, namespace=PORTAL)
    f = fx.flavor()
    config = {"host": k8s_api.url, "token": "t"}
    cluster = Cluster.objects.create(name="k8s", kind="kubernetes", config=config)
    Node.objects.create(cluster=cluster, name="gpu-a", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l")
    dept = fx.department("K")
    fx.quota(f, dept, 8)
    projects = {}
    for code in ("k1", "k2"):
        projects[code] = fx.project(code, dept)
        fx.quota(f, projects[code], 4)
        member = User.objects.create(username=f"{code}-member")
        Membership.objects.create(user=member, role=Role.MEMBER, project=projects[code])
    ProjectSecret.objects.create(project=projects["k1"], name="hf-token", note="Hugging Face")
    ProjectSecret.objects.create(project=projects["k2"], name="k2-token")
    fx.priority("training", 100)
    return f, cluster, projects


def _body(project, secret: str, key: str = "token") -> dict:
    return {"name": "train", "project": project.pk, "kind": "training", "flavor": "A100",
            "priority": "training", "image": "pytorch:2.3", "gpus_per_worker": 1, "max_runtime_seconds": 3600,
            "env": [{"name": "TOKEN", "secret": secret, "key": key}]}


def _namespaces(standin) -> set[str]:
    paths = [path for _method, path, _query in standin.requests if "/namespaces/" in path]
    return {path.split("/namespaces/")[1].split("/")[0] for path in paths}


def _secret_refs(manifest: dict) -> set[tuple[str, str]]:
    spec = manifest["spec"]["template"]["spec"]
    return {(e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
            for c in spec["containers"] for e in c.get("env", []) if "valueFrom" in e}


REFUSED = [("gpupool-secrets", "DATABASE_URL"), ("gpupool-secrets", "SECRET_KEY"), ("k2-token", "token"),
           ("never-declared", "token")]


@pytest.mark.parametrize(("secret", "key"), REFUSED)
def test_item17_a_member_cannot_reference_a_secret_its_project_does_not_declare(pool, api, k8s_api, secret,
                                                                                key):
    _f, _cluster, projects = pool
    member = api(User.objects.get(username="k1-member"))
    response = member.post("/api/v1/jobs/", _body(projects["k1"], secret, key), format="json")
    assert response.status_code == 400, response.content
    assert response.json() == {"env": [f"TOKEN: {secret} is not a secret of project k1."]}
    assert not Job.objects.exists() and not k8s_api.requests  # nothing reached the cluster


def test_item17_a_declared_secret_reaches_the_jobs_namespace_never_the_portals(pool, api, k8s_api):
    _f, _cluster, projects = pool
    member = api(User.objects.get(username="k1-member"))
    response = member.post("/api/v1/jobs/", _body(projects["k1"], "hf-token"), format="json")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    schedule_once()
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    created = k8s_api.get("jobs", backend_name(job.pk), namespace=JOBS_NAMESPACE)
    assert _secret_refs(created) == {("hf-token", "token")}
    assert _namespaces(k8s_api) == {JOBS_NAMESPACE} and JOBS_NAMESPACE != PORTAL
    assert k8s_api.get("jobs", backend_name(job.pk), namespace=PORTAL) is None


def test_item17_a_cluster_may_not_run_jobs_where_the_portals_secrets_are(pool, k8s_api, monkeypatch, english):
    """Saving such a cluster is refused (API and admin alike go through the model's check), and
    a cluster stored that way before (or written around the check) is refused by the backend
    itself: nothing is created. The namespace is the one the portal's pods run in
    (GPUPOOL_SECRETS_NAMESPACE, from the downward API), not a fixed name."""
    _f, cluster, projects = pool
    admin = fx.platform_admin()
    for config in ({"host": k8s_api.url, "namespace": PORTAL}, {"host": k8s_api.url, "namespace": PORTAL,
                                                                 "training_api": "volcano"}):
        with pytest.raises(ValidationError) as refused:
            quota_services.cluster_create(actor=admin, name="bad", kind="kubernetes", config=config)
        assert "holds the portal's own secrets" in refused.value.message_dict["config"][0]
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(admin)
    form = {"name": "k8s", "kind": "kubernetes", "description": "", "active": "on",
            "config": f'{{"host": "{k8s_api.url}", "namespace": "{PORTAL}"}}'}
    page = client.post(f"/admin/quotas/cluster/{cluster.pk}/change/", form)
    assert page.status_code == 200 and "holds the portal&#x27;s own secrets" in page.content.decode()
    simulated = {"simulated": True, "namespace": PORTAL}  # not a real cluster: nothing to refuse
    assert quota_services.cluster_create(actor=admin, name="sim", kind="kubernetes", config=simulated)

    job = fx.submit(projects["k1"], pool[0], gpus=1, name="j")
    stored = {"host": k8s_api.url, "token": "t", "namespace": PORTAL}
    Cluster.objects.filter(pk=cluster.pk).update(config=stored)
    schedule_once()
    with pytest.raises(ValueError, match="holds the portal's secrets"):
        dispatch.dispatch_job(job.pk)
    assert not k8s_api.requests
    with pytest.raises(ValueError, match="holds the portal's secrets"):
        KubernetesBackend(host=k8s_api.url, namespace=PORTAL)

    monkeypatch.setenv("GPUPOOL_SECRETS_NAMESPACE", "portal-ns")  # the portal installed elsewhere
    KubernetesBackend(host=k8s_api.url, namespace=PORTAL)  # no longer the portal's: allowed
    with pytest.raises(ValueError, match="'portal-ns' holds the portal's secrets"):
        KubernetesBackend(host=k8s_api.url, namespace="portal-ns")


def test_item17_a_secret_no_longer_declared_fails_the_job_at_dispatch(pool, k8s_api, english):
    """Checked at submission and again at dispatch: a declaration switched off since, or a job
    submitted before declarations existed, never reaches the cluster."""
    f, _cluster, projects = pool
    declared = [{"name": "T", "secret": "hf-token", "key": "k"}]
    job = fx.submit(projects["k1"], f, gpus=1, name="j", env=declared)
    older = fx.submit(projects["k1"], f, gpus=1, name="old")
    portal_db = [{"name": "DB", "secret": "gpupool-secrets", "key": "DATABASE_URL"}]
    Job.objects.filter(pk=older.pk).update(env=portal_db)
    ProjectSecret.objects.filter(name="hf-token").update(active=False)
    schedule_once()
    for stored, secret in ((job, "hf-token"), (older, "gpupool-secrets")):
        assert dispatch.dispatch_job(stored.pk) == "failed"
        stored.refresh_from_db()
        assert stored.state == "failed"
        event = JobEvent.objects.filter(job=stored, to_state="failed").get()
        assert reason_text(event.reason, event.reason_message) == (
            f"secret {secret} is not declared for project k1")
    assert not k8s_api.requests
