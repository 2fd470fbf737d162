"""Manual adjustment lines: a credit or debit finance adds by hand, with a reason and an
attachment name, billed once a *second* person approves it (DESIGN §7; docs/manual-adjustments.md).

Who: finance of the department (or of a department above it) and platform admins propose; a
different finance user of the department, or a platform admin, approves or rejects — never the
proposer, whatever their roles (also a database constraint). Everyone who reads the department's
statements reads its adjustments; others get 404.

When: approval fixes ``month``, the first open month at that instant. The line goes on the first
statement of its department built for that month or a later one and not yet closed with it —
so if that month closes before the line is billed (an approval racing the close), the next month
that closes carries it. A closed statement never changes; a billed line is never billed again.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Exists, Min, OuterRef, QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _

from portal.models import Department, Project, User
from portal.selectors import scope_for
from quotas.selectors import site_zone

from . import pricing
from .lines import LineKey
from .models import (
    MANUAL_AMOUNT_MAX,
    LineKind,
    ManualAdjustment,
    ManualKind,
    ManualState,
    MonthClose,
    StatementLine,
    StatementState,
    UsageRecord,
)
from .periods import month_bounds, month_label, month_of, next_month

REASON_MAX = 500
ATTACHMENT_MAX = 200


class AlreadyDecided(ValidationError):
    """The adjustment was approved or rejected meanwhile (the API answers 409)."""


# --- who -----------------------------------------------------------------------------------------


def visible_adjustments(user: User) -> QuerySet[ManualAdjustment]:
    """The adjustments of the departments whose statements ``user`` reads (fails closed)."""
    scope = scope_for(user)
    qs = ManualAdjustment.objects.select_related("department", "project", "proposed_by", "decided_by")
    if scope.sees_everything:
        return qs
    return qs.filter(department_id__in=scope.department_ids)


def can_propose(user: User, department: Department | None = None) -> bool:
    scope = scope_for(user)
    if department is None:
        return scope.platform_admin or bool(scope.finance_departments)
    return scope.platform_admin or department.pk in scope.finance_departments


def can_decide(user: User, adjustment: ManualAdjustment) -> bool:
    """A second person: finance of the department or a platform admin, never the proposer."""
    if adjustment.proposed_by_id == user.pk:
        return False
    scope = scope_for(user)
    return scope.platform_admin or adjustment.department_id in scope.finance_departments


def proposable_departments(user: User) -> QuerySet[Department]:
    scope = scope_for(user)
    if scope.platform_admin:
        return Department.objects.order_by("code")
    return Department.objects.filter(pk__in=scope.finance_departments).order_by("code")


# --- validation ----------------------------------------------------------------------------------


def clean_amount(raw) -> Decimal:
    """A positive amount in CNY with at most two decimals, up to ``MANUAL_AMOUNT_MAX``: never
    rounded or clamped; NaN, infinities, zero (also −0) and negatives are refused."""
    try:
        value = raw if isinstance(raw, Decimal) else Decimal(str(raw).strip())
    except (InvalidOperation, ValueError, TypeError):
        raise ValidationError({"amount": [_("Give the amount as a number, e.g. 1200.50.")]}) from None
    if not value.is_finite():
        raise ValidationError({"amount": [_("Give the amount as a number, e.g. 1200.50.")]})
    if value <= 0:
        raise ValidationError(
            {"amount": [_("The amount is more than zero; a credit is chosen as the kind, not by a sign.")]}
        )
    if value > MANUAL_AMOUNT_MAX:
        raise ValidationError(
            {"amount": [_("At most %(max)s on one line.") % {"max": f"{MANUAL_AMOUNT_MAX:,}"}]}
        )
    if value.as_tuple().exponent < -2 and value != value.quantize(pricing.CENT):
        raise ValidationError({"amount": [_("At most two decimals (fen).")]})
    return value.quantize(pricing.CENT)


def _clean_text(value, field: str, limit: int, *, required: bool) -> str:
    text = (value or "").strip() if isinstance(value, str) or value is None else None
    if text is None:
        raise ValidationError({field: [_("Give text.")]})
    if required and not text:
        raise ValidationError({field: [_("This field is required.")]})
    if len(text) > limit:
        raise ValidationError({field: [_("At most %(n)d characters.") % {"n": limit}]})
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in text):
        raise ValidationError({field: [_("Control characters are not allowed.")]})
    return text


# --- writes --------------------------------------------------------------------------------------


def adjustment_propose(
    *,
    actor: User,
    department: Department,
    kind: str,
    amount,
    reason: str,
    attachment: str = "",
    project: Project | None = None,
    now: datetime | None = None,
) -> ManualAdjustment:
    """A proposed credit or debit; billed only once someone else approves it."""
    if not can_propose(actor, department):
        raise PermissionDenied(_("Only finance of the department or a platform admin adds adjustments."))
    if kind not in ManualKind.values:
        raise ValidationError({"kind": [_("Choose credit or debit.")]})
    value = clean_amount(amount)
    if project is not None and project.department_id != department.pk:
        raise ValidationError({"project": [_("The project is not in this department.")]})
    return ManualAdjustment.objects.create(
        department=department,
        project=project,
        kind=kind,
        amount=value,
        currency=settings.GPUPOOL["CURRENCY"],
        reason=_clean_text(reason, "reason", REASON_MAX, required=True),
        attachment=_clean_text(attachment, "attachment", ATTACHMENT_MAX, required=False),
        proposed_by=actor,
        proposed_at=now or timezone.now(),
    )


def first_open_month(now: datetime) -> date:
    """The month the next close will bill: the month after the last closed one, else the
    earliest month with usage, else the month of ``now``."""
    last = MonthClose.objects.order_by("-month").first()
    if last is not None:
        return next_month(last.month)
    earliest = UsageRecord.objects.aggregate(m=Min("month"))["m"]
    current = month_of(now, site_zone())
    return min(earliest, current) if earliest else current


def adjustment_decide(
    *, actor: User, adjustment_id: int, approve: bool, note: str = "", now: datetime | None = None
) -> ManualAdjustment:
    """Approve or reject a proposed adjustment. The row is locked (``select_for_update``), so of
    two approvers at once one wins and the other is told it was decided (``AlreadyDecided``)."""
    now = now or timezone.now()
    note = _clean_text(note, "note", REASON_MAX, required=False)
    with transaction.atomic():
        adjustment = ManualAdjustment.objects.select_for_update().get(pk=adjustment_id)
        if adjustment.proposed_by_id == actor.pk:
            raise PermissionDenied(_("You proposed this adjustment: someone else approves or rejects it."))
        if not can_decide(actor, adjustment):
            raise PermissionDenied(_("Only finance of the department or a platform admin decides."))
        if adjustment.state != ManualState.PROPOSED:
            raise AlreadyDecided(
                _("This adjustment was already %(state)s.")
                % {"state": adjustment.get_state_display().lower()}
            )
        adjustment.state = ManualState.APPROVED if approve else ManualState.REJECTED
        adjustment.decided_by, adjustment.decided_at, adjustment.decision_note = actor, now, note
        adjustment.month = first_open_month(now) if approve else None
        adjustment.save(update_fields=["state", "decided_by", "decided_at", "decision_note", "month"])
    return adjustment


# --- statement lines -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ManualLine:
    """Duck-types ``pricing.Line`` for the statement builder: a fixed amount, no rate, no usage."""

    key: LineKey
    amount: Decimal
    start: datetime
    end: datetime
    manual_id: int
    schedule: None = None
    period: None = None
    card_seconds: Decimal = Decimal(0)
    card_hours: Decimal = Decimal(0)
    normalised_card_seconds: None = None
    normalised_card_hours: None = None
    resource: str = "card"
    core_seconds: None = None
    core_hours: None = None
    mib_seconds: None = None
    gib_hours: None = None


def unbilled(month: date) -> QuerySet[ManualAdjustment]:
    """Approved adjustments due by ``month`` that no closed statement carries yet."""
    billed = StatementLine.objects.filter(manual=OuterRef("pk"), statement__state=StatementState.CLOSED)
    return ManualAdjustment.objects.filter(state=ManualState.APPROVED, month__lte=month).exclude(
        Exists(billed)
    )


def manual_lines(month: date, departments: frozenset[int] | None = None) -> list[ManualLine]:
    """The statement lines of the approved, not yet billed adjustments for ``month``."""
    found = unbilled(month).order_by("id")
    if departments is not None:
        found = found.filter(department_id__in=departments)
    start, end = month_bounds(month, site_zone())
    return [
        ManualLine(
            key=LineKey(a.department_id, LineKind.MANUAL, a.project_id, None, None, "", None),
            amount=a.signed_amount,
            start=start,
            end=end,
            manual_id=a.pk,
        )
        for a in found.only("id", "department_id", "project_id", "kind", "amount")
    ]


def describe_month(adjustment: ManualAdjustment) -> str:
    return month_label(adjustment.month) if adjustment.month else ""
