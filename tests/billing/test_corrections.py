"""Facts and corrections (DESIGN §7, issue 19): facts that arrive late — an earlier end, a tier
flip an hour ago, usage from before a project moved — are found by a plain meter run and
corrected by reversal rows plus corrected rows; a closed month's difference becomes adjustment
lines, positive or negative, in the next month that closes."""

import random
from collections import defaultdict
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import DatabaseError, connection, transaction

from billing.meter import usage_meter
from billing.models import LineKind, Statement, StatementLine, UsageRecord
from billing.services import statement_close_month
from portal.models import ProjectMove

from .conftest import local, rates

pytestmark = pytest.mark.django_db
H = timedelta(hours=1)


def meter(now):
    return usage_meter(now=now)


def net(**filters) -> Decimal:
    return sum(UsageRecord.objects.filter(**filters).values_list("card_seconds", flat=True), Decimal(0))


def test_a_late_tier_flip_moves_the_metered_hours_from_in_quota_to_on_loan(world, history):
    """The issue's 8 × MLU370 case: metered through 03:00 all in quota, then the backend's flip
    to on loan at 02:44:16 arrives. The metered hour 02:00–03:00 is reversed and re-charged in
    two pieces; nothing stays billed in quota that was on loan."""
    job = history.run(world.pa1, world.F, local(2026, 11, 2, 0), None, gpus=8)
    meter(local(2026, 11, 2, 3, 10))
    assert net(job=job, tier="standard") == 8 * 3 * 3600
    history.flip(job, local(2026, 11, 2, 2, 44, 16), True)  # recorded now, happened 26 min ago
    history.end(job, local(2026, 11, 2, 4))
    report = meter(local(2026, 11, 2, 5, 10))
    in_quota = 8 * (2 * 3600 + 44 * 60 + 16)
    assert net(job=job, tier="standard") == in_quota
    assert net(job=job, tier="on_loan") == 8 * 4 * 3600 - in_quota
    assert report.reversed == 1 and report.corrected_jobs == 1
    reversal = UsageRecord.objects.get(job=job, reverses__isnull=False)
    original = reversal.reverses
    assert (reversal.segment_start, reversal.segment_end, reversal.tier, reversal.revision) == (
        original.segment_start, original.segment_end, original.tier, original.revision
    )
    assert reversal.card_seconds == -original.card_seconds == -8 * 3600
    corrected = UsageRecord.objects.get(job=job, segment_start=local(2026, 11, 2, 2), revision=1)
    assert (corrected.segment_end, corrected.tier) == (local(2026, 11, 2, 2, 44, 16), "standard")


def test_an_earlier_end_reported_late_is_credited(world, history):
    """A 4-card job the portal thought was running until 10:00 ended at 01:30 by the backend."""
    job = history.run(world.pa1, world.F, local(2026, 11, 2, 0), None, gpus=4)
    meter(local(2026, 11, 2, 10, 10))
    assert net(job=job) == 4 * 10 * 3600
    history.end(job, local(2026, 11, 2, 1, 30))
    report = meter(local(2026, 11, 2, 11, 10))
    assert net(job=job) == 4 * 5400
    assert report.reversed == 9  # 01:00–10:00: the hour it ended in and the eight after
    assert UsageRecord.objects.filter(job=job, card_seconds__lt=0).count() == 9
    assert not UsageRecord.objects.filter(job=job, reverses__isnull=True, card_seconds__lt=0).exists()


def test_a_plain_run_finds_a_fact_recorded_after_its_hours_were_metered(world, history):
    """No ``--rescan-from``: the cursor follows recorded order, so a finished job whose flip
    arrives hours later is corrected by the next ordinary run."""
    job = history.run(world.pa1, world.F, local(2026, 11, 2, 0), local(2026, 11, 2, 3), gpus=2)
    meter(local(2026, 11, 2, 6, 10))
    history.flip(job, local(2026, 11, 2, 1), True)
    meter(local(2026, 11, 2, 7, 10))
    assert (net(job=job, tier="standard"), net(job=job, tier="on_loan")) == (2 * 3600, 2 * 2 * 3600)


def test_rerunning_after_a_correction_writes_nothing(world, history):
    job = history.run(world.pa1, world.F, local(2026, 11, 2, 0), None, gpus=4)
    meter(local(2026, 11, 2, 5, 10))
    history.end(job, local(2026, 11, 2, 2, 15))
    meter(local(2026, 11, 2, 6, 10))
    count = UsageRecord.objects.count()
    again = meter(local(2026, 11, 2, 6, 20))
    assert (again.rows, again.reversed, UsageRecord.objects.count()) == (0, 0, count)


