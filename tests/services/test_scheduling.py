"""``schedule_once`` on PostgreSQL: the worked examples of DESIGN §3 end to end, event rows,
explain, usage, and no over-admission under concurrent cycles and cancels."""

import threading
from collections import Counter, defaultdict

import pytest
from django.db import close_old_connections, connection
from django.urls import reverse

from jobs.models import Job, JobEvent
from jobs.scheduling.cycle import schedule_once
from jobs.services import job_cancel
from jobs.states import HOLDING
from tests import factories as fx

pytestmark = pytest.mark.django_db


def _state(job):
    job.refresh_from_db()
    return job.state


@pytest.fixture
def two_departments():
    """C = 16 (2 nodes × 8); departments A and B with q = 8, one project each with q = 8."""
    f = fx.flavor()
    fx.nodes(f, 2)
    a, b = fx.department("A"), fx.department("B")
    pa, pb = fx.project("pa", a), fx.project("pb", b)
    qa, qb = fx.quota(f, a, 8), fx.quota(f, b, 8)
    fx.quota(f, pa, 8)
    fx.quota(f, pb, 8)
    return f, pa, pb, qa, qb


def test_reclaim_example_preempts_the_on_loan_job(two_departments):
    f, pa, pb, _, _ = two_departments
    b1, b2 = fx.submit(pb, f, name="b1"), fx.submit(pb, f, name="b2")
    assert schedule_once().admitted == 2
    b1.refresh_from_db(), b2.refresh_from_db()
    assert sorted([b1.on_loan, b2.on_loan]) == [False, True]
    loaned = b1 if b1.on_loan else b2
    a1 = fx.submit(pa, f, name="a1")
    report = schedule_once()
    assert report.admitted == 1 and report.preempted == 1
    assert _state(a1) == "admitted" and a1.on_loan is False
    loaned.refresh_from_db()
    assert loaned.terminating_since is not None
    signal = JobEvent.objects.get(job=loaned, kind="preemption_signal")
    assert signal.reason == f"reclaim for job {a1.pk}"
    # The victim's row comes first: a victim's cancel racing the cycle lands before the admission
    # that relies on it, as the concurrency run's replay of the log needs (concurrency_checks).
    assert signal.pk < JobEvent.objects.get(job=a1, to_state="admitted").pk


def test_lend_limit_example_holds_back_capacity(two_departments):
    f, pa, _, _, qb = two_departments
    qb.lend_limit = 4
    qb.save()
    fx.submit(pa, f, name="a8")
    a4 = fx.submit(pa, f, gpus=4, name="a4")
    a4b = fx.submit(pa, f, gpus=4, name="a4b")
    schedule_once()
    assert (_state(a4), a4.on_loan) == ("admitted", True)
    assert _state(a4b) == "queued"  # 12 + 4 + hold 4 > 16
    response = _explain(a4b)
    assert response["reason"] == "lend_limit" and response["position"] == 1


def test_overcommit_example_waits_and_never_reclaims():
    f = fx.flavor()
    fx.nodes(f, 1)
    d = fx.department("D")
    p1, p2 = fx.project("p1", d), fx.project("p2", d)
    fx.quota(f, d, 8, ratio="1.5")
    fx.quota(f, p1, 6)
    fx.quota(f, p2, 6)
    fx.submit(p1, f, gpus=6, name="p1-6")
    schedule_once()
    four, two = fx.submit(p2, f, gpus=4, name="p2-4"), fx.submit(p2, f, gpus=2, name="p2-2")
    report = schedule_once()
    assert report.preempted == 0
    assert _state(four) == "queued" and _state(two) == "admitted"


def _explain(job):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    response = client.get(reverse("api:job-explain", args=[job.pk]))
    assert response.status_code == 200
    return response.json()


def test_every_admission_is_an_event_row(two_departments):
    f, pa, _, _, _ = two_departments
    jobs = [fx.submit(pa, f, gpus=2, name=f"j{i}") for i in range(6)]
    schedule_once()
    admitted = Job.objects.filter(state="admitted")
    events = JobEvent.objects.filter(kind="transition", to_state="admitted")
    assert admitted.count() == events.count() == 6
    assert set(events.values_list("job_id", flat=True)) == {j.pk for j in jobs}


def test_explain_is_404_for_another_tenant(two_departments, world_free_user):
    f, pa, _, _, _ = two_departments
    job = fx.submit(pa, f, gpus=8, workers=2, name="big")
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(world_free_user)
    assert client.get(reverse("api:job-explain", args=[job.pk])).status_code == 404


@pytest.fixture
def world_free_user():
    from portal.models import User

    return User.objects.create_user(username="stranger")


def test_quota_usage_reports_borrowed_and_lent(two_departments):
    f, pa, pb, _, _ = two_departments
    fx.submit(pb, f, name="b1")
    fx.submit(pb, f, name="b2")
    schedule_once()
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    body = client.get(reverse("api:quota-usage"), {"flavor": f.name}).json()
    rows = {(r["kind"], r["owner_id"]): r for r in body["nodes"]}
    b_row = rows[("department", pb.department_id)]
    a_row = rows[("department", pa.department_id)]
    assert (b_row["used"], b_row["in_quota"], b_row["borrowed"]) == ("16.000", "8.000", "8.000")
    assert (a_row["used"], a_row["lent"]) == ("0.000", "8.000")


