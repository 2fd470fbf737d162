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

from portal.selectors import scope_for, visible_projects
from portal.services import project_move

from . import selectors
from .approvals import loan_request_create, quota_request_create
from .forms import (
    LoanRequestForm,
    ProjectMoveForm,
    QuotaRequestForm,
    can_request_loan,
    loan_request_initial,
    request_quota_initial,
)
from .models import Flavor, LoanState, Node, NodeState, QuotaNode

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
    return render(request, "quotas/inventory.html", {"summary": summary})


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
