"""Billing pages: the reports (plotly charts), statements with their chargeback downloads and
the current-month estimate, and budgets. Views validate input with forms and call selectors and
services only; every read starts from the visibility selector (``portal.selectors.scope_for``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.http import Http404, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_POST

from portal.enqueue import enqueue
from portal.models import Department, Project, User
from portal.selectors import get_visible, scope_for
from quotas.models import Flavor
from quotas.selectors import default_flavor_id

from . import charts, closing, exports, manual, readiness, reports, selectors, usage
from .budgets import budget_delete, budget_set, budget_statuses, can_set_budget, visible_budgets
from .forms import (
    BudgetForm,
    ManualAdjustmentForm,
    ReportFilterForm,
    UsagePageForm,
    WhatIfForm,
    clean_month_text,
    this_month,
)
from .meter import meter_state
from .models import ManualState, StatementState, WhatIfRun, WhatIfState
from .periods import month_label, previous_month
from .whatif import charts as whatif_charts
from .whatif import describe as whatif_describe

STATEMENTS_PAGE_SIZE = 50


# --- reports --------------------------------------------------------------------------------------


@login_required
def report_page(request):
    """Six charts of one month, within the viewer's scope (``billing.reports``)."""
    form = ReportFilterForm(request.GET, user=request.user)
    scope = reports.ReportScope.of(request.user)
    context = {"form": form, "scope_empty": scope.empty, "charts": []}
    if form.is_valid() and not scope.empty:
        context.update(_report(request.user, scope, form.report_filter()))
    return render(request, "billing/reports.html", context)


def _titles(month: str, flavor: Flavor | None) -> dict[str, str]:
    return {
        "daily": _("Card-hours by department per day, %(month)s") % {"month": month},
        "quota": _("Quota and usage per department now, %(flavor)s")
        % {"flavor": flavor.name if flavor else "—"},
        "heatmap": _("GPU utilisation by node and day, %(month)s") % {"month": month},
        "waits": _("Queue wait by priority class, %(month)s") % {"month": month},
        "idle": _("Idle jobs: lowest mean utilisation, %(month)s") % {"month": month},
        "costs": _("Cost by project, %(month)s") % {"month": month},
    }


def _empty_states(*, money: bool) -> dict[str, str]:
    return {
        "daily": _("No metered card-hours in this month."),
        "quota": _("No department quota of this flavor is visible to you."),
        "heatmap": _("No utilisation samples in this month."),
        "waits": _("No job was admitted in this month."),
        "idle": _("No metered job with utilisation samples in this month."),
        "costs": _("No costs in this month.")
        if money
        else _("Costs are shown to finance, department admins, platform admins and auditors."),
    }


def _cost_figure(costs: reports.Costs | None, names: dict, title: str) -> str | None:
    if costs is None or not costs.rows:
        return None
    wanted = {p for _d, p, _a in costs.rows if p}
    projects = dict(Project.objects.filter(pk__in=wanted).values_list("id", "code"))
    return charts.project_costs(costs.rows, names, projects, costs.currency, title)


