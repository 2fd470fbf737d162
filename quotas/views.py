from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import Count, Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from portal.selectors import scope_for, visible_projects
from portal.services import project_move

from . import baselines, selectors
from .approvals import loan_request_create, quota_request_create
from .forms import (
    BaselineForm,
    LoanRequestForm,
    ProjectMoveForm,
    QuotaRequestForm,
    can_request_loan,
    loan_request_initial,
    request_quota_initial,
)
from .models import Flavor, LoanState, Node, NodeState, QuotaNode, SoftwareBaseline

LOANS_PAGE_SIZE = 50


@login_required
def inventory(request):
    summary = list(
        Node.objects.values("cluster__name", "flavor__name", "zone", "spine", "state")
        .annotate(nodes=Count("id"), gpus=Sum("gpu_count"))
        .order_by("cluster__name", "flavor__name", "zone", "spine", "state")
    )
    labels = dict(NodeState.choices)
    for row in summary:
        row["state_label"] = labels.get(row["state"], row["state"])
    context = {"summary": summary, "can_manage": scope_for(request.user).platform_admin}
    return render(request, "quotas/inventory.html", context)


# --- software baselines (DESIGN §15): platform admins ----------------------------------------


def _platform_admin(request) -> None:
    if not scope_for(request.user).platform_admin:
        raise PermissionDenied


def _baseline_initial(baseline: SoftwareBaseline | None) -> dict:
    if baseline is None:
        return {}
    return {"flavor": baseline.flavor_id, "cluster": baseline.cluster_id,
            "driver_version": baseline.driver_version, "cuda_version": baseline.cuda_version}


def _baseline_save(request, form: BaselineForm, instance: SoftwareBaseline | None) -> SoftwareBaseline | None:
    """Run the service; its refusals land on the form (None)."""
    try:
        with transaction.atomic():
            if instance is None:
                return baselines.baseline_create(actor=request.user, **form.cleaned_data)
            return baselines.baseline_update(actor=request.user, baseline=instance, **form.cleaned_data)
    except ValidationError as exc:
        form.add_service_error(exc)
    return None


@login_required
def baseline_list(request, pk: int | None = None):
    """Every baseline, and the form that adds one (or changes baseline ``pk``)."""
    _platform_admin(request)
    instance = get_object_or_404(SoftwareBaseline, pk=pk) if pk is not None else None
    data = request.POST if request.method == "POST" else None
    form = BaselineForm(data, initial=_baseline_initial(instance))
    if request.method == "POST" and form.is_valid():
        saved = _baseline_save(request, form, instance)
        if saved is not None:
            text = gettext("The baseline of %(flavor)s was saved.") % {"flavor": saved.flavor.name}
            messages.success(request, text)
            return redirect("baseline-list")
    form.mark_invalid()
    rows = SoftwareBaseline.objects.select_related("flavor", "cluster").order_by(
        "flavor__name", "cluster__name")
    context = {"form": form, "instance": instance, "rows": rows}
    return render(request, "quotas/baselines.html", context, status=400 if form.errors else 200)


@login_required
@require_POST
def baseline_delete(request, pk: int):
    _platform_admin(request)
    baseline = get_object_or_404(SoftwareBaseline, pk=pk)
    baselines.baseline_delete(actor=request.user, baseline=baseline)
    text = gettext("The baseline of %(flavor)s was deleted.") % {"flavor": baseline.flavor.name}
    messages.success(request, text)
    return redirect("baseline-list")


@login_required
def drift_report(request):
    """Every node off its baseline, by flavor and cluster (platform admins and auditors)."""
    if not scope_for(request.user).sees_everything:
        raise PermissionDenied
    groups = baselines.drift_report()
    totals = {"nodes": sum(g.nodes_total for g in groups), "off": sum(len(g.off) for g in groups)}
    context = {"groups": groups, "totals": totals, "can_act": scope_for(request.user).platform_admin}
    return render(request, "quotas/drift.html", context)


