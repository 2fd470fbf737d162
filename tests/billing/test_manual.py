"""Manual adjustment lines (issue 19, item 5): a credit or debit with a reason and an attachment
name, proposed by finance and approved by a second person; billed once, on the first statement of
its department built for the first open month at approval (or a later one), never on a closed one."""

import threading
from datetime import date
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, connection, transaction

from billing import manual
from billing.models import LineKind, ManualAdjustment, ManualState, Statement, StatementLine
from billing.services import statement_close_month, statement_draft_month
from portal.models import Membership, Role, User

from .conftest import local, rates
from .ledger_rows import ledger

pytestmark = pytest.mark.django_db
OCT, NOV, DEC = date(2026, 10, 1), date(2026, 11, 1), date(2026, 12, 1)


@pytest.fixture
def a_finance2(world):
    """A second finance user of A (the two-person rule needs two)."""
    user = User.objects.create_user(username="a_finance2")
    Membership.objects.create(user=user, role=Role.FINANCE, department=world.A)
    return user


@pytest.fixture
def october(world, history):
    """October closed with 96.00 CNY of usage on A1; November open with usage on A1 and B."""
    rates(world.F, "12", "9.6")
    ledger(history, world.pa1, world.F, local(2026, 10, 3, 10), 8 * 3600)
    ledger(history, world.pa1, world.F, local(2026, 11, 3, 10), 3600)
    ledger(history, world.pb, world.F, local(2026, 11, 3, 10), 3600)
    statement_close_month(month=OCT, now=local(2026, 11, 2))


def propose(world, persona="a_finance", **kw):
    args = {"department": world.A1, "kind": "credit", "amount": "150.00", "reason": "GPU outage 11-03"}
    args.update(kw)
    return manual.adjustment_propose(
        actor=world.users[persona] if isinstance(persona, str) else persona, **args
    )


def manual_lines_of(month, department):
    return list(
        StatementLine.objects.filter(statement__month=month, statement__department=department, kind="manual")
    )


def test_an_approved_credit_is_billed_once_on_the_next_close(world, october, a_finance2):
    adjustment = propose(world, attachment="OA-2026-1123.pdf", project=world.pa1)
    assert adjustment.state == ManualState.PROPOSED
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    assert manual_lines_of(NOV, world.A1) == []  # not approved: not billed
    manual.adjustment_decide(
        actor=a_finance2, adjustment_id=adjustment.pk, approve=True, now=local(2026, 12, 3)
    )
    adjustment.refresh_from_db()
    assert (adjustment.state, adjustment.month, adjustment.decided_by) == (
        ManualState.APPROVED,
        DEC,
        a_finance2,
    )
    statement_draft_month(month=DEC)
    statement_draft_month(month=DEC)  # rebuilt drafts carry it once
    assert [(line.amount, line.manual_id) for line in manual_lines_of(DEC, world.A1)] == [
        (Decimal("-150.00"), adjustment.pk)
    ]
    statement_close_month(month=DEC, now=local(2027, 1, 2))
    [line] = manual_lines_of(DEC, world.A1)
    assert (line.kind, line.amount, line.card_seconds, line.card_hours, line.rate_id, line.flavor_id) == (
        LineKind.MANUAL,
        Decimal("-150.00"),
        0,
        0,
        None,
        None,
    )
    assert (line.project, line.manual.reason, line.manual.attachment) == (
        world.pa1,
        "GPU outage 11-03",
        "OA-2026-1123.pdf",
    )
    statement = Statement.objects.get(month=DEC, department=world.A1)
    assert statement.total == Decimal("-150.00")  # no usage in December: the statement ends below zero
    statement_close_month(month=date(2027, 1, 1), now=local(2027, 2, 2))
    assert manual_lines_of(date(2027, 1, 1), world.A1) == []  # billed once


def test_a_debit_adds_to_the_usage_of_the_first_open_month(world, october, a_finance2):
    adjustment = propose(world, kind="debit", amount="10.5", reason="extra storage")
    manual.adjustment_decide(
        actor=world.users["platform"], adjustment_id=adjustment.pk, approve=True, now=local(2026, 11, 20)
    )
    adjustment.refresh_from_db()
    assert adjustment.month == NOV  # October is closed
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    statement = Statement.objects.get(month=NOV, department=world.A1)
    assert [(line.kind, line.amount) for line in statement.lines.order_by("id")] == [
        ("usage", Decimal("12.00")),
        ("manual", Decimal("10.50")),
    ]
    assert statement.total == Decimal("22.50")
    assert not Statement.objects.filter(month=NOV, department=world.A).exists()


def test_a_month_closed_before_the_line_was_billed_passes_it_to_the_next(world, october, a_finance2):
    """An approval that raced the close of its month (it read November as open, the close had
    already built its lines): November is closed without it, the next month that closes carries
    it — never the closed statement."""
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    raced = ManualAdjustment.objects.create(
        department=world.A1,
        kind="debit",
        amount=Decimal("7.00"),
        reason="raced",
        state="approved",
        proposed_by=world.users["a_finance"],
        proposed_at=local(2026, 12, 1, 23),
        decided_by=a_finance2,
        decided_at=local(2026, 12, 2),
        month=NOV,
    )
    assert manual_lines_of(NOV, world.A1) == []
    statement_close_month(month=DEC, now=local(2027, 1, 2))
    assert [line.manual_id for line in manual_lines_of(DEC, world.A1)] == [raced.pk]