def _report(user: User, scope: reports.ReportScope, report: reports.ReportFilter) -> dict:
    """Each chart: one scoped aggregate query, one figure (None: the empty-state message)."""
    names = dict(Department.objects.values_list("id", "name"))
    daily = reports.daily_card_hours(scope, report)
    # One flavor (quotas of different flavors do not add up): the chosen one, else the quota
    # tree's default — one in which the user's own projects or departments hold quota.
    flavor_id = report.flavor_id or default_flavor_id(user)
    flavor = Flavor.objects.filter(pk=flavor_id).first() if flavor_id else None
    idle = reports.idle_jobs(scope, report)
    costs = reports.project_costs(user, report, settings.GPUPOOL["CURRENCY"])
    titles = _titles(month_label(report.month), flavor)
    figures = {
        "daily": charts.daily_card_hours(report.month, daily, names, titles["daily"]),
        "quota": charts.quota_usage(
            reports.quota_bars(user, report, flavor_id) if flavor_id else [], titles["quota"]
        ),
        "heatmap": charts.node_utilisation(
            report.month, reports.node_utilisation(scope, report), titles["heatmap"]
        ),
        "waits": charts.queue_waits(reports.queue_waits(scope, report), titles["waits"]),
        "idle": charts.idle_jobs(idle, titles["idle"]),
        "costs": _cost_figure(costs, names, titles["costs"]),
    }
    empty = _empty_states(money=costs is not None)
    split = reports.external_split(scope, report)
    split_title = _("Card-hours of portal and external jobs by department, %(month)s") % {
        "month": month_label(report.month)}
    machine = reports.machine_hours(scope, report)
    machine_title = _("Core-hours and GiB-hours by department, %(month)s") % {
        "month": month_label(report.month)}
    return {
        "machine": {
            "figure": charts.machine_hours(machine, names, machine_title),
            "title": machine_title,
        } if machine else None,
        "external_split": {
            "figure": charts.external_split(split, names, split_title),
            "title": split_title,
            "external": sum((e for _d, _p, e in split), 0),
            "total": sum((p + e for _d, p, e in split), 0),
        } if split else None,
        "charts": [
            {"id": f"chart-{k}", "key": k, "title": titles[k], "figure": figures[k], "empty": empty[k]}
            for k in titles
        ],
        "month": report.month,
        "readiness": _readiness(),
        "total_card_hours": sum((hours for _d, _day, hours in daily), 0),
        "metered_through": meter_state().metered_through,
        "idle": idle,
        "costs": costs,
        "flavor": flavor,
    }


def _readiness() -> dict:
    """The domestic readiness report (``billing.readiness``): not per month, not per tenant."""
    rows = readiness.domestic_readiness()
    reference = readiness.reference_name()
    title = _("Domestic cards against the evaluation bar (reference: %(reference)s)") % {
        "reference": reference or "—"
    }
    return {
        "rows": rows,
        "title": title,
        "figure": charts.domestic_readiness(rows, title),
        "reference": reference,
        "frameworks": sorted({c.framework for r in rows for c in r.coverages}),
    }


# --- usage explorer (issue 24) -------------------------------------------------------------------


@login_required
def usage_page(request):
    """Any date range grouped by one or two dimensions (``billing.usage``): a chart, the table,
    and the table as CSV or XLSX (``?format=``). Bad input is a form error (400 for a file)."""
    form = UsagePageForm(request.GET)
    if not form.is_valid():
        if request.GET.get("format"):
            errors = " ".join(e for errs in form.errors.values() for e in errs)
            return HttpResponseBadRequest(errors, content_type="text/plain")
        return render(request, "billing/usage.html", {"form": form, "presets": form.presets()}, status=400)
    report = usage.usage_report(request.user, form.usage_query(), settings.GPUPOOL["CURRENCY"])
    report.metered_through = meter_state().metered_through
    if request.GET.get("format"):
        fmt, bom = _file_options(request)
        if isinstance(fmt, HttpResponse):
            return fmt
        return exports.usage_response(report, fmt, bom=bom)
    group_by = report.query.group_by
    labels = [str(usage.DIMENSIONS[g][2]) for g in group_by]
    first, last = usage.range_days(report.query.start, report.query.end)
    title = _("Card-hours by %(group)s, %(start)s to %(last)s") % {
        "group": " / ".join(labels), "start": first.isoformat(), "last": last.isoformat()}
    return render(
        request,
        "billing/usage.html",
        {
            "form": form,
            "report": report,
            "labels": labels,
            "title": title,
            "figure": charts.usage(report.rows, labels[0], labels[1] if len(labels) > 1 else None, title),
            "scope_empty": reports.ReportScope.of(request.user).empty,
            "query": form.link(),
            "presets": form.presets(),
        },
    )


# --- statements -----------------------------------------------------------------------------------