class LoanFilterForm(forms.Form):
    state = forms.ChoiceField(required=False, label=_("State"), choices=[("", _("all")), *LoanState.choices])
    flavor = forms.ModelChoiceField(
        queryset=Flavor.objects.order_by("name"),
        to_field_name="name",
        required=False,
        label=_("Flavor"),
        empty_label=_("all"),
    )


@login_required
def loan_list(request):
    """Loans the user can see (as lender's or borrower's side), newest first. Read-only: loans
    are requested and approved through the approval flow."""
    form = LoanFilterForm(request.GET)
    loans = selectors.visible_loans(request.user).select_related("requested_by").order_by("-starts_at", "-id")
    if form.is_valid():
        if form.cleaned_data["state"]:
            loans = loans.filter(state=form.cleaned_data["state"])
        if form.cleaned_data["flavor"]:
            loans = loans.filter(lender__flavor=form.cleaned_data["flavor"])
    page = Paginator(loans, LOANS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "quotas/loans.html",
        {
            "form": form,
            "page": page,
            "now": timezone.now(),
            "can_request_loan": can_request_loan(scope_for(request.user)),
        },
    )


# --- quota and loan requests (approval kinds of quotas.approvals) -------------------------------


def _submit_request(request, form, create):
    """Run the service; its refusals land on the form. Returns the approval request or None."""
    try:
        with transaction.atomic():
            return create(actor=request.user, **form.service_kwargs())
    except ValidationError as exc:
        form.add_service_error(exc)
    except PermissionDenied as exc:
        form.add_error(None, str(exc))
    return None


@login_required
def quota_request_new(request):
    """Ask for a new quota of a flavor for a project or department the user may ask for; the
    approval chain (department admin, then a platform admin if departments must grow) follows."""
    form = QuotaRequestForm(request.POST if request.method == "POST" else None, user=request.user)
    if request.method != "POST":
        form.initial.update(request_quota_initial(request.GET, form))
    elif form.is_valid():
        created = _submit_request(request, form, quota_request_create)
        if created is not None:
            messages.success(
                request, gettext("Quota request #%(id)d was sent for approval.") % {"id": created.pk}
            )
            return redirect("approval-detail", pk=created.pk)
    form.mark_invalid()
    return render(request, "quotas/quota_request_form.html", {"form": form, "current": form.current_quotas()})


@login_required
def loan_request_new(request):
    """Ask a lender department for a loan; the lender's department admin decides."""
    if request.method == "POST":
        form = LoanRequestForm(request.POST, user=request.user)
    else:  # the page, or its lender list re-read for the values chosen so far (htmx)
        form = LoanRequestForm(user=request.user, initial=loan_request_initial(request.GET))
    if request.method == "POST" and form.is_valid():
        created = _submit_request(request, form, loan_request_create)
        if created is not None:
            messages.success(
                request, gettext("Loan request #%(id)d was sent for approval.") % {"id": created.pk}
            )
            return redirect("approval-detail", pk=created.pk)
    form.mark_invalid()
    return render(request, "quotas/loan_request_form.html", {"form": form})


# --- moving a project (platform admins) -----------------------------------------------------------


@login_required
def project_move_page(request, pk: int):
    """Move a project to another department (``portal.services.project_move``): the page states
    what follows for billing, quotas and visibility; the service's refusals land on the form."""
    project = get_object_or_404(visible_projects(request.user).select_related("department"), pk=pk)
    if not scope_for(request.user).platform_admin:
        raise PermissionDenied
    form = ProjectMoveForm(request.POST if request.method == "POST" else None, project=project)
    if request.method == "POST" and form.is_valid():
        try:
            move = project_move(actor=request.user, project=project, **form.service_kwargs())
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(
                request,
                gettext("%(project)s now belongs to %(department)s.")
                % {"project": project, "department": move.to_department},
            )
            return redirect("project-move", pk=project.pk)
    context = {
        "form": form,
        "project": project,
        "nodes": QuotaNode.objects.filter(project=project).select_related("flavor").order_by("flavor__name"),
        "moves": project.moves.select_related("from_department", "to_department", "actor").order_by("-at"),
    }
    return render(request, "quotas/project_move.html", context)
