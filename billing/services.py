"""Billing writes: rates, draft statements and the month close (DESIGN §7).

A month closes in order, once: ``statement_close_month`` meters up to the month's end, builds
one statement per department with usage (plus credits and fees), and closes them together
with a ``MonthClose`` row that records the ledger cursor. Run it again and it finds the close
and changes nothing. Late ledger rows of a closed month (``id`` beyond that month's cursor)
become adjustment lines of the next month that closes, naming the month they belong to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import permissions as perm
from portal.models import User
from portal.selectors import scope_for
from quotas.models import Flavor
from quotas.selectors import site_zone

from . import pricing
from .lines import LineKey, prices_normalised
from .meter import meter_lock, meter_state, usage_meter, watermark
from .models import MonthClose, Rate, Resource, Statement, StatementLine, StatementState, Tier, UsageRecord
from .periods import is_hour_boundary, month_bounds, month_label
from .selectors import can_close_months, month_lines


def _require_platform(actor: User | None) -> None:
    if actor is not None:  # None: the system (a management command, a task)
        perm.require(scope_for(actor).platform_admin)


# --- rates ------------------------------------------------------------------------------


def rate_validate(
    *, flavor: Flavor, tier: str, price: Decimal, valid_from: datetime, currency: str,
    resource: str = Resource.CARD,
) -> None:
    errors: dict[str, list[str]] = {}
    if tier not in Tier.values:
        errors["tier"] = [_("Unknown tier %(t)r.") % {"t": tier}]
    if resource not in Resource.values:
        errors["resource"] = [_("Unknown resource %(r)r: card, core or gib.") % {"r": resource}]
    elif resource != Resource.CARD and tier == Tier.RESERVED:
        # The reserved fee is on guaranteed cards, not on what jobs ran: no CPU or memory in it.
        errors["resource"] = [
            _("Core-hours and GiB-hours are priced in quota and on loan, not as a reserved fee.")
        ]
    if price is None or price < 0:
        errors["price"] = [_("A price is zero or more.")]
    if currency != settings.GPUPOOL["CURRENCY"]:
        errors["currency"] = [_("Rates are in %(c)s.") % {"c": settings.GPUPOOL["CURRENCY"]}]
    if valid_from is None or timezone.is_naive(valid_from) or not is_hour_boundary(valid_from, site_zone()):
        errors["valid_from"] = [_("A rate starts on the hour (site time zone).")]
    else:
        last = MonthClose.objects.order_by("-month").first()
        if last is not None and valid_from < month_bounds(last.month, site_zone())[1]:
            errors["valid_from"] = [
                _("%(m)s is closed: a new rate starts after it.") % {"m": month_label(last.month)}
            ]
        elif Rate.objects.filter(flavor=flavor, tier=tier, resource=resource, valid_from=valid_from).exists():
            errors["valid_from"] = [_("A rate of this flavor, tier and resource already starts then.")]
    if errors:
        raise ValidationError(errors)


def rate_create(
    *, actor: User | None, flavor: Flavor, tier: str, price: Decimal, valid_from: datetime, note: str = "",
    resource: str = Resource.CARD,
) -> Rate:
    """A new price from ``valid_from`` on — per card-hour, or (``resource`` core / gib) per
    core-hour / GiB-hour beyond the share. Rates are never edited: billed months keep theirs."""
    _require_platform(actor)
    currency = settings.GPUPOOL["CURRENCY"]
    rate_validate(
        flavor=flavor, tier=tier, price=price, valid_from=valid_from, currency=currency, resource=resource
    )
    return Rate.objects.create(
        flavor=flavor,
        tier=tier,
        resource=resource,
        price=price,
        currency=currency,
        valid_from=valid_from,
        note=note,
        created_by=actor,
    )


# --- statements -------------------------------------------------------------------------


@dataclass(frozen=True)
class CloseReport:
    month: str
    already_closed: bool
    statements: int
    lines: int
    total: Decimal
    through_record: int


def _check_order(month: date) -> MonthClose | None:
    """Months close in order; returns the previous close (its cursor starts the adjustments)."""
    later = MonthClose.objects.filter(month__gt=month).order_by("month").first()
    if later is not None:
        raise ValidationError(
            {
                "month": [
                    _("%(later)s is already closed; late usage of %(m)s is billed in the next open month.")
                    % {"later": month_label(later.month), "m": month_label(month)}
                ]
            }
        )
    previous = MonthClose.objects.filter(month__lt=month).order_by("-month").first()
    open_before = UsageRecord.objects.filter(month__lt=month)
    if previous is not None:
        open_before = open_before.filter(month__gt=previous.month)
    first = open_before.aggregate(m=Min("month"))["m"]
    if first is not None:
        raise ValidationError(
            {
                "month": [
                    _("%(first)s has usage and is not closed: close it first.")
                    % {"first": month_label(first)}
                ]
            }
        )
    return previous


def _unpriced(lines: dict[int, list[pricing.Line]]) -> list[str]:
    # Only card lines can be unpriced: CPU / memory without a rate of theirs are not billed.
    names = dict(Flavor.objects.values_list("pk", "name"))
    zone = site_zone()  # the zone every page and the rates' start hours are read in
    missing = {
        f"{names.get(line.key.flavor_id, line.key.flavor_id)}/{line.key.tier} @ "
        f"{line.start.astimezone(zone):%Y-%m-%d %H:%M}"
        for dept_lines in lines.values()
        for line in dept_lines
        if line.amount is None
    }
    return sorted(missing)


def _store(month: date, lines: dict[int, list[pricing.Line]]) -> tuple[int, int, Decimal]:
    """Replace the month's draft statements with these lines (drafts only; closed never change).
    The lines go in as one INSERT from arrays: a month has tens of thousands of them."""
    StatementLine.objects.filter(statement__month=month, statement__state=StatementState.DRAFT).delete()
    Statement.objects.filter(month=month, state=StatementState.DRAFT).delete()
    grand, columns = Decimal("0.00"), {name: [] for name in _LINE_COLUMNS}
    for dept_id, dept_lines in sorted(lines.items()):
        statement = Statement.objects.create(
            department_id=dept_id,
            month=month,
            total=pricing.total(dept_lines),
            currency=_currency(),
            priced_normalised=prices_normalised(),
        )
        grand += statement.total
        for line in dept_lines:
            for name, value in zip(_LINE_COLUMNS, _line_values(statement.pk, line), strict=True):
                columns[name].append(value)
    count = len(columns["statement_id"])
    if count:
        with connection.cursor() as cursor:
            cursor.execute(_INSERT_LINES, [columns[name] for name in _LINE_COLUMNS])
    return len(lines), count, grand


_LINE_COLUMNS = {
    "statement_id": "bigint",
    "kind": "text",
    "project_id": "bigint",
    "user_id": "bigint",
    "flavor_id": "bigint",
    "tier": "text",
    "original_month": "date",
    "rate_id": "bigint",
    "unit_price": "numeric",
    "period_start": "timestamptz",
    "period_end": "timestamptz",
    "card_seconds": "numeric",
    "card_hours": "numeric",
    "normalised_card_seconds": "numeric",
    "normalised_card_hours": "numeric",
    "amount": "numeric",
    "manual_id": "bigint",
    "resource": "text",  # card, or CPU / memory beyond the share (DESIGN §15)
    "core_seconds": "numeric",
    "core_hours": "numeric",
    "mib_seconds": "numeric",
    "gib_hours": "numeric",  # manual lines (billing.manual.ManualLine): the adjustment billed
}
_INSERT_LINES = (
    f"INSERT INTO billing_statementline ({', '.join(_LINE_COLUMNS)}) SELECT * FROM unnest("  # noqa: S608
    + ", ".join(f"%s::{kind}[]" for kind in _LINE_COLUMNS.values())
    + ")"
)


def _currency() -> str:
    return settings.GPUPOOL["CURRENCY"]


def _line_values(statement_id: int, line: pricing.Line) -> tuple:
    key: LineKey = line.key
    return (
        statement_id,
        key.kind,
        key.project_id,
        key.user_id,
        key.flavor_id,
        key.tier,
        key.original_month,
        line.period.rate_id if line.period else None,
        line.period.price if line.period else None,
        line.start,
        line.end,
        line.card_seconds,
        line.card_hours,
        line.normalised_card_seconds,
        line.normalised_card_hours,
        line.amount,
        getattr(line, "manual_id", None),
        line.resource,
        line.core_seconds,
        line.core_hours,
        line.mib_seconds,
        line.gib_hours,
    )


def statement_draft_month(*, month: date, actor: User | None = None) -> tuple[int, int, Decimal]:
    """Build (or rebuild) the month's draft statements from what is metered so far, for review
    before the close. Unpriced usage stays visible on a draft (amount empty)."""
    _require_platform(actor)
    with meter_lock():
        if MonthClose.objects.filter(month=month).exists():
            raise ValidationError({"month": [_("%(m)s is closed.") % {"m": month_label(month)}]})
        previous = MonthClose.objects.filter(month__lt=month).order_by("-month").first()
        until = meter_state().metered_through or month_bounds(month, site_zone())[0]
        lines = month_lines(
            month, through=None, adjustments_after=previous.through_record if previous else None, until=until
        )
        with transaction.atomic():
            return _store(month, lines)


def statement_close_month(
    *, month: date, actor: User | None = None, now: datetime | None = None,
    progress: Callable[[str], None] | None = None,
) -> CloseReport:
    """Meter up to the month's end, build its statements and close them. Idempotent.
    ``progress`` is told each step (an English source text) as it starts."""
    if actor is not None:  # None: the system (the management command)
        perm.require(can_close_months(actor))
    step = progress or (lambda _text: None)
    now = now or timezone.now()
    zone = site_zone()
    end = month_bounds(month, zone)[1]
    with meter_lock():
        done = MonthClose.objects.filter(month=month).first()
        if done is not None:
            return _report(month, done, already=True)
        if watermark(now) < end:
            raise ValidationError(
                {
                    "month": [
                        _("%(m)s has not ended yet (or ended within the meter lag).")
                        % {"m": month_label(month)}
                    ]
                }
            )
        step(gettext_noop("Metering up to the end of the month"))
        usage_meter(now=now)
        previous = _check_order(month)
        step(gettext_noop("Building and closing the statements"))
        with transaction.atomic():
            through = UsageRecord.objects.aggregate(m=Max("id"))["m"] or 0
            after = previous.through_record if previous else 0
            lines = month_lines(month, through=through, adjustments_after=after, until=end)
            missing = _unpriced(lines)
            if missing:
                raise ValidationError(
                    {"rates": [_("No rate covers: %(list)s.") % {"list": ", ".join(missing[:20])}]}
                )
            _store(month, lines)
            Statement.objects.filter(month=month, state=StatementState.DRAFT).update(
                state=StatementState.CLOSED, closed_at=now
            )
            close = MonthClose.objects.create(
                month=month, through_record=through, closed_at=now, closed_by=actor
            )
        return _report(month, close, already=False)


def _report(month: date, close: MonthClose, *, already: bool) -> CloseReport:
    statements = Statement.objects.filter(month=month)
    return CloseReport(
        month=month_label(month),
        already_closed=already,
        statements=statements.count(),
        lines=StatementLine.objects.filter(statement__month=month).count(),
        total=sum((s.total for s in statements), Decimal("0.00")),
        through_record=close.through_record,
    )