@login_required
def statement_list(request):
    """Statements the user sees (as the statements API: finance and department admins of the
    subtree, platform admins and auditors; nobody else sees any) and this month's estimate."""
    statements = selectors.visible_statements(request.user).order_by("-month", "department__code")
    page = Paginator(statements, STATEMENTS_PAGE_SIZE).get_page(request.GET.get("page"))
    month = this_month()
    estimates = []
    if selectors.sees_statements(request.user) and not selectors.is_closed(month):
        estimates = _estimate_rows(selectors.statement_estimate(request.user, month))
    return render(
        request,
        "billing/statements.html",
        {
            "page": page,
            "sees": selectors.sees_statements(request.user),
            "month": month,
            "estimates": estimates,
            "metered_through": meter_state().metered_through,
            "currency": settings.GPUPOOL["CURRENCY"],
            "files": _chargeback_files(request.user),
            "close": _month_close(request.user),
        },
    )


def _month_close(user: User) -> dict | None:
    """For whoever may close months: the month to close next (issue 32 item 9)."""
    if not selectors.can_close_months(user):
        return None
    month = closing.month_to_close()
    return {"month": month, "label": month_label(month) if month else ""}


CHARGEBACK_MONTHS_SHOWN = 12


def _chargeback_files(user: User) -> dict | None:
    """The closed months whose chargeback file (of everything the user's statements cover) the
    page offers, and the scope the files state."""
    if not selectors.sees_statements(user):
        return None
    statements = selectors.visible_statements(user).filter(state=StatementState.CLOSED)
    months = statements.order_by("-month").values_list("month", flat=True).distinct()
    departments = selectors.statement_departments(user)
    return {
        "months": [
            {"month": m, "links": [(f, exports.filename(m, f, departments)) for f in exports.FORMATS]}
            for m in months[:CHARGEBACK_MONTHS_SHOWN]
        ],
        "codes": exports.scope_codes(departments),
    }


def _estimate_rows(estimates: list[selectors.Estimate]) -> list[dict]:
    """The estimate's lines with names, looked up in one query per kind of name."""
    keys = [line.key for e in estimates for line in e.lines]
    projects = Project.objects.in_bulk({k.project_id for k in keys if k.project_id})
    users = User.objects.in_bulk({k.user_id for k in keys if k.user_id})
    flavors = Flavor.objects.in_bulk({k.flavor_id for k in keys})
    return [
        {
            "estimate": e,
            "lines": [
                {
                    "line": line,
                    "project": projects.get(line.key.project_id),
                    "user": users.get(line.key.user_id),
                    "flavor": flavors.get(line.key.flavor_id),
                }
                for line in e.lines
            ],
        }
        for e in estimates
    ]


@login_required
def statement_detail(request, pk: int):
    statement = get_visible(selectors.visible_statements(request.user), pk=pk)
    lines = list(selectors.statement_lines(statement))
    shares = selectors.statement_external_shares(statement)
    projects = Project.objects.in_bulk([s.project_id for s in shares])
    return render(
        request,
        "billing/statement.html",
        {
            "statement": statement,
            "lines": lines,
            "external": [{"share": s, "project": projects.get(s.project_id)} for s in shares],
            "closed": statement.state == StatementState.CLOSED,
            "formats": exports.FORMATS,
        },
    )


@login_required
def statement_download(request, pk: int):
    """The chargeback file of one closed statement (the columns of ``billing/exports.py``)."""
    statement = get_visible(selectors.visible_statements(request.user), pk=pk)
    if statement.state != StatementState.CLOSED:
        raise Http404
    fmt, bom = _file_options(request)
    if isinstance(fmt, HttpResponse):
        return fmt
    return exports.chargeback_response(statement.month, frozenset({statement.department_id}), fmt, bom=bom)


def _file_options(request) -> tuple[str, bool] | tuple[HttpResponse, None]:
    """``format`` and the CSV's byte order mark (``bom`` / ``encoding``), or a 400 to answer."""
    fmt = (request.GET.get("format") or "csv").lower()
    if fmt not in exports.FORMATS:
        return HttpResponseBadRequest(_("Unknown format: use csv or xlsx."), content_type="text/plain"), None
    bom = exports.csv_bom(bom=request.GET.get("bom"), encoding=request.GET.get("encoding"))
    if bom is None:
        return HttpResponseBadRequest(exports.encoding_error(), content_type="text/plain"), None
    return fmt, bom


