"""Backend times (issue 19, item 1; DESIGN §7 "Facts and corrections"): a job's running and ended
events carry the instants its backend stamped (``occurred_at``) and say whose clock they are
(``time_source``), beside the portal's ``recorded_at``; the meter bills by them, so how late the
portal polls changes nothing. Impossible backend times are refused, never clamped.

The simulator is a real server process and Kubernetes the stand-in API server, spoken to through
the official client (Slurm: tests/backends/test_slurm.py)."""

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import Sum
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.clusters import dispatch
from jobs.clusters.backends import base
from jobs.models import RECORDED_GAP, backend_name
from jobs.scheduling.cycle import schedule_once
from quotas.models import Cluster, Node
from tests import factories as fx
from tests.backends import k8s_standin
from tests.waiting import wait_until

pytestmark = pytest.mark.django_db
k8s_api = k8s_standin.k8s_api  # the fixture, under this module's name
LATE = 1.0  # s the portal waits, after the backend has finished a job, before it looks


def _event(job, to_state):
    return job.events.get(kind="transition", to_state=to_state)


def _ended_on_the_simulator(sim, jobs) -> dict[str, base.JobStatus]:
    """Wait until the simulator says every job ended (a final, durable state), then let the
    portal's poll come visibly late: the events must not depend on when it looks."""
    names = [backend_name(j.pk) for j in jobs]

    def ended():
        got = sim.backend().status(names)
        return got if all(st.phase == base.SUCCEEDED for st in got.values()) else None

    statuses = wait_until(ended, "the simulator to finish the jobs")
    time.sleep(LATE)
    return statuses


def test_simulator_times_become_the_events_and_job_times(sim_pool):
    f, cluster, pa, _pb, sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=50)
    schedule_once()
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    st = _ended_on_the_simulator(sim, [job])[backend_name(job.pk)]
    dispatch.sync_cluster(cluster.pk)  # one late poll sees it started *and* ended
    job.refresh_from_db()
    running, done = _event(job, "running"), _event(job, "succeeded")
    assert (running.occurred_at, running.time_source) == (st.started_at, "simulator")
    assert (done.occurred_at, done.time_source) == (st.finished_at, "simulator")
    assert (job.started_at, job.finished_at) == (st.started_at, st.finished_at)
    # The portal wrote both rows only at its poll, after the job had ended.
    assert running.recorded_at > st.finished_at and done.recorded_at > st.finished_at
    assert "time_rejected" not in running.data and "time_rejected" not in done.data
    # Events the portal decides itself stay on its clock.
    assert _event(job, "admitted").time_source == "portal"


def _card_seconds(job) -> Decimal:
    return UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"] or Decimal(0)


