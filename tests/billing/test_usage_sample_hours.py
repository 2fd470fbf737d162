"""The usage explorer's utilisation reads each job's GPU samples summed per UTC hour
(``jobs.GpuSampleHour``, issue 24), kept by triggers on the samples, and the samples themselves
only for the parts of hours at the range's edges: its figures equal the GROUP BY over every
sample of the range that the explorer ran before (``per_sample``, the reference) — on
samples across hours and local midnights, minutes overwritten by the poller's upsert, three
flavors (whole, 1/7 MIG, a 250-milli share) and several groupings, in the site's zone and in a
+05:30 zone whose midnights fall at half past a UTC hour."""

from __future__ import annotations

import threading
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from billing import usage
from jobs.clusters.metrics import upsert_samples
from jobs.models import GpuSampleHour, Job, JobGpuSample
from jobs.sample_hours import rebuild
from tests.waiting import wait_until

from .conftest import History, local
from .per_sample import per_sample_figures

pytestmark = pytest.mark.django_db

GROUPINGS = [("department",), ("project", "user"), ("flavor", "kind"), ("priority", "project")]
KOLKATA = ZoneInfo("Asia/Kolkata")  # +05:30: its midnight is at half past a UTC hour


def _days(zone, *spans) -> list[tuple[datetime, datetime]]:
    return [(datetime(*first, tzinfo=zone).astimezone(UTC), datetime(*last, tzinfo=zone).astimezone(UTC))
            for first, last in spans]


SHANGHAI_RANGES = [(local(*first), local(*last)) for first, last in (
    ((2026, 11, 1), (2026, 12, 1)), ((2026, 11, 5), (2026, 11, 6)), ((2026, 11, 6), (2026, 11, 7)),
    ((2026, 11, 6), (2026, 11, 8)))]
KOLKATA_RANGES = _days(KOLKATA, ((2026, 11, 1), (2026, 12, 1)), ((2026, 11, 5), (2026, 11, 6)),
                       ((2026, 11, 6), (2026, 11, 7)), ((2026, 11, 5), (2026, 11, 8)))


def _minutes(job, first: datetime, count: int, *, every: int = 1, gpus: int = 1) -> list[JobGpuSample]:
    """``count`` samples from ``first``, ``every`` minutes apart, at uneven utilisations."""
    return [JobGpuSample(job=job, minute=first + timedelta(minutes=m * every), gpus=gpus, fb_used_mib=1024,
                         gpu_util_pct=(m * 37 % 100) + 0.3)
            for m in range(count)]


@pytest.fixture
def samples(world, flavors):
    """Samples of three jobs across the local midnights of the 5th/6th and 6th/7th (Shanghai and
    Kolkata), of three flavors, in three projects, two kinds; some minutes overwritten."""
    whole, mig, shared = flavors
    history = History(world)
    jobs = {
        "two": history.job(world.pa1, whole, gpus=2, submitted=local(2026, 11, 5, 20)),
        "mig": history.job(world.pb, mig, user=world.users["pb_member"], submitted=local(2026, 11, 5)),
        "share": history.job(world.pa, shared, milli=250, user=world.users["a_admin"],
                             submitted=local(2026, 11, 6, 20)),
    }
    Job.objects.filter(pk=jobs["share"].pk).update(kind="inference")
    JobGpuSample.objects.bulk_create([
        *_minutes(jobs["two"], local(2026, 11, 5, 21, 17), 9 * 60, gpus=2),  # over both midnights' hours
        *_minutes(jobs["mig"], local(2026, 11, 5, 1, 3), 430, every=7),  # 50 hours, sparse
        *_minutes(jobs["share"], local(2026, 11, 6, 21, 30), 5 * 60 + 1),
    ])
    _poll([(jobs["two"].pk, local(2026, 11, 5, 23) + timedelta(minutes=m), 1.7, 2048, 1)
           for m in range(0, 90, 3)])
    return jobs


def _poll(rows) -> None:
    """The poller's statement (jobs.clusters.metrics), one per minute: an upsert of the jobs' samples,
    overwriting a minute seen."""
    minutes = defaultdict(dict)
    for job, minute, util, fb, gpus in rows:
        minutes[minute][job] = (util, fb, gpus)
    for minute, samples in minutes.items():
        upsert_samples(minute, samples)


def _explorer(world, start, end, group_by) -> dict[tuple, tuple[Decimal, Decimal]]:
    report = usage.usage_report(world.users["platform"], usage.UsageQuery(start, end, group_by), "CNY")
    found = {r.key: (r.sampled_card_hours, r.effective_card_hours)
             for r in report.rows if r.sampled_card_hours is not None}
    if report.total.sampled_card_hours is not None:
        found[(None,) * len(group_by)] = (report.total.sampled_card_hours, report.total.effective_card_hours)
    return found


def _assert_equal_to_the_reference(world, ranges):
    for start, end in ranges:
        for group_by in GROUPINGS:
            expected = per_sample_figures(start, end, group_by)
            assert expected, (start, group_by)  # every range has samples
            assert _explorer(world, start, end, group_by) == expected, (start, end, group_by)


def _kept() -> list[tuple]:
    return sorted((h.job_id, h.hour, h.gpus, round(h.gpu_util, 6)) for h in GpuSampleHour.objects.all())


def _from_the_samples() -> list[tuple]:
    """Each job's hours summed in Python from the samples as they stand."""
    sums = defaultdict(lambda: [0, 0.0])
    for s in JobGpuSample.objects.all():
        key = (s.job_id, s.minute.astimezone(UTC).replace(minute=0, second=0, microsecond=0))
        sums[key][0] += s.gpus
        sums[key][1] += s.gpus * s.gpu_util_pct
    return sorted((job, hour, gpus, round(util, 6)) for (job, hour), (gpus, util) in sums.items())