def test_a_rejected_line_is_never_billed(world, october, a_finance2):
    adjustment = propose(world)
    manual.adjustment_decide(actor=a_finance2, adjustment_id=adjustment.pk, approve=False, note="duplicate")
    adjustment.refresh_from_db()
    assert (adjustment.state, adjustment.decision_note, adjustment.month) == (
        ManualState.REJECTED,
        "duplicate",
        None,
    )
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    assert not StatementLine.objects.filter(kind="manual").exists()


def test_the_proposer_never_approves_their_own_even_as_platform_admin(world, october):
    for persona in ("a_finance", "platform"):
        adjustment = propose(world, persona)
        for approve in (True, False):
            with pytest.raises(PermissionDenied):
                manual.adjustment_decide(
                    actor=world.users[persona], adjustment_id=adjustment.pk, approve=approve
                )
        assert ManualAdjustment.objects.get(pk=adjustment.pk).state == ManualState.PROPOSED


def test_the_database_refuses_self_approval_and_edits(world, october, a_finance2):
    adjustment = propose(world)
    with pytest.raises(IntegrityError), transaction.atomic():
        ManualAdjustment.objects.filter(pk=adjustment.pk).update(
            state="approved", decided_by=world.users["a_finance"], decided_at=local(2026, 11, 5), month=NOV
        )
    manual.adjustment_decide(actor=a_finance2, adjustment_id=adjustment.pk, approve=True)
    for change in ({"amount": Decimal("1.00")}, {"reason": "other"}, {"state": "rejected"}):
        with pytest.raises(IntegrityError), transaction.atomic():
            ManualAdjustment.objects.filter(pk=adjustment.pk).update(**change)
    with pytest.raises(IntegrityError), transaction.atomic():
        ManualAdjustment.objects.filter(pk=adjustment.pk).delete()


def test_who_proposes_and_who_decides(world, october, a_finance2):
    for persona in ("b_finance", "a_admin", "auditor", "pa1_member", "outsider"):
        with pytest.raises(PermissionDenied):
            propose(world, persona)
    adjustment = propose(world)
    for persona in ("b_finance", "a_admin", "auditor", "pa1_member"):
        with pytest.raises(PermissionDenied):
            manual.adjustment_decide(actor=world.users[persona], adjustment_id=adjustment.pk, approve=True)
    assert manual.visible_adjustments(world.users["b_finance"]).count() == 0
    assert manual.visible_adjustments(world.users["auditor"]).count() == 1


def test_a_decided_adjustment_is_not_decided_again(world, october, a_finance2, english):
    adjustment = propose(world)
    manual.adjustment_decide(actor=a_finance2, adjustment_id=adjustment.pk, approve=False)
    with pytest.raises(manual.AlreadyDecided, match="already rejected"):
        manual.adjustment_decide(actor=world.users["platform"], adjustment_id=adjustment.pk, approve=True)


@pytest.mark.django_db(transaction=True)
def test_two_approvers_at_once_one_wins(world, october, a_finance2):
    """The row lock: the second decision waits for the first and then finds it decided."""
    adjustment = propose(world)
    barrier, results = threading.Barrier(2), []

    def decide(user, approve):
        try:
            barrier.wait()
            manual.adjustment_decide(actor=user, adjustment_id=adjustment.pk, approve=approve)
            results.append("won")
        except manual.AlreadyDecided:
            results.append("already")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=decide, args=(u, a))
        for u, a in ((a_finance2, True), (world.users["platform"], False))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["already", "won"]
    assert ManualAdjustment.objects.get(pk=adjustment.pk).state != ManualState.PROPOSED


@pytest.mark.parametrize(
    ("amount", "message"),
    [
        ("-0", "more than zero"),
        ("0", "more than zero"),
        ("-5", "more than zero"),
        ("NaN", "as a number"),
        ("Infinity", "as a number"),
        ("-inf", "as a number"),
        ("1e400", "At most"),
        ("100000000.01", "At most"),
        ("1.005", "two decimals"),
        ("12,5", "as a number"),
        ("", "as a number"),
    ],
)
def test_bad_amounts_are_refused_not_clamped(world, october, english, amount, message):
    with pytest.raises(ValidationError, match=message):
        propose(world, amount=amount)
    assert not ManualAdjustment.objects.exists()


def test_other_bad_input(world, october, english):
    with pytest.raises(ValidationError, match="required"):
        propose(world, reason="   ")
    with pytest.raises(ValidationError, match="credit or debit"):
        propose(world, kind="refund")
    with pytest.raises(ValidationError, match="not in this department"):
        propose(world, project=world.pb)
    with pytest.raises(ValidationError, match="Control characters"):
        propose(world, attachment="a\u202egpj.exe")
    assert propose(world, amount="100000000.00", reason="x" * 500).amount == Decimal("100000000.00")
