"""The usage explorer's queue waits come from ``jobs.AdmissionWait`` (issue 24), kept by a trigger on
the event log: its figures equal the window over the events that the explorer ran at each request
before (``_PER_REQUEST`` below, the reference), on admissions whose waits cross local midnights, a
requeued job admitted twice, a flavor chosen at admission, a late queue entry and a late
admission — and the migration's backfill builds the same rows as the trigger."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from billing import usage
from jobs.models import AdmissionWait, Job, JobEvent
from jobs.waits import rebuild
from quotas.models import Flavor

from .conftest import History, local

pytestmark = pytest.mark.django_db

# The explorer's query before the roll-up: the window over the range's admitted jobs' events.
_PER_REQUEST = """
SELECT {keys}, count(*), avg(w.minutes), percentile_cont(0.95) WITHIN GROUP (ORDER BY w.minutes)
FROM (
    SELECT e.job_id, e.to_state, e.occurred_at,
           (extract(epoch FROM e.occurred_at - max(e.occurred_at) FILTER (WHERE e.to_state = 'queued')
                OVER (PARTITION BY e.job_id ORDER BY e.occurred_at, e.id)) / 60)::float8 AS minutes
    FROM jobs_jobevent e
    WHERE e.kind = 'transition' AND e.to_state IN ('queued', 'admitted')
      AND e.job_id IN (SELECT a.job_id FROM jobs_jobevent a
                       WHERE a.kind = 'transition' AND a.to_state = 'admitted'
                         AND a.occurred_at >= %(start)s AND a.occurred_at < %(end)s)
) w
JOIN jobs_job j ON j.id = w.job_id
JOIN portal_project p ON p.id = j.project_id
WHERE w.to_state = 'admitted' AND w.occurred_at >= %(start)s AND w.occurred_at < %(end)s
  AND w.minutes IS NOT NULL