def test_the_figures_equal_the_samples_of_the_range(world, samples):
    _assert_equal_to_the_reference(world, SHANGHAI_RANGES)


def test_a_half_hour_zone_reads_the_edges_from_the_samples(world, samples):
    """Kolkata's days start at 18:30 UTC: the half hours at both edges of each range come from the
    samples (the roll-up's hours 18:00–19:00 hold minutes of both days)."""
    with override_settings(TIME_ZONE="Asia/Kolkata"):
        _assert_equal_to_the_reference(world, KOLKATA_RANGES)


def test_whole_hours_do_not_read_the_samples(world, samples):
    start, end = SHANGHAI_RANGES[0]
    with CaptureQueriesContext(connection) as queries:
        usage.usage_report(world.users["platform"], usage.UsageQuery(start, end, ("project",)), "CNY")
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "jobs_gpusamplehour" in sql
    assert "jobs_jobgpusample" not in sql
    with override_settings(TIME_ZONE="Asia/Kolkata"), CaptureQueriesContext(connection) as queries:
        start, end = KOLKATA_RANGES[1]
        usage.usage_report(world.users["platform"], usage.UsageQuery(start, end, ("project",)), "CNY")
    assert "jobs_jobgpusample" in " ".join(q["sql"] for q in queries.captured_queries)


def test_the_trigger_keeps_the_hours_on_insert_overwrite_and_bulk_create(world, flavors, history):
    job = history.job(world.pa1, flavors[0], gpus=4, submitted=local(2026, 11, 5))
    other = history.job(world.pb, flavors[0], submitted=local(2026, 11, 5))
    first, ten = local(2026, 11, 5, 10, 59), local(2026, 11, 5, 10)
    JobGpuSample.objects.create(job=job, minute=first, gpus=4, gpu_util_pct=80.0, fb_used_mib=1)
    assert _kept() == [(job.pk, ten, 4, 320.0)]
    # One poll: the job's minute overwritten (the UPDATE trigger), the other's written (INSERT).
    upsert_samples(first, {job.pk: (10.0, 1.0, 3), other.pk: (50.5, 1.0, 4)})
    assert _kept() == sorted([(job.pk, ten, 3, 30.0), (other.pk, ten, 4, 202.0)])
    JobGpuSample.objects.bulk_create(_minutes(job, first + timedelta(minutes=1), 150, gpus=4))
    JobGpuSample.objects.filter(job=job, minute__gte=local(2026, 11, 5, 12, 30)).update(gpu_util_pct=99.0)
    assert _kept() == _from_the_samples()
    assert len(_kept()) == 5  # the other's 10:59; the job's 10:59, 11:00–11:59, 12:00–12:59, 13:00–13:29
    JobGpuSample.objects.filter(job=job, minute__gte=local(2026, 11, 5, 13)).delete()
    assert _kept() == _from_the_samples()
    assert len(_kept()) == 4


def test_a_deleted_jobs_hours_go_with_it(world, samples):
    """Deleting a job deletes its samples (cascade), and the trigger its hours. (Only a job without
    events can be deleted: the event log is append-only.)"""
    gone = Job.objects.create(name="gone", project=world.pa1, submitted_by=world.users["pa1_member"],
                              kind="training", flavor=world.F, priority_class=samples["two"].priority_class,
                              image="img", state="queued", state_changed_at=local(2026, 11, 5),
                              submitted_at=local(2026, 11, 5))
    JobGpuSample.objects.bulk_create(_minutes(gone, local(2026, 11, 5, 9, 30), 90))
    assert GpuSampleHour.objects.filter(job_id=gone.pk).count() == 2  # 9:30–9:59, 10:00–10:59
    gone.delete()
    assert not GpuSampleHour.objects.filter(job_id=gone.pk).exists()
    assert _kept() == _from_the_samples()
    assert GpuSampleHour.objects.filter(job_id=samples["two"].pk).exists()


def test_the_backfill_builds_what_the_trigger_kept(samples):
    kept = _kept()
    assert kept == _from_the_samples()
    rebuild()
    assert _kept() == kept


def _someone_waits_for_me() -> bool:
    with connection.cursor() as cursor:  # pg_locks is read live, not from a transaction's snapshot
        cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted"
                       " AND pg_backend_pid() = ANY(pg_blocking_pids(pid))")
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_two_writers_of_one_hour_both_count(world, flavors, history):
    """Two polls of one hour in flight at once (a slow poll and the next minute's): the second
    one's recount cannot see the first's uncommitted sample; without the trigger's lock it waited
    only for the first's hour row and then overwrote it with a sum missing that sample."""
    job = history.job(world.pa1, flavors[0], submitted=local(2026, 11, 5))
    ten = local(2026, 11, 5, 10)
    second = threading.Thread(target=_in_its_own_connection,
                              args=(upsert_samples, ten + timedelta(minutes=2), {job.pk: (20.0, 1.0, 1)}))
    with transaction.atomic():
        upsert_samples(ten + timedelta(minutes=1), {job.pk: (60.0, 1.0, 1)})
        second.start()
        wait_until(_someone_waits_for_me, "the second poll to wait for the first")  # it waits until we commit
    second.join(timeout=120)
    assert _kept() == [(job.pk, ten, 2, 80.0)] == _from_the_samples()


def _in_its_own_connection(call, *args) -> None:
    try:
        call(*args)
    finally:
        connection.close()