@login_required
def chargeback_download(request):
    """The chargeback file of a closed month for everything the user's statements cover (their
    whole subtree; the centre for platform admins and auditors), or one visible department
    (``?department=``). Nobody else has one: 404, as for another department's file."""
    departments = selectors.statement_departments(request.user)
    if departments is not None and not departments:
        raise Http404
    wanted = request.GET.get("department")
    if wanted:
        if not wanted.isdigit() or (departments is not None and int(wanted) not in departments):
            raise Http404
        departments = frozenset({int(wanted)})
    try:
        month = clean_month_text(request.GET.get("month") or "")
    except ValidationError as exc:
        return HttpResponseBadRequest(" ".join(exc.messages), content_type="text/plain")
    if not selectors.is_closed(month):
        return HttpResponseBadRequest(
            _("%(m)s is not closed yet.") % {"m": month_label(month)}, content_type="text/plain"
        )
    fmt, bom = _file_options(request)
    if isinstance(fmt, HttpResponse):
        return fmt
    return exports.chargeback_response(month, departments, fmt, bom=bom)


# --- manual adjustments (DESIGN §7; docs/manual-adjustments.md) -------------------------------------

ADJUSTMENTS_PAGE_SIZE = 50


def _finance_or_platform(request) -> None:
    """The adjustments page is for finance and platform admins; anyone else gets 404."""
    scope = scope_for(request.user)
    if not (scope.platform_admin or scope.finance_departments):
        raise Http404


def _form_errors(form, exc: ValidationError) -> None:
    errors = exc.error_dict if hasattr(exc, "error_dict") else {None: exc.error_list}
    for field, found in errors.items():
        form.add_error(field if field in form.fields else None, found)


@login_required
def adjustment_list(request):
    """Manual credit and debit lines of the user's departments; the form proposes one, and each
    waiting line offers approve / reject to whoever may decide it (never its proposer)."""
    _finance_or_platform(request)
    form = ManualAdjustmentForm(request.POST if request.method == "POST" else None, user=request.user)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                manual.adjustment_propose(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            _form_errors(form, exc)
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, _("The adjustment was proposed: a second person approves it."))
            return redirect("billing-adjustments")
    adjustments = manual.visible_adjustments(request.user).order_by("-id")
    page = Paginator(adjustments, ADJUSTMENTS_PAGE_SIZE).get_page(request.GET.get("page"))
    rows = [
        {"a": a, "can_decide": a.state == ManualState.PROPOSED and manual.can_decide(request.user, a)}
        for a in page
    ]
    return render(request, "billing/adjustments.html", {"form": form, "page": page, "rows": rows})