GROUP BY GROUPING SETS (({keys}), ())
"""
GROUPINGS = [("department",), ("project", "user"), ("flavor", "kind"), ("priority", "project")]
RANGES = [
    ((2026, 11, 1), (2026, 12, 1)),
    ((2026, 11, 6), (2026, 11, 7)),  # admissions just after local midnight, queued the day before
    ((2026, 11, 5), (2026, 11, 6)),
    ((2026, 11, 7), (2026, 11, 9)),
]


def _reference(start, end, group_by) -> dict[tuple, tuple[int, float, float]]:
    keys = ", ".join(usage.DIMENSIONS[g][1] for g in group_by)
    with connection.cursor() as cursor:
        cursor.execute(_PER_REQUEST.format(keys=keys), {"start": start, "end": end})
        rows = cursor.fetchall()
    levels = len(group_by)
    return {tuple(r[:levels]): (r[levels], r[levels + 1], r[levels + 2]) for r in rows if r[levels]}


def _explorer(world, start, end, group_by) -> dict[tuple, tuple[int, float, float]]:
    report = usage.usage_report(world.users["platform"], usage.UsageQuery(start, end, group_by), "CNY")
    found = {r.key: (r.jobs_started, r.wait_mean_minutes, r.wait_p95_minutes)
             for r in report.rows if r.jobs_started}
    if report.total.jobs_started:
        found[(None,) * len(group_by)] = (
            report.total.jobs_started, report.total.wait_mean_minutes, report.total.wait_p95_minutes)
    return found


def _assert_equal_to_the_reference(world):
    for first, last in RANGES:
        start, end = local(*first), local(*last)
        for group_by in GROUPINGS:
            expected, found = _reference(start, end, group_by), _explorer(world, start, end, group_by)
            assert set(found) == set(expected), (first, group_by)
            for key, (count, mean, p95) in expected.items():
                assert found[key][0] == count
                assert found[key][1:] == (pytest.approx(mean, abs=1e-9), pytest.approx(p95, abs=1e-9))


@pytest.fixture
def waits(world):
    """Waits across local midnights (Asia/Shanghai), in three projects, two kinds, two flavors."""
    history = History(world)
    other = Flavor.objects.create(name="G", vendor="nvidia", model="Other GPU", memory_mib=2048,
                                  k8s_resource_name="nvidia.com/gpu")
    jobs = {}
    # Queued 23:50 on the 5th, admitted 00:20 on the 6th: 30 minutes over midnight.
    jobs["night"] = history.job(world.pa1, world.F, submitted=local(2026, 11, 5, 23, 50))
    history.admit(jobs["night"], local(2026, 11, 6, 0, 20))
    # Admitted, preempted and requeued, admitted again the next day on the alternative flavor.
    jobs["twice"] = history.job(world.pb, world.F, submitted=local(2026, 11, 6, 9),
                                user=world.users["pb_member"])
    history.admit(jobs["twice"], local(2026, 11, 6, 9, 5))
    history.start(jobs["twice"], local(2026, 11, 6, 9, 6))
    history.end(jobs["twice"], local(2026, 11, 6, 22), state="preempted")
    history.admit(jobs["twice"], local(2026, 11, 7, 1, 15), flavor=other)
    # An inference job of a_admin in pa, a wait of a few seconds on the 8th.
    jobs["short"] = history.job(world.pa, world.F, submitted=local(2026, 11, 8, 12),
                                user=world.users["a_admin"])
    Job.objects.filter(pk=jobs["short"].pk).update(kind="inference")
    history.admit(jobs["short"], local(2026, 11, 8, 12, 0, 7))
    # Queued, never admitted: no admission, no row.
    history.job(world.pa1, world.F, submitted=local(2026, 11, 6, 3))
    for minutes in (3, 61, 400):  # more admissions, for a percentile between values
        job = history.job(world.pa1, world.F, submitted=local(2026, 11, 6, 12))
        history.admit(job, local(2026, 11, 6, 12) + timedelta(minutes=minutes))
    return jobs


def test_the_admissions_rows_equal_the_window_over_the_events(world, waits):
    assert AdmissionWait.objects.count() == 7  # the second admission of "twice" included
    assert AdmissionWait.objects.get(job_id=waits["night"].pk).wait_minutes == pytest.approx(30.0)
    _assert_equal_to_the_reference(world)


def test_the_flavor_chosen_at_admission_moves_the_jobs_waits(world, waits):
    rows = AdmissionWait.objects.filter(job_id=waits["twice"].pk)
    assert {r.flavor_id for r in rows} == {Flavor.objects.get(name="G").pk}
    assert sorted(r.wait_minutes for r in rows) == [pytest.approx(5.0), pytest.approx(195.0)]


def test_a_late_queue_entry_and_a_late_admission_are_counted(world, waits):
    """Events recorded after the admission they concern (an import, a poll that ran late): a queue
    entry dated before an admission shortens its wait; an admission dated in the past is one more."""
    night = waits["night"]
    JobEvent.objects.create(job=night, kind="transition", from_state="queued", to_state="queued",
                            reason="requeued", occurred_at=local(2026, 11, 6, 0, 5))
    assert AdmissionWait.objects.get(job_id=night.pk).wait_minutes == pytest.approx(15.0)
    late = History(world).job(world.pb, world.F, submitted=local(2026, 11, 5, 22))
    JobEvent.objects.create(job=late, kind="transition", from_state="queued", to_state="admitted",
                            reason="started outside the portal", occurred_at=local(2026, 11, 6, 0, 1))
    assert AdmissionWait.objects.get(job_id=late.pk).wait_minutes == pytest.approx(121.0)
    _assert_equal_to_the_reference(world)


def test_the_backfill_builds_what_the_trigger_kept(world, waits):
    kept = sorted(AdmissionWait.objects.values_list(
        "event_id", "job_id", "admitted_at", "wait_minutes", "project_id", "user_id", "flavor_id", "kind",
        "priority_class_id"))
    rebuild()
    assert sorted(AdmissionWait.objects.values_list(
        "event_id", "job_id", "admitted_at", "wait_minutes", "project_id", "user_id", "flavor_id", "kind",
        "priority_class_id")) == kept
    assert len(kept) == 7
