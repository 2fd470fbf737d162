"""External jobs (DESIGN §11): jobs submitted to a backend directly are recorded once, with the
backend's times, counted and placed around by the engine but never its victims, metered to the
second, and kept as observations while their source maps to no project."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import UsageRecord
from jobs.models import Job, JobKind
from jobs.native.backends.external import ExternalRecord
from jobs.native.external import PLACEHOLDER_USER, map_source, record_external
from jobs.native.models import ExternalSource
from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.snapshot import build_snapshot
from jobs.services import job_cancel
from jobs.states import JobState
from quotas.models import Cluster
from tests import factories as fx

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    """One 8-GPU node of cluster "hpc"; department D with project p (quota 8) mapped from the
    Slurm account "acct-p"."""
    f = fx.flavor()
    f.slurm_gres = "gpu:a100"
    f.save()
    node = fx.nodes(f, 1, 8, cluster="hpc")[0]
    cluster = Cluster.objects.get(name="hpc")
    dept = fx.department("D")
    proj = fx.project("p", dept)
    fx.quota(f, dept, 8)
    fx.quota(f, proj, 8)
    fx.priority()
    ExternalSource.objects.create(cluster=cluster, kind="slurm_account", name="acct-p", project=proj)
    return cluster, node, proj, f


def _rec(backend_id, phase, *, start=None, end=None, gpus=2, slots=(), source="acct-p", **kw):
    submitted = kw.pop("submitted", (start or timezone.now()) - timedelta(minutes=5))
    return ExternalRecord(
        backend_id=backend_id, name=f"job {backend_id}", source=source, user="alice", resource="gpu:a100",
        devices=gpus, phase=phase, submitted_at=submitted, started_at=start, finished_at=end, slots=slots,
        **kw,
    )


def _import(cluster, *records):
    return record_external(cluster, "slurm_account", records, time_source="slurm")


def test_a_finished_job_is_recorded_once_with_the_backend_times_and_metered_to_the_second(world):
    cluster, _node, proj, _f = world
    start = timezone.now().replace(microsecond=0) - timedelta(hours=3, minutes=17, seconds=11)
    end = start + timedelta(hours=2, seconds=41)
    record = _rec("101", "succeeded", start=start, end=end, gpus=4)
    assert _import(cluster, record).counts["created"] == 1
    assert _import(cluster, record).counts["created"] == 0  # idempotent: seen again, nothing new
    job = Job.objects.get(cluster=cluster, backend_id="101")
    assert (job.kind, job.state, job.project, job.external_user) == ("external", "succeeded", proj, "alice")
    assert job.submitted_by.username == PLACEHOLDER_USER  # no portal user "alice"
    assert (job.started_at, job.finished_at) == (start, end)
    assert list(job.events.values_list("to_state", "time_source").order_by("id")) == [
        ("queued", "slurm"), ("admitted", "slurm"), ("running", "slurm"), ("succeeded", "slurm")]
    usage_meter(now=end + timedelta(hours=2))
    total = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    assert total == Decimal((end - start).total_seconds() * 4)


def test_a_running_external_job_holds_its_gpus_is_pinned_and_a_portal_job_goes_around_it(world):
    cluster, node, proj, f = world
    start = timezone.now() - timedelta(minutes=10)
    _import(cluster, _rec("7", "running", start=start, gpus=6, slots=tuple((node.name, i) for i in range(6))))
    ext = Job.objects.get(backend_id="7")
    assert ext.state == JobState.RUNNING and len(ext.placement[0]) == 6
    running = {r.id: r for r in build_snapshot(timezone.now()).running}
    assert running[str(ext.pk)].pinned
    fits = fx.submit(proj, f, gpus=2, name="fits")
    waits = fx.submit(proj, f, gpus=4, name="waits", prio=fx.priority("high", 500))
    schedule_once()
    fits.refresh_from_db()
    waits.refresh_from_db()
    assert fits.state == JobState.ADMITTED
    assert {g for _n, g, _m in fits.placement[0]} == {6, 7}  # not the external job's GPUs
    # A higher priority of the same project does not preempt it (rule 6), nor does anyone reclaim it.
    assert waits.state == JobState.QUEUED
    ext.refresh_from_db()
    assert ext.state == JobState.RUNNING and ext.terminating_since is None


def test_an_external_shard_job_holds_and_is_billed_for_its_share_of_a_card(world):
    """A job submitted to Slurm with gres/shard (DESIGN §14) holds half of GPU 0, not all of it,
    and its card-seconds are half its running time."""
    cluster, node, _proj, _f = world
    start = timezone.now().replace(microsecond=0) - timedelta(hours=2)
    end = start + timedelta(minutes=30)
    _import(cluster, _rec("55", "running", start=start, gpus=1, slots=((node.name, 0),), gpu_milli=500))
    job = Job.objects.get(backend_id="55")
    assert job.gpu_milli == 500 and job.placement == [[[node.pk, 0, 500]]]
    _import(cluster, _rec("55", "succeeded", start=start, end=end, gpus=1, gpu_milli=500))
    usage_meter(now=end + timedelta(hours=2))
    total = UsageRecord.objects.filter(job=job).aggregate(s=Sum("card_seconds"))["s"]
    assert total == Decimal(30 * 60) / 2


def test_a_pending_external_job_is_listed_with_its_reason_but_never_admitted(world):
    cluster, _node, _proj, _f = world
    _import(cluster, _rec("9", "pending", reason="AssocGrpGRES"))
    schedule_once()
    job = Job.objects.get(backend_id="9")
    assert (job.state, job.message) == (JobState.QUEUED, "AssocGrpGRES")
    _import(cluster, _rec("9", "pending", reason="Priority"))
    job.refresh_from_db()
    assert job.message == "Priority"


def test_live_job_moves_through_its_states_with_backend_times(world):
    cluster, node, _proj, _f = world
    submitted = timezone.now() - timedelta(hours=1)
    _import(cluster, _rec("11", "pending", submitted=submitted))
    start = submitted + timedelta(minutes=20)
    slots = ((node.name, 0), (node.name, 1))
    _import(cluster, _rec("11", "running", start=start, submitted=submitted, slots=slots))
    job = Job.objects.get(backend_id="11")
    assert (job.state, job.started_at, job.admitted_at) == (JobState.RUNNING, start, start)
    admitted = job.events.get(to_state="admitted")
    assert (admitted.occurred_at, admitted.time_source) == (start, "slurm")  # the backend's start, too
    end = start + timedelta(minutes=7)
    _import(cluster, _rec("11", "failed", start=start, end=end, submitted=submitted, exit_code=3))
    job.refresh_from_db()
    assert (job.state, job.finished_at, job.exit_code, job.placement) == (JobState.FAILED, end, 3, [])


def test_unmapped_source_is_observed_and_mapping_it_records_its_history(world):
    cluster, _node, proj, _f = world
    start = timezone.now().replace(microsecond=0) - timedelta(days=2)
    stray = _rec("21", "succeeded", start=start, end=start + timedelta(hours=1), source="stray")
    out = _import(cluster, stray)
    assert out.unmapped == {"stray"} and out.counts["observed"] == 1
    assert not Job.objects.filter(backend_id="21").exists()
    source = ExternalSource.objects.get(name="stray")
    mapped = map_source(source=source, project=proj, actor=fx.platform_admin())
    assert mapped.counts["created"] == 1
    assert Job.objects.get(backend_id="21").project == proj
    assert not source.observations.exists()
    with pytest.raises(ValueError):
        map_source(source=source, project=proj, actor=fx.platform_admin())


def test_bad_records_are_refused_not_fixed(world):
    cluster, _node, _proj, _f = world
    start = timezone.now() - timedelta(hours=1)
    out = _import(cluster,
                  _rec("31", "succeeded", start=start, end=start - timedelta(seconds=1)),
                  _rec("32", "running", start=timezone.now() + timedelta(hours=1)),
                  _rec("33", "running", start=None))
    assert out.counts["refused"] == 3 and not Job.objects.filter(backend_id__in=["31", "32", "33"]).exists()


def test_an_external_job_cannot_be_cancelled_or_submitted_through_the_portal(world):
    cluster, _node, proj, f = world
    _import(cluster, _rec("41", "running", start=timezone.now() - timedelta(minutes=1)))
    job = Job.objects.get(backend_id="41")
    with pytest.raises(ValidationError):
        job_cancel(actor=fx.platform_admin(), job=job)
    with pytest.raises(ValidationError):
        fx.submit(proj, f, gpus=1, kind=JobKind.EXTERNAL)


def test_an_external_jobs_cpu_and_memory_are_what_it_holds_once_it_starts(world):
    """DESIGN §15: recorded as the backend reports them (what it asked while it waits), then
    what it was allocated when it starts."""
    cluster, node, _proj, _f = world
    _import(cluster, _rec("301", "pending", cpu_millicores=1_000, memory_mib=2_048))
    job = Job.objects.get(cluster=cluster, backend_id="301")
    assert (job.state, job.cpu_millicores, job.memory_mib) == (JobState.QUEUED, 1_000, 2_048)
    start = timezone.now().replace(microsecond=0)
    _import(cluster, _rec("301", "running", start=start, slots=((node.name, 0), (node.name, 1)),
                          cpu_millicores=24_000, memory_mib=253_952))
    job.refresh_from_db()
    assert (job.state, job.cpu_millicores, job.memory_mib) == (JobState.RUNNING, 24_000, 253_952)
    _import(cluster, _rec("302", "succeeded", start=start, end=start + timedelta(seconds=5)))
    assert Job.objects.get(cluster=cluster, backend_id="302").cpu_millicores is None  # not reported