def _overcommitted():
    """Per GPU, Σ milli of jobs holding GPUs must never exceed 1000."""
    per_gpu = defaultdict(int)
    for placement in Job.objects.filter(state__in=list(HOLDING)).values_list("placement", flat=True):
        for worker in placement:
            for node, gpu, milli in worker:
                per_gpu[(node, gpu)] += milli
    return {k: v for k, v in per_gpu.items() if v > 1000}


@pytest.mark.django_db(transaction=True)
def test_concurrent_cycles_and_cancels_never_over_admit():
    f = fx.flavor()
    fx.nodes(f, 4)
    d = fx.department("D")
    p = fx.project("p", d)
    fx.quota(f, d, 32)
    fx.quota(f, p, 32)
    jobs = [fx.submit(p, f, gpus=4, name=f"j{i}") for i in range(40)]
    errors = []

    def cycles():
        try:
            for _ in range(5):
                schedule_once()
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            close_old_connections()
            connection.close()

    def cancels():
        try:
            for job in jobs[::3]:
                try:
                    job_cancel(actor=fx.platform_admin(), job=job)
                except Exception as exc:  # a job already admitted may still be cancelled; others refuse
                    errors.append(exc) if "cannot be cancelled" not in str(exc) else None
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=cycles) for _ in range(3)] + [threading.Thread(target=cancels)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    assert _overcommitted() == {}
    holding = Job.objects.filter(state__in=list(HOLDING))
    assert sum(j.workers * j.gpus_per_worker for j in holding) <= 32
    states = Counter(Job.objects.values_list("state", flat=True))
    assert states["admitted"] == 8
    # One admission event per admitted job, never two.
    per_job = Counter(JobEvent.objects.filter(to_state="admitted").values_list("job_id", flat=True))
    assert max(per_job.values()) == 1


def test_budget_hold_keeps_unapproved_jobs_waiting(two_departments):
    from jobs.scheduling import config

    f, pa, _, _, _ = two_departments
    held = fx.submit(pa, f, gpus=1, name="held")
    approved = fx.submit(pa, f, gpus=1, name="approved")
    approved.approved = True
    approved.save(update_fields=["approved"])
    provider = lambda now: {f"p{pa.pk}"}  # noqa: E731 - billing registers a real provider
    config.over_budget_providers.append(provider)
    try:
        schedule_once()
    finally:
        config.over_budget_providers.remove(provider)
    assert _state(held) == "queued" and _state(approved) == "admitted"
    assert _explain(held)["reason"] == "budget"


def test_department_usage_counts_projects_without_a_quota_node(two_departments):
    f, pa, _, _, _ = two_departments
    unquoted = fx.project("pa-extra", pa.department)  # no quota node: it can only borrow
    fx.submit(unquoted, f, gpus=2, name="borrower")
    schedule_once()
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_authenticate(fx.platform_admin())
    rows = {
        (r["kind"], r["owner_id"]): r
        for r in client.get(reverse("api:quota-usage"), {"flavor": f.name}).json()["nodes"]
    }
    a_row = rows[("department", pa.department_id)]
    assert (a_row["used"], a_row["borrowed"]) == ("2.000", "2.000")


def test_one_dry_cycle_explains_every_waiting_job_past_the_cached_head(monkeypatch):
    """Jobs past the head the cycle caches get their explanation from a dry cycle; that cycle's
    answers are cached for every waiting job, so the next status page does not run another."""
    from django.core.cache import cache

    from jobs.scheduling import cycle as scheduling

    f, p = fx.single_project_pool()
    jobs = [fx.submit(p, f, gpus=8, name=f"j{i}") for i in range(5)]
    monkeypatch.setattr(scheduling, "EXPLAIN_HEAD", 1)  # a small head, as 100 of 30,000 is
    schedule_once()
    waiting = jobs[1:]
    assert cache.get(f"explain:{waiting[0].pk}") is not None  # the head
    for job in waiting[1:]:
        cache.delete(f"explain:{job.pk}")
    cycles = []
    monkeypatch.setattr(scheduling, "schedule",
                        lambda snap, **flags: cycles.append(1) or _real_schedule(snap, **flags))
    assert _explain(waiting[3])["position"] == 4
    assert [_explain(job)["position"] for job in waiting[1:3]] == [2, 3]
    assert len(cycles) == 1
    assert cache.get(scheduling.DRY_LOCK_KEY) is None  # released


def _real_schedule(snapshot, **flags):
    from jobs.scheduler.scheduler import schedule

    return schedule(snapshot, **flags)


def test_a_cycle_caches_every_waiting_jobs_explanation_once_a_minute(
    monkeypatch, django_capture_on_commit_callbacks
):
    from django.core.cache import cache

    from jobs.scheduling import cycle as scheduling

    f, p = fx.single_project_pool()
    jobs = [fx.submit(p, f, gpus=8, name=f"j{i}") for i in range(4)]
    monkeypatch.setattr(scheduling, "EXPLAIN_HEAD", 1)
    cache.delete(scheduling.EXPLAIN_ALL_KEY)
    with django_capture_on_commit_callbacks(execute=True):  # the rest is written after the commit
        schedule_once()
    keys = [f"explain:{job.pk}" for job in jobs[1:]]
    assert [cache.get(k)["position"] for k in keys] == [1, 2, 3]  # everyone, not just the head
    cache.delete_many(keys)
    with django_capture_on_commit_callbacks(execute=True):
        schedule_once()  # within the minute: the head only
    assert [cache.get(k) is not None for k in keys] == [True, False, False]


# -- issue 18 item 3: a job's workers run inside one cluster --------------------------------
def _two_clusters(sim_url: str = ""):
    """Clusters c1 and c2 of one 8-GPU node each, named alike (a100-0 in z1/s0/l0); project p
    of department D owns all 16 GPUs."""
    from quotas.models import Cluster

    f = fx.flavor()
    Cluster.objects.create(name="c1", kind="simulator", config={})
    c2 = Cluster.objects.create(name="c2", kind="simulator", config={"url": sim_url} if sim_url else {})
    fx.nodes(f, 1, cluster="c1")
    fx.nodes(f, 1, cluster="c2")
    return f, c2


def _cordoned_node_on_c2(f):
    """A second c2 node, cordoned: it counts in what a job could ever get (a 16-GPU gang is
    accepted, issue 18 item 4) but nothing is placed on it until it is ready again."""
    from quotas.models import Node

    (node,) = fx.nodes(f, 1, cluster="c2")
    Node.objects.filter(pk=node.pk).update(state="cordoned")
    return node


def _uncordon(node) -> None:
    from quotas.models import Node

    Node.objects.filter(pk=node.pk).update(state="ready")


def _clusters_of(job) -> set[str]:
    from quotas.models import Node

    job.refresh_from_db()
    ids = {node for worker in job.placement for node, _, _ in worker}
    return set(Node.objects.filter(pk__in=ids).values_list("cluster__name", flat=True))


def test_item3_a_gang_waits_rather_than_span_two_clusters_then_runs_whole_in_one(simserver):
    from jobs.clusters import dispatch
    from jobs.clusters.backends.base import NodeInfo

    f, c2 = _two_clusters(simserver.url)
    d = fx.department("D")
    p = fx.project("p", d)
    fx.quota(f, d, 16)
    fx.quota(f, p, 16)
    spare = _cordoned_node_on_c2(f)
    gang = fx.submit(p, f, workers=2, gpus=8, name="gang")
    report = schedule_once()
    assert (report.admitted, _state(gang)) == (0, "queued")
    why = _explain(gang)
    assert why["reason"] == "capacity" and "one cluster" in why["message"]
    assert why["numbers"] == {"per_worker": 8, "workers": 2, "largest_cluster": 8}
    assert not JobEvent.objects.filter(job=gang, kind="transition", to_state="failed").exists()
    _uncordon(spare)  # c2 now has two free nodes
    simserver.backend().set_inventory(
        [NodeInfo(n.name, f.name, 8, "ready", n.zone, n.spine, n.leaf) for n in c2.nodes.all()]
    )
    assert schedule_once().admitted == 1
    assert _state(gang) == "admitted" and _clusters_of(gang) == {"c2"}
    assert len(gang.placement) == 2
    assert dispatch.dispatch_job(gang.pk) == "dispatched"
    gang.refresh_from_db()
    assert gang.cluster == c2


def test_item3_reclaim_never_takes_victims_in_two_clusters():
    """b borrows both nodes, one per cluster; a's in-quota gang would need both victims and
    then still spans two clusters: nobody is preempted. Once c2 has a free node, reclaiming
    the one job on c2 is enough, and the job on c1 keeps running."""
    f, _ = _two_clusters()
    a, b = fx.department("A"), fx.department("B")
    pa, pb = fx.project("pa", a), fx.project("pb", b)
    fx.quota(f, a, 16)
    fx.quota(f, pa, 16)
    spare = _cordoned_node_on_c2(f)
    b1, b2 = fx.submit(pb, f, name="b1"), fx.submit(pb, f, name="b2")
    assert schedule_once().admitted == 2
    gang = fx.submit(pa, f, workers=2, gpus=8, name="gang")
    report = schedule_once()
    assert (report.admitted, report.preempted) == (0, 0)
    assert Job.objects.filter(pk__in=[b1.pk, b2.pk], terminating_since__isnull=False).count() == 0
    assert _explain(gang)["reason"] == "capacity"
    _uncordon(spare)
    report = schedule_once()
    assert (report.admitted, report.preempted) == (1, 1)
    on_c2 = b1 if _clusters_of(b1) == {"c2"} else b2
    stays = b2 if on_c2 is b1 else b1
    on_c2.refresh_from_db(), stays.refresh_from_db()
    assert on_c2.terminating_since is not None and stays.terminating_since is None
    assert _state(gang) == "admitted" and _clusters_of(gang) == {"c2"}
