"""Forms of the billing pages: the reports filter (a GET form) and the budget form."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django.utils.translation import pgettext_lazy

from portal.daterange import OUT_OF_RANGE
from portal.models import Department, Project, User
from portal.selectors import department_children_map, subtree_ids, visible_departments
from quotas.models import Flavor
from quotas.selectors import site_zone

from .budgets import budget_departments, budget_projects
from .manual import ATTACHMENT_MAX, REASON_MAX, can_propose, proposable_departments
from .models import BUDGET_AMOUNT_MAX, BUDGET_HOURS, MONEY, ManualKind
from .periods import (
    FIRST_MONTH,
    LAST_MONTH,
    MonthOutOfRange,
    month_label,
    month_of,
    next_month,
    parse_month,
    previous_month,
)
from .reports import ReportFilter
from .usage import DIMENSIONS, UsageQuery


def this_month() -> date:
    return month_of(timezone.now(), site_zone())


def clean_month_text(raw: str) -> date:
    """A month typed into a form: a field error for anything but YYYY-MM within the range."""
    try:
        return parse_month(raw)
    except MonthOutOfRange:
        raise ValidationError(
            _("Months run from %(first)s to %(last)s."),
            params={"first": month_label(FIRST_MONTH), "last": month_label(LAST_MONTH)},
        ) from None
    except ValueError:
        raise ValidationError(
            _("%(value)s is not a month: use YYYY-MM, e.g. 2026-11."), params={"value": raw[:20]}
        ) from None


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
        return clean_month_text(raw)

    def report_filter(self) -> ReportFilter:
        data = self.cleaned_data
        department = data.get("department")
        subtree = None
        if department is not None:
            subtree = subtree_ids([department.pk], department_children_map())
        flavor = data.get("flavor")
        return ReportFilter(data["month"], subtree, flavor.pk if flavor else None)


FIRST_DAY = date(2000, 1, 1)
END_DAY = date(2101, 1, 1)  # exclusive: the span of portal/daterange.py
DAY = timedelta(days=1)
LAST_DAY = END_DAY - DAY  # the page's last day, included
DATE_INPUT = {"type": "date", "min": FIRST_DAY.isoformat(), "max": END_DAY.isoformat()}
LAST_DATE_INPUT = {"type": "date", "min": FIRST_DAY.isoformat(), "max": LAST_DAY.isoformat()}
DEFAULT_GROUPING = "project"


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=site_zone()).astimezone(UTC)


class _UsageGrouping(forms.Form):
    """The first day and the grouping, as the page and the API read them."""

    start = forms.DateField(
        label=_("From"), required=False, input_formats=["%Y-%m-%d"], widget=forms.DateInput(attrs=DATE_INPUT)
    )
    group_by = forms.ChoiceField(label=_("Group by"), required=False)
    then_by = forms.ChoiceField(label=_("then by"), required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choices = [(k, label) for k, (_l, _j, label) in DIMENSIONS.items()]
        self.fields["group_by"].choices = choices
        self.fields["then_by"].choices = [("", "—"), *choices]

    def _day(self, name: str, default: date, last: date = END_DAY) -> date:
        day = self.cleaned_data.get(name) or default
        if not FIRST_DAY <= day <= last:
            raise ValidationError(OUT_OF_RANGE, code="date_out_of_range")
        return day

    def clean_start(self) -> date:
        return self._day("start", this_month())

    def clean_group_by(self) -> str:
        return self.cleaned_data.get("group_by") or DEFAULT_GROUPING

    def _check_grouping(self, data: dict) -> None:
        if data.get("then_by") and data.get("then_by") == data.get("group_by"):
            self.add_error("then_by", _("Choose a second grouping different from the first."))

    def _end(self) -> date:
        """The day after the last (the query's exclusive end)."""
        raise NotImplementedError

    def usage_query(self) -> UsageQuery:
        data = self.cleaned_data
        group_by = (data["group_by"], data["then_by"]) if data.get("then_by") else (data["group_by"],)
        return UsageQuery(_midnight(data["start"]), _midnight(self._end()), group_by)


class UsageForm(_UsageGrouping):
    """The usage explorer's range and grouping as the API reads them: half-open, from local
    midnight of ``start`` to local midnight of ``end`` (the page: ``UsagePageForm``)."""

    end = forms.DateField(
        label=_("Until (exclusive)"),
        required=False,
        input_formats=["%Y-%m-%d"],
        widget=forms.DateInput(attrs=DATE_INPUT),
    )

    def clean_end(self) -> date:
        return self._day("end", next_month(this_month()))

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end and not start < end:
            self.add_error("end", _("The end must be after the start (the range is [from, until))."))
        self._check_grouping(data)
        return data

    def _end(self) -> date:
        return self.cleaned_data["end"]


class UsagePageForm(_UsageGrouping):
    """The usage page's form (issue 32 item 3): the last day is included, as people enter a month
    (1 to 30 November); the query stays half-open, to midnight after the last day. What is left
    empty is filled with what is used (this month, by project), so the form shows the range and
    grouping of the table below it. A link with the API's exclusive ``end`` (from before) still
    means what it meant: it is read as the day before (docs/billing.md, "Usage explorer")."""

    last = forms.DateField(
        label=_("To (included)"),
        required=False,
        input_formats=["%Y-%m-%d"],
        widget=forms.DateInput(attrs=LAST_DATE_INPUT),
    )
    field_order = ["start", "last", "group_by", "then_by"]

    def __init__(self, data=None, **kwargs):
        super().__init__(self._filled(data or {}), **kwargs)

    @staticmethod
    def _filled(data) -> dict:
        filled = {k: data.get(k, "") for k in ("start", "last", "group_by", "then_by")}
        if not filled["last"] and data.get("end"):
            filled["last"] = _day_before(data["end"])
        month = this_month()
        defaults = {"start": month, "last": next_month(month) - DAY, "group_by": DEFAULT_GROUPING}
        for name, value in defaults.items():
            if not filled[name]:
                filled[name] = str(value)
        return filled

    def clean_last(self) -> date:
        return self._day("last", next_month(this_month()) - DAY, last=LAST_DAY)

    def clean(self):
        data = super().clean()
        start, last = data.get("start"), data.get("last")
        if start and last and last < start:
            self.add_error("last", _("The last day must not be before the first."))
        self._check_grouping(data)
        return data

    def _end(self) -> date:
        return self.cleaned_data["last"] + DAY

    def link(self, **changes) -> str:
        """This form's range and grouping as a query string, with ``changes``."""
        values = {k: str(v) for k, v in {**self.data, **changes}.items() if v}
        return urlencode(values)

    def presets(self) -> list[dict]:
        """"This month" and "last month" as links that keep the grouping."""
        month = this_month()
        found = []
        for label, first in ((_("This month"), month), (_("Last month"), previous_month(month))):
            last = next_month(first) - DAY
            current = self.data["start"] == str(first) and self.data["last"] == str(last)
            found.append({"label": label, "query": self.link(start=first, last=last), "current": current})
        return found


def _day_before(text: str) -> str:
    """An exclusive end as the last day it includes; text that is no date is left for the field to refuse."""
    try:
        return str(datetime.strptime(text, "%Y-%m-%d").date() - DAY)
    except (ValueError, OverflowError):
        return text


class BudgetForm(forms.Form):
    """The owner is ``d<id>`` (a department: its whole subtree) or ``p<id>`` (a project), among
    those the user may budget (``budgets.can_set_budget``)."""

    owner = forms.ChoiceField(label=_("Department or project"))
    card_hours = forms.DecimalField(
        label=_("Card-hours per month"),
        min_value=0.01,
        max_digits=BUDGET_HOURS["max_digits"],
        decimal_places=BUDGET_HOURS["decimal_places"],
        required=False,
    )
    amount = forms.DecimalField(
        min_value=0.01,
        max_value=BUDGET_AMOUNT_MAX,
        max_digits=MONEY["max_digits"],
        decimal_places=MONEY["decimal_places"],
        required=False,
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["amount"].label = _("Amount per month (%(currency)s)") % {
            "currency": settings.GPUPOOL["CURRENCY"]
        }
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

    def clean(self):
        data = super().clean()
        if not self.errors and data.get("card_hours") is None and data.get("amount") is None:
            raise ValidationError(_("Give the budget in card-hours, in money, or both."))
        return data

    def owner_kwargs(self) -> dict:
        raw = self.cleaned_data["owner"]
        pk = int(raw[1:])
        return {"department": self.departments[pk]} if raw[0] == "d" else {"project": self.projects[pk]}


class WhatIfForm(forms.Form):
    """策略推演: a past month and one policy change (``billing.whatif``). Platform admins only,
    so every department and active flavor is offered."""

    CHANGE_CHOICES = [
        ("lend", _("Lend part of a department's quota during some hours")),
        ("overcommit", _("Raise a department's overcommit ratio for a flavor")),
        ("no_backfill", _("Turn backfill off")),
        ("no_borrowing", _("Turn borrowing off (static quotas)")),
    ]
    MODE_CHOICES = [
        ("lend_limit", _("raise its lend limit to X percent of its quota")),
        ("quota", _("lower its quota by X percent")),
    ]

    month = forms.CharField(
        label=_("Month"),
        max_length=7,
        widget=forms.TextInput(attrs={"placeholder": "YYYY-MM", "pattern": r"\d{4}-\d{2}", "size": 8}),
    )
    change = forms.ChoiceField(label=_("Policy change"), choices=CHANGE_CHOICES, widget=forms.RadioSelect)
    department = forms.ModelChoiceField(
        label=_("Department"), queryset=Department.objects.none(), required=False
    )
    flavor = forms.ModelChoiceField(
        label=_("Flavor"), queryset=Flavor.objects.none(), required=False, empty_label=_("All")
    )
    percent = forms.DecimalField(
        label=_("X (%)"), min_value=1, max_value=100, max_digits=5, decimal_places=2, required=False
    )
    mode = forms.ChoiceField(label=_("How"), choices=MODE_CHOICES, required=False)
    start = forms.TimeField(label=_("From (HH:MM)"), required=False, widget=forms.TimeInput(format="%H:%M"))
    end = forms.TimeField(label=_("Until (HH:MM)"), required=False, widget=forms.TimeInput(format="%H:%M"))
    ratio = forms.DecimalField(
        label=_("Overcommit ratio R"),
        min_value=1,
        max_value=10,
        max_digits=5,
        decimal_places=2,
        required=False,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["department"].queryset = Department.objects.order_by("code")
        self.fields["flavor"].queryset = Flavor.objects.filter(active=True).order_by("name")

    def clean_month(self) -> date:
        month = clean_month_text(self.cleaned_data.get("month") or "")
        if month > this_month():
            raise ValidationError(_("Pick a past month (or this one): the future has no jobs yet."))
        return month

    def clean(self):
        data = super().clean()
        change = data.get("change")
        needed = {
            "lend": ("department", "percent", "start", "end"),
            "overcommit": ("department", "flavor", "ratio"),
        }
        for name in needed.get(change, ()):
            if data.get(name) in (None, "") and name not in self.errors:
                self.add_error(name, _("This field is required for this policy change."))
        if change == "lend" and data.get("start") and data.get("start") == data.get("end"):
            self.add_error("end", _("The window must not start and end at the same time."))
        return data

    def params(self) -> dict:
        """The JSON-safe parameters ``billing.whatif.apply_change`` reads."""
        data, change = self.cleaned_data, self.cleaned_data["change"]
        if change == "lend":
            return {
                "department": data["department"].pk,
                "flavor": data["flavor"].pk if data.get("flavor") else None,
                "percent": str(data["percent"]),
                "mode": data.get("mode") or "lend_limit",
                "start": data["start"].strftime("%H:%M"),
                "end": data["end"].strftime("%H:%M"),
            }
        if change == "overcommit":
            return {
                "department": data["department"].pk,
                "flavor": data["flavor"].pk,
                "ratio": str(data["ratio"]),
            }
        return {}


class ManualAdjustmentForm(forms.Form):
    """Propose a manual credit or debit line (``billing.manual``): the service checks the amount
    and the rest, so the form and the API refuse the same things with the same messages."""

    department = forms.ModelChoiceField(label=_("Department"), queryset=Department.objects.none())
    project = forms.ModelChoiceField(
        label=_("Project"), queryset=Project.objects.none(), required=False,
        empty_label=_("— none: the whole department —"),
    )
    kind = forms.ChoiceField(label=_("Credit or debit"), choices=ManualKind.choices)
    amount = forms.CharField(
        label=pgettext_lazy("money", "Amount"),
        max_length=40,
        widget=forms.TextInput(attrs={"inputmode": "decimal", "placeholder": "1200.50"}),
    )
    reason = forms.CharField(
        label=_("Reason"), max_length=REASON_MAX, widget=forms.Textarea(attrs={"rows": 2})
    )
    attachment = forms.CharField(
        label=_("Attachment"),
        max_length=ATTACHMENT_MAX,
        required=False,
        help_text=_("The name or number of the supporting document, e.g. OA-2026-1123.pdf (not uploaded)."),
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        # Filled in per request: "%" on a lazy text at class level translates it once, at import,
        # in the site language — the English page showed it in Chinese (issue 32 item 11).
        self.fields["amount"].help_text = _(
            "In %(currency)s, more than zero, at most two decimals; a credit lowers the statement."
        ) % {"currency": settings.GPUPOOL["CURRENCY"]}
        departments = proposable_departments(user)
        self.fields["department"].queryset = departments
        self.fields["project"].queryset = Project.objects.filter(department__in=departments).order_by("code")
        self.allowed = can_propose(user)
