"""Month close, statements and their lines: the reconciliation of a whole month against the
event log, idempotence, immutability, adjustments, settlement and the estimate."""

import random
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import DatabaseError, transaction

from billing import pricing
from billing.meter import meter_state, usage_meter
from billing.models import LineKind, MonthClose, Rate, Statement, StatementLine, UsageRecord
from billing.selectors import statement_estimate
from billing.services import rate_create, statement_close_month, statement_draft_month

from .conftest import expected_card_seconds, local, rates

# The refusals matched below are the English texts.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("english")]
NOV, DEC = date(2026, 11, 1), date(2026, 12, 1)
TOLERANCE = Decimal("0.000001")  # card-hours


def close(month, now):
    return statement_close_month(month=month, now=now)


def snapshot():
    return (
        list(UsageRecord.objects.order_by("id").values_list("id", "job_id", "segment_start", "card_seconds")),
        list(Statement.objects.order_by("id").values_list("id", "department_id", "month", "state", "total")),
        list(
            StatementLine.objects.order_by("id").values_list("id", "statement_id", "card_seconds", "amount")
        ),
        list(MonthClose.objects.values_list("month", "through_record")),
    )


def _generate(history, world, flavors, rng):
    """Ninety jobs from late October to early December: gangs, MIG slices, shared GPUs, up to
    three runs each (preempted or lost and requeued), on-loan stretches and scaling."""
    whole, mig, shared = flavors
    users = [world.users[u] for u in ("pa1_member", "pb_member", "a_admin")]
    for _ in range(90):
        flavor = rng.choice([whole, whole, mig, shared])
        shape = {"gpus": rng.randint(1, 7)} if flavor == mig else {}
        if flavor == whole:
            shape = {"workers": rng.randint(1, 2), "gpus": rng.choice([1, 2, 4, 8])}
        if flavor == shared:
            shape = {"milli": rng.randrange(50, 1000, 50)}
        job = history.job(
            rng.choice([world.pa, world.pa1, world.pb]), flavor, user=rng.choice(users), **shape
        )
        at = local(2026, 10, 28) + timedelta(seconds=rng.randrange(38 * 86400))
        for run in range(rng.randint(1, 3)):
            history.admit(job, at, on_loan=rng.random() < 0.3)
            at += timedelta(seconds=rng.randrange(1, 600))
            history.start(job, at)
            for _change in range(rng.randint(0, 3)):
                at += timedelta(seconds=rng.randrange(60, 20 * 3600))
                if rng.random() < 0.7:
                    history.flip(job, at, rng.random() < 0.5)
                elif flavor == whole:
                    history.scale(job, at, rng.randint(1, 3))
            at += timedelta(seconds=rng.randrange(60, 2 * 86400))
            if rng.random() < 0.2:
                history.note(job, at)  # preemption signal: GPUs are held through the grace period
                at += timedelta(seconds=rng.randrange(1, 300))
            last = run == 2 or rng.random() < 0.5
            if last and rng.random() < 0.1:
                break  # still running at the end
            ending = (
                rng.choice(["succeeded", "failed", "cancelled", "expired"])
                if last
                else rng.choice(["preempted", "lost"])
            )
            history.end(job, at, ending)
            if last:
                break
            at += timedelta(seconds=rng.randrange(60, 6 * 3600))


