"""The approval policies page (DESIGN §6): when a job of a department's subtree needs approval.

Everyone reads the policies of the departments they see and of those above them
(``visible_approval_policies``); a policy is written by whoever administers the department's
parent — platform admins for a top-level department — through ``approval_policy_set``."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.forms.models import fields_for_model, model_to_dict
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from jobs.approvals import (
    POLICY_FIELDS,
    approval_policy_delete,
    approval_policy_set,
    visible_approval_policies,
)
from jobs.models import ApprovalPolicy
from portal import permissions as perm
from portal.forms import ServiceErrorsMixin
from portal.models import Department, User
from portal.selectors import get_visible, scope_for, visible_departments
from quotas.models import Flavor

FORM_FIELDS = ["max_gpus", "max_runtime_hours", "premium_flavors", "flavors", *POLICY_FIELDS[3:]]


def editable_departments(user: User) -> list[Department]:
    """The visible departments whose policy the user may write (``can_edit_department``)."""
    scope = scope_for(user)
    return [d for d in visible_departments(user).order_by("code") if perm.can_edit_department(scope, d)]


class ApprovalPolicyForm(ServiceErrorsMixin, forms.Form):
    """The policy's fields as the model declares them; ``approval_policy_set`` validates."""

    department = forms.ModelChoiceField(queryset=Department.objects.none(), label=gettext_lazy("Department"))

    def __init__(self, *args, departments=None, instance: ApprovalPolicy | None = None, **kwargs):
        if instance is not None:
            kwargs.setdefault("initial", model_to_dict(instance, fields=FORM_FIELDS))
        super().__init__(*args, **kwargs)
        self.fields.update(
            fields_for_model(
                ApprovalPolicy, fields=FORM_FIELDS, widgets={"flavors": forms.CheckboxSelectMultiple}
            )
        )
        self.fields["flavors"].queryset = Flavor.objects.filter(active=True).order_by("name")
        if instance is not None:
            del self.fields["department"]  # a policy stays with its department
        else:
            self.fields["department"].queryset = Department.objects.filter(
                pk__in=[d.pk for d in departments or []]
            ).order_by("code")

    def policy_fields(self) -> dict:
        return {name: self.cleaned_data[name] for name in POLICY_FIELDS if name in self.cleaned_data}


@login_required
def policy_list(request):
    scope = scope_for(request.user)
    policies = (
        visible_approval_policies(request.user).select_related("updated_by").order_by("department__code")
    )
    rows = [{"policy": p, "can_edit": perm.can_edit_department(scope, p.department)} for p in policies]
    return render(
        request,
        "approvals/policies.html",
        {"rows": rows, "can_create": bool(_creatable(request.user))},
    )


def _creatable(user: User) -> list[Department]:
    taken = set(ApprovalPolicy.objects.values_list("department_id", flat=True))
    return [d for d in editable_departments(user) if d.pk not in taken]


@login_required
def policy_edit(request, pk: int | None = None):
    """Create a policy (for a department the user may edit that has none) or change one."""
    instance = None
    if pk is not None:
        instance = get_visible(visible_approval_policies(request.user), pk=pk)
        if not perm.can_edit_department(scope_for(request.user), instance.department):
            raise PermissionDenied
        departments = None
    else:
        departments = _creatable(request.user)
        if not departments and not scope_for(request.user).platform_admin:
            raise PermissionDenied
    data = request.POST if request.method == "POST" else None
    form = ApprovalPolicyForm(data, departments=departments, instance=instance)
    if request.method == "POST" and form.is_valid():
        department = instance.department if instance else form.cleaned_data["department"]
        try:
            with transaction.atomic():
                policy = approval_policy_set(
                    actor=request.user,
                    department=department,
                    flavors=form.cleaned_data["flavors"],
                    **form.policy_fields(),
                )
        except ValidationError as exc:
            form.add_service_error(exc)
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(
                request,
                _("The approval policy of %(department)s was saved.")
                % {"department": policy.department.name},
            )
            return redirect("approval-policy-list")
    return render(request, "approvals/policy_form.html", {"form": form, "instance": instance})


@login_required
@require_POST
def policy_delete(request, pk: int):
    policy = get_visible(visible_approval_policies(request.user), pk=pk)
    name = policy.department.name
    try:
        with transaction.atomic():
            approval_policy_delete(actor=request.user, policy=policy)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request, _("The approval policy of %(department)s was deleted.") % {"department": name}
        )
    return redirect("approval-policy-list")