def test_late_usage_is_charged_to_the_department_that_owned_the_project_then(world, history):
    """pa1 moved from A1 to B on 1 November; its October job is reported afterwards."""
    ProjectMove.objects.create(
        project=world.pa1, from_department=world.A1, to_department=world.B, at=local(2026, 11, 1)
    )
    world.pa1.department = world.B
    world.pa1.save()
    meter(local(2026, 11, 5))
    history.run(world.pa1, world.F, local(2026, 10, 20, 8), local(2026, 10, 20, 10))
    history.run(world.pa1, world.F, local(2026, 11, 2, 8), local(2026, 11, 2, 9))
    meter(local(2026, 11, 6))
    assert net(department=world.A1) == 2 * 3600
    assert net(department=world.B) == 3600


def test_usage_in_the_hour_of_a_move_is_split_at_the_move(world, history):
    job = history.run(world.pa1, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 12), gpus=2)
    ProjectMove.objects.create(
        project=world.pa1, from_department=world.A1, to_department=world.B, at=local(2026, 11, 3, 11, 20)
    )
    world.pa1.department = world.B
    world.pa1.save()
    meter(local(2026, 11, 4))
    got = list(
        UsageRecord.objects.filter(job=job)
        .order_by("segment_start")
        .values_list("segment_start", "department__code", "card_seconds")
    )
    assert got == [
        (local(2026, 11, 3, 10), "A1", 2 * 3600),
        (local(2026, 11, 3, 11), "A1", 2 * 20 * 60),
        (local(2026, 11, 3, 11, 20), "B", 2 * 40 * 60),
    ]


def test_a_correction_after_the_close_is_a_negative_adjustment_in_the_next_month(world, history):
    """October closed with 16 card-hours of a job the backend later says ended at 22:00 on the
    31st: November's statement credits 8 card-hours of October, naming it, and ends below zero."""
    rates(world.F, "10", "4")
    job = history.run(world.pa1, world.F, local(2026, 10, 31, 20), None, gpus=4)
    october = statement_close_month(month=date(2026, 10, 1), now=local(2026, 11, 1, 1, 10))
    assert october.total == Decimal("160.00")
    history.end(job, local(2026, 10, 31, 22))
    statement_close_month(month=date(2026, 11, 1), now=local(2026, 12, 1, 1))
    november = Statement.objects.get(month=date(2026, 11, 1), department=world.A1)
    lines = list(november.lines.values_list("kind", "original_month", "card_seconds", "amount"))
    assert lines == [(LineKind.ADJUSTMENT, date(2026, 10, 1), Decimal(-4 * 2 * 3600), Decimal("-80.00"))]
    assert november.total == Decimal("-80.00")
    assert Statement.objects.get(month=date(2026, 10, 1), department=world.A1).total == Decimal("160.00")


def test_reversal_rows_are_as_append_only_as_charges(world, history):
    job = history.run(world.pa1, world.F, local(2026, 11, 2, 0), None)
    meter(local(2026, 11, 2, 3, 10))
    history.end(job, local(2026, 11, 2, 1, 30))
    meter(local(2026, 11, 2, 4, 10))
    reversal = UsageRecord.objects.filter(reverses__isnull=False).first()
    for sql in ("UPDATE billing_usagerecord SET card_seconds = 0 WHERE id = %s",
                "DELETE FROM billing_usagerecord WHERE id = %s"):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql, [reversal.pk])


def test_a_row_is_reversed_once_and_a_charge_is_never_negative(world, history):
    job = history.run(world.pa1, world.F, local(2026, 11, 2, 0), local(2026, 11, 2, 1))
    meter(local(2026, 11, 2, 3, 10))
    row = UsageRecord.objects.get(job=job)
    fields = {f.attname: getattr(row, f.attname) for f in UsageRecord._meta.concrete_fields}
    del fields["id"]
    with pytest.raises(DatabaseError), transaction.atomic():
        UsageRecord.objects.create(**{**fields, "card_seconds": -1, "revision": 1})  # a negative charge
    UsageRecord.objects.create(**{**fields, "card_seconds": -row.card_seconds, "reverses_id": row.pk})
    with pytest.raises(DatabaseError), transaction.atomic():
        UsageRecord.objects.create(**{**fields, "card_seconds": -row.card_seconds, "reverses_id": row.pk})


# --- the property: random histories, random late facts, random closes -------------------------

STANDARD, ON_LOAN = Decimal("36"), Decimal("72")  # per card-hour: 0.01 and 0.02 per card-second


def _plan(rng: random.Random, count: int):
    """Jobs with a true timeline: (start, [(flip instant, on_loan)], end, gpus); whole seconds
    so every row's card-seconds are exact."""
    base = local(2026, 10, 30)
    plans = []
    for _ in range(count):
        start = base + timedelta(seconds=rng.randrange(0, 4 * 86400))
        length = rng.randrange(600, 40 * 3600)
        flips = sorted(rng.sample(range(60, length - 60), k=rng.randrange(0, 3)))
        plans.append(
            (start, [(start + timedelta(seconds=s), i % 2 == 0) for i, s in enumerate(flips)],
             start + timedelta(seconds=length), rng.choice((1, 2, 4, 8)))
        )
    return plans