def test_a_month_of_statements_reconciles_with_the_event_log(world, history, flavors):
    whole, mig, shared = flavors
    rates(whole, "12", "9.6")
    Rate.objects.create(flavor=whole, tier="standard", price=Decimal("10"), valid_from=local(2026, 11, 15))
    Rate.objects.create(flavor=whole, tier="on_loan", price=Decimal("8"), valid_from=local(2026, 11, 15))
    rates(mig, "12", "9.6")
    rates(shared, "3", "2.4")
    _generate(history, world, flavors, random.Random(20261101))
    now = local(2026, 11, 1, 0, 30)
    while now < local(2026, 12, 12):  # the meter runs through the month, as beat would
        usage_meter(now=now)
        now += timedelta(hours=29, minutes=13)
    with pytest.raises(ValidationError, match="2026-10 has usage and is not closed"):
        close(NOV, now)
    close(date(2026, 10, 1), now)
    report = close(NOV, now)
    assert not report.already_closed and report.statements == 3

    exact = expected_card_seconds(meter_state().metered_through)
    lines = list(StatementLine.objects.filter(statement__month=NOV).select_related("statement"))
    assert {ln.kind for ln in lines} == {LineKind.USAGE}
    for dept in (world.A.pk, world.A1.pk, world.B.pk):
        for tier in ("standard", "on_loan"):
            billed = sum(
                ln.card_seconds for ln in lines if ln.statement.department_id == dept and ln.tier == tier
            )
            assert abs(billed - exact[(NOV, dept, tier)]) / 3600 < TOLERANCE, (dept, tier)
    november = sum(v for (m, _d, _t), v in exact.items() if m == NOV)
    assert abs(sum(ln.card_seconds for ln in lines) - november) / 3600 < TOLERANCE
    assert november > 3600 * 1000  # a real month, not an empty one

    for ln in lines:
        assert ln.amount == pricing.money(ln.card_seconds * ln.unit_price / 3600)
        assert ln.card_hours == (ln.card_seconds / 3600).quantize(Decimal("0.000001"))
    for statement in Statement.objects.filter(month=NOV):
        assert statement.state == "closed"
        assert statement.total == sum(ln.amount for ln in lines if ln.statement_id == statement.pk)

    # A line that spans the rate change on the 15th is two lines, split there.
    change = local(2026, 11, 15)
    split = [ln for ln in lines if ln.flavor_id == whole.pk and ln.period_start < change < ln.period_end]
    assert split == []
    before = {
        (ln.project_id, ln.user_id, ln.tier)
        for ln in lines
        if ln.flavor_id == whole.pk and ln.period_end <= change
    }
    after = {
        (ln.project_id, ln.user_id, ln.tier)
        for ln in lines
        if ln.flavor_id == whole.pk and ln.period_start >= change
    }
    assert before & after
    assert {ln.unit_price for ln in lines if ln.flavor_id == whole.pk and ln.tier == "standard"} == {
        Decimal("12"),
        Decimal("10"),
    }

    # Meter twice and close twice: nothing changes.
    before_rerun = snapshot()
    assert usage_meter(now=now).rows == 0
    assert usage_meter(now=now, rescan_from=local(2026, 10, 1)).rows == 0
    again = close(NOV, now)
    assert again.already_closed and again.total == report.total
    assert snapshot() == before_rerun


def test_months_close_in_order_and_only_once_they_are_over(world, history):
    rates(world.F, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 12))
    history.run(world.pa1, world.F, local(2026, 12, 3, 10), local(2026, 12, 3, 12))
    with pytest.raises(ValidationError, match="has not ended"):
        close(NOV, local(2026, 12, 1, 0, 4))  # within the meter lag
    with pytest.raises(ValidationError, match="2026-11 has usage and is not closed"):
        close(DEC, local(2027, 1, 2))
    assert not close(NOV, local(2027, 1, 2)).already_closed
    assert not close(DEC, local(2027, 1, 2)).already_closed
    assert close(NOV, local(2027, 1, 3)).already_closed
    with pytest.raises(ValidationError, match="2026-11 is already closed"):
        close(date(2026, 10, 1), local(2027, 1, 2))  # an earlier month: its late usage goes forward


def test_a_close_without_a_rate_is_refused_and_writes_nothing(world, history):
    Rate.objects.create(flavor=world.F, tier="standard", price=Decimal(12), valid_from=local(2026, 1, 1))
    job = history.run(world.pa1, world.F, local(2026, 11, 3, 10), None)
    history.flip(job, local(2026, 11, 3, 11), True)
    history.end(job, local(2026, 11, 3, 12))
    with pytest.raises(ValidationError, match="No rate covers: F/on_loan"):
        close(NOV, local(2026, 12, 2))
    assert not Statement.objects.exists() and not MonthClose.objects.exists()
    assert UsageRecord.objects.count() == 2  # the meter's work stays: it is correct either way


def _closed_november(world, history):
    rates(world.F, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 12))
    close(NOV, local(2026, 12, 2))
    return Statement.objects.get(month=NOV)


