"""Forms of the billing pages: the reports filter (a GET form) and the budget form."""

from __future__ import annotations

from datetime import date

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.models import Department, User
from portal.selectors import department_children_map, subtree_ids, visible_departments
from quotas.models import Flavor
from quotas.selectors import site_zone

from .budgets import budget_departments, budget_projects
from .models import BUDGET_HOURS
from .periods import month_of, parse_month
from .reports import ReportFilter


def this_month() -> date:
    return month_of(timezone.now(), site_zone())


class ReportFilterForm(forms.Form):
    month = forms.CharField(
        label=_("Month"),
        required=False,
        max_length=7,
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "pattern": r"\d{4}-\d{2}", "size": 8}),
    )
    department = forms.ModelChoiceField(
        label=_("Department"), queryset=Department.objects.none(), required=False, empty_label=_("All")
    )
    flavor = forms.ModelChoiceField(
        label=_("Flavor"), queryset=Flavor.objects.none(), required=False, empty_label=_("All")
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["department"].queryset = visible_departments(user).order_by("code")
        self.fields["flavor"].queryset = Flavor.objects.filter(active=True).order_by("name")

    def clean_month(self) -> date:
        raw = self.cleaned_data.get("month") or ""
        if not raw.strip():
            return this_month()
        try:
            return parse_month(raw)
        except ValueError:
            raise ValidationError(
                _("%(value)s is not a month: use YYYY-MM, e.g. 2026-11."), params={"value": raw[:20]}
            ) from None

    def report_filter(self) -> ReportFilter:
        data = self.cleaned_data
        department = data.get("department")
        subtree = None
        if department is not None:
            subtree = subtree_ids([department.pk], department_children_map())
        flavor = data.get("flavor")
        return ReportFilter(data["month"], subtree, flavor.pk if flavor else None)


class BudgetForm(forms.Form):
    """The owner is ``d<id>`` (a department: its whole subtree) or ``p<id>`` (a project), among
    those the user may budget (``budgets.can_set_budget``)."""

    owner = forms.ChoiceField(label=_("Department or project"))
    card_hours = forms.DecimalField(
        label=_("Card-hours per month"),
        min_value=0.01,
        max_digits=BUDGET_HOURS["max_digits"],
        decimal_places=BUDGET_HOURS["decimal_places"],
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self.departments = {d.pk: d for d in budget_departments(user)}
        self.projects = {p.pk: p for p in budget_projects(user)}
        self.fields["owner"].choices = [
            ("", "—"),
            (_("Departments"), [(f"d{pk}", f"{d.name} ({d.code})") for pk, d in self.departments.items()]),
            (_("Projects"), [(f"p{pk}", f"{p.name} ({p.code})") for pk, p in self.projects.items()]),
        ]

    @property
    def allowed(self) -> bool:
        return bool(self.departments or self.projects)

    def owner_kwargs(self) -> dict:
        raw = self.cleaned_data["owner"]
        pk = int(raw[1:])
        return {"department": self.departments[pk]} if raw[0] == "d" else {"project": self.projects[pk]}
