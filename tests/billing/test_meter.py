"""The meter on real PostgreSQL: hour and month splits in the site zone, fractions, tiers,
preemption, watermarks, re-runs, and the append-only ledger."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from billing.meter import meter_state, usage_meter
from billing.models import MeterState, UsageRecord
from jobs.clusters.backends import base
from jobs.clusters.dispatch import apply_status
from jobs.models import Job, JobEvent, backend_name
from jobs.scheduling.cycle import schedule_once
from portal.models import Department, ProjectMove

from .conftest import expected_card_seconds, local

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)
M = timedelta(minutes=1)


def rows(**filters):
    return list(
        UsageRecord.objects.filter(**filters)
        .order_by("job_id", "segment_start")
        .values_list(
            "segment_start", "segment_end", "hour_start", "month", "tier", "gpu_count", "card_seconds"
        )
    )


def meter(now):
    return usage_meter(now=now)


def test_allocations_are_split_at_site_zone_hours_and_months(world, history):
    job = history.run(
        world.pa1, world.F, local(2026, 10, 31, 23, 30), local(2026, 11, 1, 1, 15), workers=2, gpus=1
    )
    meter(local(2026, 11, 2))
    assert rows() == [
        (
            local(2026, 10, 31, 23, 30),
            local(2026, 11, 1),
            local(2026, 10, 31, 23),
            date(2026, 10, 1),
            "standard",
            2,
            Decimal("3600"),
        ),
        (
            local(2026, 11, 1),
            local(2026, 11, 1, 1),
            local(2026, 11, 1),
            date(2026, 11, 1),
            "standard",
            2,
            Decimal("7200"),
        ),
        (
            local(2026, 11, 1, 1),
            local(2026, 11, 1, 1, 15),
            local(2026, 11, 1, 1),
            date(2026, 11, 1),
            "standard",
            2,
            Decimal("1800"),
        ),
    ]
    row = UsageRecord.objects.first()
    assert (
        row.job_id,
        row.project_id,
        row.department_id,
        row.user_id,
        row.flavor_id,
        row.priority_class_id,
    ) == (
        job.pk,
        world.pa1.pk,
        world.A1.pk,
        history.user.pk,
        world.F.pk,
        history.prio.pk,
    )


def test_month_is_the_site_zone_month_not_utc(world, history):
    # 2026-11-30 23:30 in Shanghai is 15:30 UTC on the 30th; 2026-12-01 00:30 is 16:30 UTC on the 30th.
    history.run(world.pa1, world.F, local(2026, 11, 30, 23, 30), local(2026, 12, 1, 0, 30))
    meter(local(2026, 12, 2))
    assert [(r[3].month, r[6]) for r in rows()] == [(11, Decimal(1800)), (12, Decimal(1800))]


def test_mig_slices_and_shared_gpus_count_their_fraction_of_a_card(world, history, flavors):
    _, mig, shared = flavors
    history.run(world.pa1, mig, local(2026, 11, 3, 10), local(2026, 11, 3, 11), gpus=3)
    history.run(world.pa1, shared, local(2026, 11, 3, 10), local(2026, 11, 3, 11), milli=250)
    meter(local(2026, 11, 4))
    # 3/7 of 3600 = 1542.857142857…: rounded once, at the sixth place (was 1542.857112 with the
    # fraction stored as 0.14285714).
    assert [(r[5], r[6]) for r in rows()] == [(3, Decimal("1542.857143")), (1, Decimal("900"))]


def test_a_preempted_job_is_billed_until_it_exits_and_its_next_run_in_its_new_tier(world, history):
    job = history.job(world.pa1, world.F, gpus=4)
    history.admit(job, local(2026, 11, 3, 9, 59))
    history.start(job, local(2026, 11, 3, 10))
    history.note(job, local(2026, 11, 3, 10, 40))  # preemption signal: the grace period begins
    history.end(job, local(2026, 11, 3, 10, 45), "preempted")  # it exited: GPUs released
    history.admit(job, local(2026, 11, 3, 12), on_loan=True)
    history.start(job, local(2026, 11, 3, 12, 1))
    history.end(job, local(2026, 11, 3, 12, 31))
    meter(local(2026, 11, 4))
    assert [(r[0], r[1], r[4], r[6]) for r in rows()] == [
        (local(2026, 11, 3, 10), local(2026, 11, 3, 10, 45), "standard", Decimal(4 * 45 * 60)),
        (local(2026, 11, 3, 12, 1), local(2026, 11, 3, 12, 31), "on_loan", Decimal(4 * 30 * 60)),
    ]


def test_on_loan_flips_and_scaling_split_the_hour(world, history):
    job = history.run(world.pa1, world.F, local(2026, 11, 3, 10), None, workers=4, gpus=2)
    history.flip(job, local(2026, 11, 3, 10, 20), True)
    history.scale(job, local(2026, 11, 3, 10, 40), 2)
    history.end(job, local(2026, 11, 3, 11, 10))
    meter(local(2026, 11, 4))
    assert [(r[0], r[4], r[5], r[6]) for r in rows()] == [
        (local(2026, 11, 3, 10), "standard", 8, Decimal(8 * 1200)),
        (local(2026, 11, 3, 10, 20), "on_loan", 8, Decimal(8 * 1200)),
        (local(2026, 11, 3, 10, 40), "on_loan", 4, Decimal(4 * 1200)),
        (local(2026, 11, 3, 11), "on_loan", 4, Decimal(4 * 600)),
    ]


def test_a_running_job_is_metered_to_the_last_full_hour_and_continued(world, history):
    job = history.run(world.pa1, world.F, local(2026, 11, 3, 10, 20), None)
    report = meter(local(2026, 11, 3, 12, 10))  # lag 5 min → watermark 12:00
    assert report.through == local(2026, 11, 3, 12)
    assert meter_state().open_jobs == [job.pk]
    assert sum(r[6] for r in rows()) == Decimal(100 * 60)
    assert meter(local(2026, 11, 3, 12, 50)).rows == 0  # same watermark: nothing to do
    history.end(job, local(2026, 11, 3, 13, 30))
    meter(local(2026, 11, 3, 15))
    assert sum(r[6] for r in rows()) == Decimal(190 * 60)
    assert meter_state().open_jobs == []
    assert [r[0] for r in rows()] == [
        local(2026, 11, 3, 10, 20),
        local(2026, 11, 3, 11),
        local(2026, 11, 3, 12),
        local(2026, 11, 3, 13),
    ]


def test_the_lag_keeps_the_meter_off_the_hour_that_just_ended(world, history):
    history.run(world.pa1, world.F, local(2026, 11, 3, 10), None)
    assert meter(local(2026, 11, 3, 12, 4)).through == local(2026, 11, 3, 11)


def test_a_job_that_ran_while_the_meter_was_down_is_metered_exactly_once(world, history):
    meter(local(2026, 11, 1))
    history.run(world.pa1, world.F, local(2026, 11, 2, 8), local(2026, 11, 2, 9, 30), gpus=2)
    meter(local(2026, 11, 9))
    meter(local(2026, 11, 10))
    assert sum(r[6] for r in rows()) == Decimal(2 * 90 * 60)


def test_rerunning_or_rescanning_never_counts_twice(world, history):
    history.run(world.pa1, world.F, local(2026, 11, 2, 8), local(2026, 11, 5, 9, 30), gpus=8)
    first = meter(local(2026, 11, 6))
    assert first.rows == 74
    assert meter(local(2026, 11, 6)).rows == 0
    rescan = usage_meter(now=local(2026, 11, 6), rescan_from=local(2026, 11, 1))
    assert rescan.segments > 0 and rescan.rows == 0
    assert UsageRecord.objects.count() == 74


def test_a_rescan_from_after_the_cursor_still_meters_from_the_cursor(world, history):
    meter(local(2026, 11, 2))
    history.run(world.pa1, world.F, local(2026, 11, 3, 8), local(2026, 11, 3, 9))
    usage_meter(now=local(2026, 11, 6), rescan_from=local(2026, 11, 5))
    assert sum(r[6] for r in rows()) == Decimal(3600)


def test_stepping_the_watermark_hour_by_hour_gives_the_same_ledger_as_one_run(world, history, flavors):
    _, mig, _ = flavors
    a = history.run(world.pa1, world.F, local(2026, 11, 3, 9, 17, 5), None, workers=2, gpus=4)
    history.flip(a, local(2026, 11, 3, 11, 59, 59), True)
    history.flip(a, local(2026, 11, 3, 13, 0, 0), False)
    history.scale(a, local(2026, 11, 3, 14, 30), 1)
    history.end(a, local(2026, 11, 3, 16, 2), "preempted")
    history.admit(a, local(2026, 11, 3, 16, 30), on_loan=True, workers=2)
    history.start(a, local(2026, 11, 3, 16, 31))
    history.end(a, local(2026, 11, 3, 18, 31))
    history.run(
        world.pb, mig, local(2026, 11, 3, 10, 0, 0, 1), local(2026, 11, 3, 17, 59, 59, 999999), gpus=5
    )
    step = local(2026, 11, 3, 9)
    while step < local(2026, 11, 4):
        meter(step)
        step += timedelta(minutes=37)
    stepped = set(rows())
    with connection.cursor() as cursor:  # start the ledger over: lift the guard for one statement
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # run the deferred FK checks now
        cursor.execute("ALTER TABLE billing_usagerecord DISABLE TRIGGER usage_append_only")
        cursor.execute("DELETE FROM billing_usagerecord")
        cursor.execute("ALTER TABLE billing_usagerecord ENABLE TRIGGER usage_append_only")
    MeterState.objects.all().delete()
    meter(local(2026, 11, 4))
    assert set(rows()) == stepped
    exact = sum(expected_card_seconds(local(2026, 11, 4)).values())
    assert abs(sum(r[6] for r in stepped) - exact) < Decimal("0.00001")


def test_the_ledger_is_append_only(world, history):
    history.run(world.pa1, world.F, local(2026, 11, 2, 8), local(2026, 11, 2, 9))
    meter(local(2026, 11, 3))
    for attempt in (
        lambda: UsageRecord.objects.update(card_seconds=0),
        lambda: UsageRecord.objects.all().delete(),
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            attempt()
    assert UsageRecord.objects.get().card_seconds == Decimal(3600)


def test_a_project_moved_to_another_department_keeps_its_past_usage_where_it_was(world, history):
    history.run(world.pa1, world.F, local(2026, 11, 2, 8), local(2026, 11, 2, 9))
    meter(local(2026, 11, 3))
    ProjectMove.objects.create(project=world.pa1, from_department=world.A1, to_department=world.B,
                               at=local(2026, 11, 3, 1))
    world.pa1.department = world.B
    world.pa1.save()
    history.run(world.pa1, world.F, local(2026, 11, 3, 8), local(2026, 11, 3, 9))
    meter(local(2026, 11, 4))
    assert list(UsageRecord.objects.order_by("id").values_list("department__code", flat=True)) == ["A1", "B"]
    assert Department.objects.filter(code="A1").exists()


def test_the_real_services_write_the_events_the_meter_reads(world):
    """Submit, schedule, start, a rule-1 flip written by the scheduling cycle, finish — through
    ``jobs`` services — then the ledger matches the log exactly."""
    from tests import factories as fx

    job = fx.submit(world.pa, world.F, gpus=4)
    assert schedule_once().admitted == 1
    job.refresh_from_db()
    assert job.on_loan is False
    assert apply_status(job, base.JobStatus(backend_name(job.pk), base.RUNNING)) == "running"
    node = world.quota["pa"]
    node.quota = Decimal(2)  # the project's quota shrinks: the running job is now on loan
    node.save()
    schedule_once()
    flip = JobEvent.objects.get(job=job, kind="on_loan")
    assert flip.data == {"on_loan": True} and flip.from_state == flip.to_state == "running"
    schedule_once()  # unchanged split: no second event
    assert JobEvent.objects.filter(job=job, kind="on_loan").count() == 1
    job.refresh_from_db()
    assert (
        apply_status(job, base.JobStatus(backend_name(job.pk), base.SUCCEEDED, exit_code=0))
        == "succeeded"
    )
    end = JobEvent.objects.get(job=job, to_state="succeeded").occurred_at
    meter(end + 2 * H)
    tiers = set(UsageRecord.objects.values_list("tier", flat=True))
    assert tiers == {"standard", "on_loan"}
    exact = sum(expected_card_seconds(end + 2 * H).values())
    assert exact > 0
    assert abs(sum(UsageRecord.objects.values_list("card_seconds", flat=True)) - exact) < Decimal("0.000005")
    assert Job.objects.get(pk=job.pk).state == "succeeded"


def test_each_run_of_a_job_with_alternatives_is_charged_on_the_flavor_it_ran_on(world, history, flavors):
    """DESIGN §14: a job that accepts two flavors ran on a MIG slice (1/7 of a card), was
    preempted and requeued, and then ran on a whole card — all before the meter's next run.
    The first run is charged on the slice, not on the flavor the job holds by then."""
    whole, mig, _shared = flavors
    job = history.job(world.pa1, mig)
    history.admit(job, local(2026, 11, 2, 9, 59), flavor=mig)
    history.start(job, local(2026, 11, 2, 10))
    history.end(job, local(2026, 11, 2, 10, 30), state="preempted")
    history.admit(job, local(2026, 11, 2, 10, 40), flavor=whole)
    history.start(job, local(2026, 11, 2, 10, 45))
    history.end(job, local(2026, 11, 2, 11, 15))
    meter(local(2026, 11, 3))
    charged = UsageRecord.objects.filter(job=job).order_by("segment_start")
    assert list(charged.values_list("flavor__name", "card_seconds")) == [
        (mig.name, Decimal("257.142857")),  # 1,800 s × 1/7 of a card
        (whole.name, Decimal("900")),  # 10:45–11:00 on a whole card
        (whole.name, Decimal("900")),  # 11:00–11:15
    ]
    meter(local(2026, 11, 4))  # a re-run changes nothing
    assert UsageRecord.objects.filter(job=job).count() == 3