def test_a_closed_statement_never_changes(world, history):
    statement = _closed_november(world, history)
    line = statement.lines.get()
    assert (statement.state, statement.total, line.card_hours, line.amount) == (
        "closed",
        Decimal("24.00"),
        Decimal("2"),
        Decimal("24.00"),
    )
    attempts = [
        lambda: Statement.objects.filter(pk=statement.pk).update(state="draft"),
        lambda: Statement.objects.filter(pk=statement.pk).update(total=0),
        lambda: Statement.objects.filter(pk=statement.pk).delete(),
        lambda: StatementLine.objects.filter(pk=line.pk).update(amount=0),
        lambda: StatementLine.objects.filter(pk=line.pk).delete(),
        lambda: StatementLine.objects.create(
            statement=statement,
            kind="usage",
            flavor=world.F,
            tier="standard",
            period_start=line.period_start,
            period_end=line.period_end,
            card_seconds=1,
            card_hours=0,
            amount=1,
        ),
        lambda: MonthClose.objects.update(through_record=0),
    ]
    for attempt in attempts:
        with pytest.raises(DatabaseError, match=r"closed|append-only"), transaction.atomic():
            attempt()
    with pytest.raises(ValidationError, match="is closed"):
        statement_draft_month(month=NOV)
    statement.refresh_from_db()
    assert (statement.state, statement.total, statement.lines.get().amount) == (
        "closed",
        Decimal("24.00"),
        Decimal("24.00"),
    )


def test_late_usage_of_a_closed_month_is_an_adjustment_line_of_the_next_month(world, history):
    november = _closed_november(world, history)
    # Events of a November job reach the log after the close (repaired from the backend's accounting).
    history.run(world.pa1, world.F, local(2026, 11, 20, 10), local(2026, 11, 20, 11), gpus=2)
    # Before the event-time cursor, but recorded after the last run: the next plain run meters it
    # (the cursor follows recorded order); a rescan then finds nothing more to write.
    assert usage_meter(now=local(2026, 12, 2, 6)).rows == 1
    assert usage_meter(now=local(2026, 12, 2, 6), rescan_from=local(2026, 11, 1)).rows == 0
    history.run(world.pa1, world.F, local(2026, 12, 5, 10), local(2026, 12, 5, 13))
    close(DEC, local(2027, 1, 2))
    november.refresh_from_db()
    assert november.total == Decimal("24.00") and november.lines.count() == 1
    december = Statement.objects.get(month=DEC, department=world.A1)
    lines = {(ln.kind, ln.original_month, ln.card_hours, ln.amount) for ln in december.lines.all()}
    assert lines == {
        ("usage", None, Decimal("3"), Decimal("36.00")),
        ("adjustment", NOV, Decimal("2"), Decimal("24.00")),
    }
    assert december.total == Decimal("60.00")
    # The adjustment is billed once: a later month does not repeat it.
    history.run(world.pa1, world.F, local(2027, 1, 5, 10), local(2027, 1, 5, 11))
    close(date(2027, 1, 1), local(2027, 2, 2))
    january = Statement.objects.get(month=date(2027, 1, 1))
    assert {ln.kind for ln in january.lines.all()} == {"usage"}


def test_drafts_can_be_rebuilt_until_the_close(world, history):
    rates(world.F, "12", "9.6")
    history.run(world.pa1, world.F, local(2026, 11, 3, 10), local(2026, 11, 3, 12))
    usage_meter(now=local(2026, 11, 10))
    assert statement_draft_month(month=NOV)[0] == 1
    history.run(world.pb, world.F, local(2026, 11, 12, 10), local(2026, 11, 12, 11))
    usage_meter(now=local(2026, 11, 20))
    assert statement_draft_month(month=NOV)[0] == 2
    assert set(Statement.objects.values_list("state", flat=True)) == {"draft"}
    report = close(NOV, local(2026, 12, 2))
    assert report.statements == 2 and report.total == Decimal("36.00")
    assert set(Statement.objects.values_list("state", flat=True)) == {"closed"}


