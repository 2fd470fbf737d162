"""Closing a month from the browser (issue 32 item 9; ``billing.closing``): the page shows what
the close will build — the month's statements as they stand, per department — and asks to
confirm; the close runs in the background and this page, which started it, follows it (htmx
polls the run every 2 s) to its report or its failure. Only for whoever may close
(``selectors.can_close_months``); anyone else gets 404, as for the what-if pages."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.translation import gettext as _

from . import closing, selectors
from .forms import clean_month_text
from .meter import meter_state
from .models import MonthCloseRun
from .periods import month_label
from .views import _estimate_rows


def _closer(request) -> None:
    if not selectors.can_close_months(request.user):
        raise Http404


@login_required
def month_close_page(request):
    """GET ``?month=YYYY-MM`` (default: the month to close next): the preview and the confirm;
    POST: ask for the close, then back here to follow it."""
    _closer(request)
    raw = (request.POST if request.method == "POST" else request.GET).get("month") or ""
    error = None
    month = closing.month_to_close()
    if raw:
        try:
            month = clean_month_text(raw)
        except ValidationError as exc:
            error, month = " ".join(exc.messages), None
    if request.method == "POST" and month is not None:
        if request.POST.get("confirm") != month_label(month):
            error = _not_confirmed()
        else:
            try:
                closing.month_close_request(actor=request.user, month=month,
                                            language=getattr(request, "LANGUAGE_CODE", ""))
            except ValidationError as exc:
                error = closing.validation_text(exc)
            else:
                return redirect(f"{reverse('billing-close')}?month={month_label(month)}")
    return render(request, "billing/close.html", _context(request, month, error),
                  status=400 if error else 200)


def _not_confirmed() -> str:
    return _("Confirm the close on this page: the form did not say which month it closes.")


def _context(request, month, error) -> dict:
    run = closing.latest_run(month) if month else None
    refusal = closing.close_refusal(month) if month else None
    live = run is not None and run.state in closing.LIVE
    estimates = []
    if month is not None and refusal is None and not live:
        estimates = _estimate_rows(selectors.statement_estimate(request.user, month))
    return {
        "month": month,
        "label": month_label(month) if month else "",
        "error": error,
        "refusal": refusal,
        "run": run,
        "live": live,
        "estimates": estimates,
        "total": sum((row["estimate"].total for row in estimates), 0),
        "unpriced": any(row["estimate"].unpriced for row in estimates),
        "metered_through": meter_state().metered_through,
        "currency": settings.GPUPOOL["CURRENCY"],
    }


@login_required
def month_close_progress(request, pk: int):
    """The run's box, which the page polls while the close is queued or running."""
    _closer(request)
    run = get_object_or_404(MonthCloseRun.objects.select_related("requested_by"), pk=pk)
    return render(request, "billing/close_progress.html", {
        "run": run, "live": run.state in closing.LIVE, "label": month_label(run.month),
        "currency": settings.GPUPOOL["CURRENCY"]})