def _backend_card_seconds(job, st: base.JobStatus) -> Decimal:
    seconds = Decimal((st.finished_at - st.started_at) // timedelta(microseconds=1)) / 1_000_000
    return (job.workers * job.gpus_per_worker * job.flavor.card_fraction * seconds).quantize(Decimal("1e-6"))


def test_the_ledger_bills_the_simulators_times_not_the_portals_polls(sim_pool):
    """Issue 19, "The portal bills by its own clock": jobs polled late are billed for exactly the
    time the backend ran them."""
    f, cluster, pa, pb, sim = sim_pool
    jobs = [
        fx.submit(pa, f, gpus=8, sim_duration_seconds=50, name="a"),
        fx.submit(pb, f, gpus=4, workers=2, sim_duration_seconds=80, name="b"),
    ]
    assert schedule_once().admitted == 2
    for job in jobs:
        assert dispatch.dispatch_job(job.pk) == "dispatched"
    statuses = _ended_on_the_simulator(sim, jobs)
    dispatch.sync_cluster(cluster.pk)
    usage_meter(now=timezone.now() + timedelta(days=1))  # past every watermark
    for job in jobs:
        job.refresh_from_db()
        assert job.state == "succeeded"
        expected = _backend_card_seconds(job, statuses[backend_name(job.pk)])
        assert expected > 0
        assert _card_seconds(job) == expected


# -- impossible backend times: refused with the reason, the portal's clock instead


@pytest.fixture
def admitted_job():
    f, project = fx.single_project_pool()
    job = fx.submit(project, f, gpus=8)
    assert schedule_once().admitted == 1
    job.refresh_from_db()
    return job


def _apply(job, phase, *, started=None, finished=None):
    st = base.JobStatus(backend_name(job.pk), phase, started_at=started, finished_at=finished,
                        time_source="slurm")
    before = timezone.now()
    dispatch.apply_status(job, st)
    job.refresh_from_db()
    return before


def _refused(event, why):
    refused = event.data["time_rejected"]
    assert refused["why"] == why and refused["source"] == "slurm"
    assert event.time_source == "portal"
    return refused


def test_a_start_before_the_admission_is_refused(admitted_job):
    job = admitted_job
    early = job.admitted_at - timedelta(minutes=10)
    before = _apply(job, base.RUNNING, started=early)
    running = _event(job, "running")
    refused = _refused(running, "before_admission")
    assert refused["at"] == early.isoformat() and refused["bound"] == job.admitted_at.isoformat()
    assert running.occurred_at >= before and job.started_at == running.occurred_at


def test_a_time_in_the_future_is_refused(admitted_job):
    job = admitted_job
    before = _apply(job, base.RUNNING, started=timezone.now() + timedelta(hours=1))
    running = _event(job, "running")
    _refused(running, "future")
    assert running.occurred_at >= before


def test_a_time_a_little_ahead_within_the_clock_skew_is_believed(admitted_job):
    job = admitted_job
    ahead = timezone.now() + timedelta(seconds=2)
    _apply(job, base.RUNNING, started=ahead)
    running = _event(job, "running")
    assert (running.occurred_at, running.time_source, job.started_at) == (ahead, "slurm", ahead)


def test_an_end_before_the_start_is_refused(admitted_job):
    job = admitted_job
    start = job.admitted_at + timedelta(seconds=1)
    _apply(job, base.RUNNING, started=start)
    before = _apply(job, base.SUCCEEDED, started=start, finished=start - timedelta(microseconds=1))
    done = _event(job, "succeeded")
    assert _refused(done, "before_start")["bound"] == start.isoformat()
    assert done.occurred_at >= before and job.finished_at == done.occurred_at
    assert _event(job, "running").occurred_at == start  # the start stays the backend's


def test_a_time_without_zone_is_refused(admitted_job):
    job = admitted_job
    _apply(job, base.RUNNING, started=datetime.now(UTC).replace(tzinfo=None))
    _refused(_event(job, "running"), "no_zone")


# -- Kubernetes: the containers' start and finish, read through the official client


@pytest.fixture
def k8s_pool(k8s_api):
    f = fx.flavor()
    cluster = Cluster.objects.create(
        name="k8s-test", kind="kubernetes",
        config={"host": k8s_api.url, "namespace": "gpupool-jobs", "token": "t"},
    )
    Node.objects.create(cluster=cluster, name="gpu-a", flavor=f, gpu_count=8, zone="z", spine="s", leaf="l")
    dept = fx.department("K")
    project = fx.project("k1", dept)
    fx.quota(f, dept, 8)
    fx.quota(f, project, 8)
    return f, cluster, project, k8s_api


def test_kubernetes_container_times_become_the_events(k8s_pool):
    f, cluster, project, api = k8s_pool
    job = fx.submit(project, f, gpus=8)
    schedule_once()
    assert dispatch.dispatch_job(job.pk) == "dispatched"
    job.refresh_from_db()
    name = backend_name(job.pk)
    # The API server stamps whole seconds: the first whole second after the admission.
    start = job.admitted_at.replace(microsecond=0) + timedelta(seconds=1)
    end = start + timedelta(seconds=2)
    api.set_status("jobs", name, {"active": 1, "startTime": job.admitted_at.strftime("%Y-%m-%dT%H:%M:%SZ")})
    api.pod_running(f"{name}-0-abcde", name, "gpu-a", start)
    dispatch.sync_cluster(cluster.pk)
    job.refresh_from_db()
    running = _event(job, "running")
    assert (job.state, running.occurred_at, running.time_source, job.started_at) == (
        "running", start, "kubernetes", start)
    api.pod_terminated(f"{name}-0-abcde", name, "gpu-a", start, end)
    api.job_succeeded(name)
    dispatch.sync_cluster(cluster.pk)
    job.refresh_from_db()
    done = _event(job, "succeeded")
    assert (job.state, done.occurred_at, done.time_source, job.finished_at) == (
        "succeeded", end, "kubernetes", end)


def _page(client, path, language):
    client.post("/i18n/setlang/", {"language": language, "next": path})
    response = client.get(path)
    assert response.status_code == 200
    return response.content.decode()


def test_the_job_page_says_whose_clock_each_time_is(sim_pool, client):
    f, cluster, pa, _pb, sim = sim_pool
    job = fx.submit(pa, f, gpus=8, sim_duration_seconds=50)
    schedule_once()
    dispatch.dispatch_job(job.pk)
    _ended_on_the_simulator(sim, [job])
    time.sleep(RECORDED_GAP.total_seconds() + 1)  # a poll later than the page's threshold
    dispatch.sync_cluster(cluster.pk)
    client.force_login(fx.platform_admin())
    page = _page(client, f"/jobs/{job.pk}/", "en")
    assert "simulator" in page and "portal clock" in page
    # The two backend-timed rows were recorded at the late poll: both clocks are shown for them.
    assert page.count("<small class=\"muted\">recorded <time") == 2
    chinese = _page(client, f"/jobs/{job.pk}/", "zh-hans")
    assert "模拟器" in chinese and "门户时钟" in chinese and chinese.count("记录于 <time") == 2