@login_required
@require_POST
def adjustment_decide(request, pk: int):
    adjustment = get_visible(manual.visible_adjustments(request.user), pk=pk)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        messages.error(request, _("Choose approve or reject."))
        return redirect("billing-adjustments")
    try:
        manual.adjustment_decide(
            actor=request.user,
            adjustment_id=adjustment.pk,
            approve=decision == "approve",
            note=request.POST.get("note", ""),
        )
    except (PermissionDenied, ValidationError) as exc:
        messages.error(request, " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc))
    else:
        done = _("approved") if decision == "approve" else _("rejected")
        messages.success(request, _("Adjustment #%(id)s %(done)s.") % {"id": adjustment.pk, "done": done})
    return redirect("billing-adjustments")


# --- budgets --------------------------------------------------------------------------------------


@login_required
def budget_list(request):
    """Budgets of the visible departments and projects with this month's usage; the form sets
    one (department admins and finance of the department or above, platform admins)."""
    form = BudgetForm(request.POST if request.method == "POST" else None, user=request.user)
    if request.method == "POST":
        if not form.allowed:
            raise PermissionDenied
        if form.is_valid():
            try:
                with transaction.atomic():
                    budget = budget_set(
                        actor=request.user,
                        card_hours=form.cleaned_data["card_hours"],
                        amount=form.cleaned_data["amount"],
                        **form.owner_kwargs(),
                    )
            except ValidationError as exc:
                errors = exc.error_dict if hasattr(exc, "error_dict") else {None: exc.error_list}
                for field, found in errors.items():
                    form.add_error(field if field in form.fields else None, found)
            except PermissionDenied as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(
                    request, _("The budget of %(owner)s was saved.") % {"owner": budget.owner.name}
                )
                return redirect("billing-budgets")
    elif request.GET.get("owner"):
        form.initial["owner"] = request.GET["owner"]
    scope = scope_for(request.user)
    budgets = list(visible_budgets(request.user))
    statuses = budget_statuses(budgets, series=True)
    current = {(f"p{b.project_id}" if b.project_id else f"d{b.department_id}"): b for b in budgets}
    if request.method != "POST" and form.initial.get("owner") in current:
        chosen = current[form.initial["owner"]]  # "Change": pre-filled
        form.initial.update(card_hours=chosen.card_hours, amount=chosen.amount)
    rows = [
        {
            "budget": b,
            "status": statuses[b.pk],
            "can_edit": can_set_budget(scope, department=b.department, project=b.project),
            "owner_key": f"p{b.project_id}" if b.project_id else f"d{b.department_id}",
            "chart": charts.burn_down(statuses[b.pk], _burn_down_title(b), settings.GPUPOOL["CURRENCY"]),
        }
        for b in sorted(budgets, key=lambda b: (b.project_id is not None, str(b.owner)))
    ]
    return render(
        request,
        "billing/budgets.html",
        {
            "form": form,
            "rows": rows,
            "month": this_month(),
            "thresholds": (80, 100),
            "currency": settings.GPUPOOL["CURRENCY"],
        },
    )


def _burn_down_title(budget) -> str:
    return _("Burn-down: %(owner)s") % {"owner": budget.owner.name}


@login_required
@require_POST
def budget_remove(request, pk: int):
    budget = get_visible(visible_budgets(request.user), pk=pk)
    name = budget.owner.name
    try:
        with transaction.atomic():
            budget_delete(actor=request.user, budget=budget)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("The budget of %(owner)s was deleted.") % {"owner": name})
    return redirect("billing-budgets")


# --- what-if (策略推演) ---------------------------------------------------------------------------

WHATIF_RUNS_SHOWN = 20


def _platform_admin(request) -> None:
    """The what-if pages exist only for platform admins; anyone else gets 404."""
    if not scope_for(request.user).platform_admin:
        raise Http404


@login_required
def what_if(request):
    """The form (a past month, one policy change) and the recent runs; a valid POST writes a
    ``WhatIfRun`` and queues ``billing.what_if`` after the commit."""
    _platform_admin(request)
    form = WhatIfForm(request.POST or None, initial={"month": month_label(previous_month(this_month()))})
    if request.method == "POST" and form.is_valid():
        with transaction.atomic():
            run = WhatIfRun.objects.create(
                created_by=request.user,
                month=form.cleaned_data["month"],
                change=form.cleaned_data["change"],
                params=form.params(),
            )
            enqueue("billing.what_if", run.pk)
        return redirect("what-if-run", pk=run.pk)
    runs = WhatIfRun.objects.select_related("created_by")[:WHATIF_RUNS_SHOWN]
    return render(request, "billing/whatif.html", {"form": form, "runs": runs})


def _what_if_context(run: WhatIfRun) -> dict:
    context = {"run": run, "done": run.state == WhatIfState.DONE, "charts": [],
               "describe": whatif_describe(run)}
    if context["done"] and run.result:
        context.update(whatif_charts(run.result, settings.GPUPOOL["CURRENCY"]))
    return context


@login_required
def what_if_run(request, pk: int):
    _platform_admin(request)
    run = get_visible(WhatIfRun.objects.all(), pk=pk)
    return render(request, "billing/whatif_run.html", _what_if_context(run))


@login_required
def what_if_progress(request, pk: int):
    """The progress fragment the run page polls every 2 s (htmx) until the run is over; then
    it carries the results and stops polling."""
    _platform_admin(request)
    run = get_visible(WhatIfRun.objects.all(), pk=pk)
    return render(request, "billing/whatif_progress.html", _what_if_context(run))