def _true_card_seconds(start, flips, end, gpus) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    marks = [start, *[f[0] for f in flips], end]
    tiers = [False, *[f[1] for f in flips]]
    for a, b, on_loan in zip(marks, marks[1:], tiers, strict=False):
        found["on_loan" if on_loan else "standard"] += gpus * int((b - a).total_seconds())
    return found


@pytest.mark.parametrize("seed", range(16))
def test_any_order_of_late_facts_and_closes_nets_to_the_true_usage(world, history, seed):
    """For every job Σ net ledger rows = card-seconds from its final facts, and Σ of every
    statement line (usage and adjustments of both months) = Σ true usage × rates, to the cent."""
    rng = random.Random(seed)
    rates(world.F, STANDARD, ON_LOAN)
    projects = [world.pa, world.pa1, world.pb]
    deliveries = []  # (arrives, order, write) — each fact arrives at its instant or late
    truth = {}
    for n, (start, flips, end, gpus) in enumerate(_plan(rng, 10)):
        job = history.job(rng.choice(projects), world.F, gpus=gpus, submitted=start - H)
        truth[job.pk] = _true_card_seconds(start, flips, end, gpus)
        facts = [(start, lambda j=job, s=start: _begin(history, j, s))]
        facts += [(at, lambda j=job, a=at, o=on: history.flip(j, a, o)) for at, on in flips]
        facts.append((end, lambda j=job, e=end: history.end(j, e)))
        for k, (at, write) in enumerate(facts):
            late = timedelta(seconds=rng.randrange(3600, 30 * 3600)) if rng.random() < 0.4 else timedelta(0)
            if k == 0:
                late = timedelta(0)  # a job's start comes first (the state machine needs it)
            deliveries.append((at + late, n, k, write))
    deliveries.sort(key=lambda d: d[:3])  # a flip may arrive after the end: the meter orders by time
    steps = sorted({local(2026, 10, 30) + timedelta(hours=rng.randrange(1, 7 * 24)) for _ in range(8)})
    close_at = local(2026, 11, 1, 1, 10) + timedelta(minutes=rng.randrange(0, 5 * 24 * 60))
    steps.append(close_at)  # October closes here, with whatever has arrived by then
    closed = False
    for now in sorted(steps):
        _arrive(deliveries, now)
        if not closed and now >= close_at:
            statement_close_month(month=date(2026, 10, 1), now=now)
            closed = True
        else:
            meter(now)
    _arrive(deliveries, local(2026, 12, 31))
    statement_close_month(month=date(2026, 11, 1), now=local(2026, 12, 1, 1))
    for job_id, tiers in truth.items():
        for tier in ("standard", "on_loan"):
            assert net(job_id=job_id, tier=tier) == tiers[tier], (seed, job_id, tier)
    billed = sum(StatementLine.objects.values_list("amount", flat=True), Decimal(0))
    true = sum(t["standard"] * STANDARD / 3600 + t["on_loan"] * ON_LOAN / 3600 for t in truth.values())
    assert billed == true


def _begin(history, job, at):
    history.admit(job, at - timedelta(seconds=1))
    history.start(job, at)


def _arrive(deliveries, now):
    for i, (arrives, n, k, write) in enumerate(deliveries):
        if write is not None and arrives <= now:
            write()
            deliveries[i] = (arrives, n, k, None)


def test_the_periodic_task_corrects_a_late_end(world, history):
    """The beat task is a plain run: a job the backend says ended hours ago is credited."""
    from django.utils import timezone

    from billing.tasks import meter as meter_task

    now = timezone.now()
    job = history.run(world.pa1, world.F, now - 30 * H, None, gpus=2)
    assert meter_task()["rows"] > 0
    charged = net(job=job)
    history.end(job, now - 29 * H)
    report = meter_task()
    assert report["reversed"] > 0 and report["corrected_jobs"] == 1
    assert net(job=job) == 2 * 3600 < charged


def test_seven_slices_of_a_seventh_bill_exactly_one_card(world, history, flavors):
    """A job of seven 1/7 MIG slices for one hour is 3600 card-seconds, not 3599.99993 (the old
    0.14285714 × 7); seven one-slice jobs add up to the same."""
    _whole, mig, _shared = flavors
    assert (mig.fraction_numerator, mig.fraction_denominator) == (1, 7)
    seven = history.run(world.pa1, mig, local(2026, 11, 2, 8), local(2026, 11, 2, 9), gpus=7)
    singles = [history.run(world.pb, mig, local(2026, 11, 2, 8), local(2026, 11, 2, 9)) for _ in range(7)]
    meter(local(2026, 11, 3))
    assert net(job=seven) == Decimal(3600)
    assert abs(net(job__in=singles) - Decimal(3600)) <= Decimal("0.000004")  # 6 places per row
