"""Closing a month from the Statements page (issue 32 item 9; DESIGN §7: finance decides when).

``manage.py close_month`` was the only way; docs/billing.md said finance decides when. The page
offers the close to whoever may close (``selectors.can_close_months``), shows the statements the
close will build (the estimate of that month) and asks to confirm; the close then runs in the
background, because it is long: it meters up to the month's end and prices every line of the
month — seconds at 10,000 jobs, 5 s at 100,000 and ~20 s at a million on the benchmark
(docs/performance.md), well past what a request should hold a worker for.

``month_close_request`` checks what can be checked at once (the right, the month has ended,
months close in order, not closed already), records a ``MonthCloseRun`` and enqueues
``billing.close_month`` after the commit; the task runs ``month_close_execute``, which claims the
run and calls ``statement_close_month`` — the command's service, so the rules, the refusal of
unpriced usage and the idempotence are one. The page that asked polls the run and shows its step,
the report, or why it failed.

Safe to repeat: at most one live run per month (a partial unique constraint), a second request
finds it; the claim is a conditional UPDATE, so a task delivered twice runs once; the close
itself writes one ``MonthClose`` per month and one statement per department and month (unique
constraints), and reports an existing close instead of building it again."""

from __future__ import annotations

import traceback
from dataclasses import asdict
from datetime import date, datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Min, Q
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from portal import permissions as perm
from portal.enqueue import enqueue
from portal.models import User
from quotas.selectors import site_zone

from .meter import watermark
from .models import MonthClose, MonthCloseRun, UsageDay, WhatIfState
from .periods import month_bounds, month_label, month_of, next_month, previous_month
from .selectors import can_close_months
from .services import _check_order, statement_close_month

LIVE = (WhatIfState.QUEUED, WhatIfState.RUNNING)
# A running close that has not moved on for this long has lost its worker (a close moves on
# between its steps; its longest step, the build of a million-job month, takes ~20 s).
STALE = timedelta(minutes=15)


def validation_text(error: ValidationError) -> str:
    """A ValidationError as one line (the command's output, the run's ``error``)."""
    if hasattr(error, "error_dict"):
        return " ".join(m for errors in error.error_dict.values() for e in errors for m in e.messages)
    return " ".join(error.messages)


def month_to_close(now: datetime | None = None) -> date | None:
    """The month the page offers to close: the first month after the last close that has usage,
    else the month before this one; None when that one is closed already or has not ended
    (plus the meter's lag)."""
    now = now or timezone.now()
    last = MonthClose.objects.order_by("-month").values_list("month", flat=True).first()
    # The daily sums, not the ledger: their key starts with the day, so the first day after the
    # last close is one index probe; the ledger has only a BRIN index on its month, and "the
    # first month after the last close" would read every row of the open months — this runs on
    # every Statements page a closer opens.
    days = UsageDay.objects.all() if last is None else UsageDay.objects.filter(day__gte=next_month(last))
    first = days.aggregate(d=Min("day"))["d"]
    month = first.replace(day=1) if first else previous_month(month_of(now, site_zone()))
    if (last is not None and month <= last) or watermark(now) < month_bounds(month, site_zone())[1]:
        return None
    return month


def close_refusal(month: date, now: datetime | None = None) -> str | None:
    """Why ``month`` cannot be closed now, or None: it is closed, it has not ended, or an earlier
    month is still open / a later one closed (months close in order). The rest — a missing
    rate — is found by the close itself, after it has metered up to the month's end."""
    now = now or timezone.now()
    if MonthClose.objects.filter(month=month).exists():
        return _("%(m)s is already closed.") % {"m": month_label(month)}
    if watermark(now) < month_bounds(month, site_zone())[1]:
        return _("%(m)s has not ended yet (or ended within the meter lag).") % {"m": month_label(month)}
    try:
        _check_order(month)
    except ValidationError as exc:
        return validation_text(exc)
    return None


def latest_run(month: date) -> MonthCloseRun | None:
    return MonthCloseRun.objects.filter(month=month).select_related("requested_by").first()


def month_close_request(
    *, actor: User, month: date, now: datetime | None = None, language: str = ""
) -> MonthCloseRun:
    """Ask for ``month`` to be closed in the background; the run under way when there is one."""
    perm.require(can_close_months(actor))
    now = now or timezone.now()
    refusal = close_refusal(month, now)
    if refusal is not None:
        raise ValidationError({"month": [refusal]})
    with transaction.atomic():
        live = MonthCloseRun.objects.select_for_update().filter(month=month, state__in=LIVE).first()
        if live is not None and not _stale(live, now):
            return live
        if live is not None:
            _fail(live.pk, _("No progress since %(at)s: the worker running it stopped.") % {
                "at": timezone.localtime(live.heartbeat_at or live.requested_at).strftime("%Y-%m-%d %H:%M")})
        try:
            with transaction.atomic():
                run = MonthCloseRun.objects.create(month=month, requested_by=actor, language=language)
        except IntegrityError:  # another request created it a moment ago: that one runs
            return MonthCloseRun.objects.get(month=month, state__in=LIVE)
        enqueue("billing.close_month", run.pk)
    return run


def _stale(run: MonthCloseRun, now: datetime) -> bool:
    if run.state == WhatIfState.QUEUED:
        return False  # waiting for a worker is not a failure: the broker keeps the message
    return (run.heartbeat_at or run.requested_at) < now - STALE


def month_close_execute(run_id: int) -> str:
    """The task's body: claim the run, close its month, record the report or the failure.
    Returns the run's final state ("skipped" when it is not this delivery's to run)."""
    now = timezone.now()
    claimed = (
        MonthCloseRun.objects.filter(pk=run_id)
        .filter(Q(state=WhatIfState.QUEUED) | Q(state=WhatIfState.RUNNING, heartbeat_at__lt=now - STALE))
        .update(state=WhatIfState.RUNNING, heartbeat_at=now, step="", error="", details="")
    )
    if not claimed:
        return "skipped"
    run = MonthCloseRun.objects.select_related("requested_by").get(pk=run_id)
    with translation.override(run.language or None):
        return _close(run)


def _close(run: MonthCloseRun) -> str:
    try:
        report = statement_close_month(month=run.month, actor=run.requested_by,
                                       progress=lambda text: _step(run.pk, text))
    except ValidationError as exc:
        _fail(run.pk, validation_text(exc))
        return WhatIfState.FAILED
    except PermissionDenied:
        _fail(run.pk, _("%(user)s may no longer close months.") % {"user": run.requested_by})
        return WhatIfState.FAILED
    except Exception:  # the page shows the failure; the worker stays up
        _fail(run.pk, _("The close failed unexpectedly; nothing was closed. Details for the operators:"),
              details=traceback.format_exc(limit=8)[-4000:])
        return WhatIfState.FAILED
    MonthCloseRun.objects.filter(pk=run.pk).update(
        state=WhatIfState.DONE, step="", report={**asdict(report), "total": str(report.total)},
        finished_at=timezone.now(), heartbeat_at=timezone.now(),
    )
    return WhatIfState.DONE


def _step(run_id: int, text: str) -> None:
    MonthCloseRun.objects.filter(pk=run_id).update(step=text, heartbeat_at=timezone.now())


def _fail(run_id: int, error: str, details: str = "") -> None:
    MonthCloseRun.objects.filter(pk=run_id).update(
        state=WhatIfState.FAILED, error=error, details=details, finished_at=timezone.now())