@pytest.mark.parametrize(("lend_limit", "credited"), [(None, 4), (3, 3)])
def test_lenders_are_credited_for_what_other_departments_borrowed(
    world, history, settings, lend_limit, credited
):
    settings.BILLING = {**settings.BILLING, "INTERNAL_SETTLEMENT": True}
    world.quota["A"].lend_limit = None if lend_limit is None else Decimal(lend_limit)
    world.quota["A"].save()
    rates(world.F, "12", "9.6")
    start, end = local(2026, 11, 3, 10), local(2026, 11, 3, 12)
    history.run(world.pb, world.F, start, end, gpus=8)  # B's own quota
    borrowed = history.job(world.pb, world.F, gpus=4)
    history.admit(borrowed, start, on_loan=True)
    history.start(borrowed, start)
    history.end(borrowed, end)
    history.run(world.pa1, world.F, start, end, gpus=2)  # A uses 2 of its 8: 6 idle, lendable
    close(NOV, local(2026, 12, 2))
    credit = StatementLine.objects.get(kind="lender_credit")
    assert credit.statement.department == world.A  # the top-level department, not A1
    assert (credit.tier, credit.card_hours, credit.unit_price) == (
        "on_loan",
        Decimal(-2 * credited),
        Decimal("9.6"),
    )
    assert credit.amount == pricing.money(Decimal(-2 * credited) * Decimal("9.6"))
    b = Statement.objects.get(department=world.B)
    assert b.total == Decimal("192.00") + Decimal("76.80")  # borrowers pay as usual


def test_no_credit_without_internal_settlement(world, history):
    rates(world.F, "12", "9.6")
    borrowed = history.job(world.pb, world.F, gpus=4)
    history.admit(borrowed, local(2026, 11, 3, 10), on_loan=True)
    history.start(borrowed, local(2026, 11, 3, 10))
    history.end(borrowed, local(2026, 11, 3, 12))
    close(NOV, local(2026, 12, 2))
    assert not StatementLine.objects.filter(kind="lender_credit").exists()


def test_a_reserved_rate_charges_top_level_departments_for_their_quota(world, history):
    rates(world.F, "12", "9.6", reserved="0.50")
    close(NOV, local(2026, 12, 2))
    fees = {
        ln.statement.department.code: (ln.card_hours, ln.amount)
        for ln in StatementLine.objects.filter(kind="reserved")
    }
    assert fees == {"A": (Decimal(8 * 720), Decimal("2880.00")), "B": (Decimal(8 * 720), Decimal("2880.00"))}


def test_the_estimate_is_computed_on_the_fly_and_stored_nowhere(world, history):
    rates(world.F, "12", "9.6")
    job = history.run(world.pa1, world.F, local(2026, 11, 3, 10), None, gpus=2)
    usage_meter(now=local(2026, 11, 3, 13, 30))
    estimate = statement_estimate(world.users["a_finance"], NOV)
    assert [(e.department.code, e.total) for e in estimate] == [("A1", Decimal("72.00"))]  # 3 h × 2 × 12
    assert statement_estimate(world.users["b_finance"], NOV) == []
    assert not Statement.objects.exists()
    history.end(job, local(2026, 11, 3, 14))
    report = close(NOV, local(2026, 12, 2))
    assert report.total == Decimal("96.00")


def test_rates_start_on_the_hour_never_inside_a_closed_month_and_only_platform_admins_set_them(
    world, history
):
    admin = world.users["platform"]
    with pytest.raises(ValidationError, match="on the hour"):
        rate_create(
            actor=admin,
            flavor=world.F,
            tier="standard",
            price=Decimal(1),
            valid_from=local(2026, 11, 3, 10, 30),
        )
    with pytest.raises(PermissionDenied):
        rate_create(
            actor=world.users["a_finance"],
            flavor=world.F,
            tier="standard",
            price=Decimal(1),
            valid_from=local(2027, 1, 1),
        )
    _closed_november(world, history)
    with pytest.raises(ValidationError, match="2026-11 is closed"):
        rate_create(
            actor=admin, flavor=world.F, tier="standard", price=Decimal(1), valid_from=local(2026, 11, 20)
        )
    rate = rate_create(
        actor=admin, flavor=world.F, tier="standard", price=Decimal("11.5"), valid_from=local(2026, 12, 1)
    )
    assert rate.currency == "CNY" and rate.created_by == admin
    with pytest.raises(ValidationError, match="already starts then"):
        rate_create(
            actor=admin, flavor=world.F, tier="standard", price=Decimal(2), valid_from=local(2026, 12, 1)
        )
