"""Forms of the quota request and loan request pages. They check the shape of the input; the
rules (who may ask, growth of the departments above, the lender's capacity, the period) stay
in ``quotas.approvals`` and reach the form as errors."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError
from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.daterange import validate_in_range
from portal.models import Department, Project, User
from portal.selectors import Scope, scope_for

from .approvals import loan_lenders
from .models import Cluster, Flavor, QuotaNode
from .selectors import default_flavor_id, loan_lenders_lendable

QUANTITY = {"max_digits": 12, "decimal_places": 3, "min_value": Decimal(0), "max_value": Decimal(1_000_000)}
DATETIME_LOCAL = "%Y-%m-%dT%H:%M"
DEFAULT_LOAN_DAYS = 7


# --- who may ask: the rules of quotas.approvals, as querysets for the choices ----------------


def can_request_quota(scope: Scope, node: QuotaNode) -> bool:
    """Whether the quota tree offers "request more" on ``node`` (``quota_request_create``'s rule)."""
    if scope.platform_admin:
        return True
    if node.project_id is not None:
        return (
            node.project_id in scope.member_projects or node.project.department_id in scope.admin_departments
        )
    return node.department_id in scope.admin_departments


def can_request_any_quota(scope: Scope) -> bool:
    """Whether the user is someone who could ask for a quota at all (member, admin, platform)."""
    return scope.platform_admin or bool(scope.member_projects) or bool(scope.admin_departments)


def can_request_loan(scope: Scope) -> bool:
    """Whether the user administers anything that could borrow (``loan_request_create``'s rule)."""
    return scope.platform_admin or bool(scope.admin_departments) or bool(scope.admin_projects)


def quota_owners(user: User) -> tuple[QuerySet[Project], QuerySet[Department]]:
    """Projects (members and admins; admins of their department) and departments (their admins)
    whose quota the user may ask to change."""
    scope = scope_for(user)
    projects = Project.objects.filter(active=True).select_related("department").order_by("code")
    departments = Department.objects.order_by("code")
    if scope.platform_admin:
        return projects, departments
    return (
        projects.filter(Q(id__in=scope.member_projects) | Q(department_id__in=scope.admin_departments)),
        departments.filter(id__in=scope.admin_departments),
    )


def loan_borrowers(user: User) -> tuple[QuerySet[Project], QuerySet[Department]]:
    """Projects and departments the user may borrow for: their admins (and platform admins)."""
    scope = scope_for(user)
    projects = Project.objects.filter(active=True).select_related("department").order_by("code")
    departments = Department.objects.order_by("code")
    if scope.platform_admin:
        return projects, departments
    projects = projects.filter(Q(id__in=scope.admin_projects) | Q(department_id__in=scope.admin_departments))
    return projects, departments.filter(id__in=scope.admin_departments)


# --- shared parts --------------------------------------------------------------------------------


def _owner_choices(projects, departments) -> list:
    choices = []
    if departments:
        choices.append(
            (_("Departments"), [(f"department:{d.pk}", f"{d.name} ({d.code})") for d in departments])
        )
    if projects:
        choices.append((_("Projects"), [(f"project:{p.pk}", f"{p.name} ({p.code})") for p in projects]))
    return choices


class _ServiceErrors:
    """Errors raised by the service land on the field they name, others above the form."""

    def add_service_error(self, error: ValidationError) -> None:
        if hasattr(error, "error_dict"):
            for field, errors in error.error_dict.items():
                name = self.SERVICE_FIELDS.get(field, field)
                self.add_error(name if name in self.fields else None, errors)
        else:
            self.add_error(None, error)

    def mark_invalid(self) -> None:
        for name in self.errors:
            if name in self.fields:
                self.fields[name].widget.attrs["aria-invalid"] = "true"


class _OwnerForm(_ServiceErrors, forms.Form):
    def _setup_owner(self, projects, departments) -> None:
        self._projects = {p.pk: p for p in projects}
        self._departments = {d.pk: d for d in departments}
        self.fields["owner"].choices = [("", "---------"), *_owner_choices(projects, departments)]

    def clean_owner(self):
        kind, _sep, pk = self.cleaned_data["owner"].partition(":")
        found = (self._projects if kind == "project" else self._departments).get(int(pk))
        if found is None:  # the choices already refuse it; kept for safety
            raise ValidationError(_("Choose one of the list."))
        return found

    @property
    def has_owners(self) -> bool:
        return bool(self._projects or self._departments)


# --- quota request --------------------------------------------------------------------------------


class QuotaRequestForm(_OwnerForm):
    """Ask for a new quota of one flavor for a project or a department."""

    SERVICE_FIELDS = {"project": "owner", "department": "owner"}

    owner = forms.ChoiceField(label=_("Project or department"))
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Flavor"))
    quota = forms.DecimalField(
        label=_("New quota"),
        **QUANTITY,
        help_text=_("GPUs of the flavor (whole cards; slices for shareable flavors)."),
    )
    reason = forms.CharField(
        label=_("Reason"),
        max_length=2000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=_("What the quota is for; the approvers read it."),
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self._setup_owner(*quota_owners(user))
        self.fields["flavor"].queryset = Flavor.objects.filter(active=True).order_by("name")

    def current_quotas(self, limit: int = 100) -> list[QuotaNode]:
        """The quotas the user may ask to change, as they are now (shown beside the form)."""
        nodes = QuotaNode.objects.filter(
            Q(project_id__in=list(self._projects)) | Q(department_id__in=list(self._departments))
        )
        nodes = nodes.select_related("flavor", "project", "department")
        return list(nodes.order_by("flavor__name", "department__code", "project__code")[:limit])

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        owner = data["owner"]
        key = "project" if isinstance(owner, Project) else "department"
        return {"flavor": data["flavor"], "quota": data["quota"], "reason": data["reason"], key: owner}


# --- loan request ---------------------------------------------------------------------------------


def _datetime_field(label):
    return forms.DateTimeField(
        label=label,
        input_formats=[DATETIME_LOCAL, "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"],
        validators=[validate_in_range],
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format=DATETIME_LOCAL),
    )


class LoanRequestForm(_OwnerForm):
    """Ask a lender department for an amount of a flavor for a period. Times are entered in the
    site time zone (the zone every page shows).

    The lender list depends on the flavor and the period (issue 32 item 8): only departments that
    hold quota of the chosen flavor and can still lend some of it then are offered, each with the
    amount it can lend (``quotas.selectors.loan_lenders_lendable``, the service's own rule). The
    page re-reads the list when the flavor, the period or the borrower changes (htmx); without
    JavaScript a stale choice is a form error on the lender that names what went wrong."""

    SERVICE_FIELDS = {"borrower": "owner"}

    owner = forms.ChoiceField(label=_("Borrower"))
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Flavor"))
    # A plain value checked in clean(): the choices are only what the form offers now.
    lender = forms.CharField(label=_("Lender"), widget=forms.Select(attrs={"data-keep-choice": ""}))
    amount = forms.DecimalField(label=_("Amount"), **QUANTITY, help_text=_("GPUs of the flavor to borrow."))
    starts_at = _datetime_field(_("Starts at"))
    ends_at = _datetime_field(_("Ends at"))
    reason = forms.CharField(
        label=_("Reason"), max_length=2000, required=False, widget=forms.Textarea(attrs={"rows": 3})
    )

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self._setup_owner(*loan_borrowers(user))
        self.fields["flavor"].queryset = Flavor.objects.filter(active=True).order_by("name")
        if not self.is_bound:
            start = timezone.localtime().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
            self.initial.setdefault("starts_at", start)
            self.initial.setdefault("ends_at", start + timedelta(days=DEFAULT_LOAN_DAYS))
            if "flavor" not in self.initial:
                self.initial["flavor"] = default_flavor_id(user)
        self.flavor_shown = self._chosen_flavor()
        self.lenders = self._offered_lenders()
        self.fields["lender"].widget.choices = [("", "---------")] + [
            (lender.department.code, _lender_label(lender)) for lender in self.lenders
        ]
        if self.flavor_shown is None:
            self.fields["lender"].help_text = _(
                "Choose a flavor: the departments that can lend it are listed.")
        else:
            self.fields["lender"].help_text = _(
                "Departments that can lend %(flavor)s in the period, with the amount each can still lend."
            ) % {"flavor": self.flavor_shown.name}

    def _value(self, name: str):
        """What the user gave for ``name`` (bound data, else the initial value), cleaned by its
        field, or None when it is missing or not valid (the form's own errors say so)."""
        field = self.fields[name]
        if self.is_bound:
            raw = field.widget.value_from_datadict(self.data, self.files, self.add_prefix(name))
        else:
            raw = self.get_initial_for_field(field, name)
        if raw in (None, ""):
            return None
        try:
            return field.clean(raw)
        except ValidationError:
            return None

    def _chosen_flavor(self) -> Flavor | None:
        return self._value("flavor")

    def _period(self) -> tuple:
        starts_at, ends_at = self._value("starts_at"), self._value("ends_at")
        if starts_at is None or ends_at is None or ends_at <= starts_at:
            return None, None  # unknown: what each has lent at any time from now on
        return starts_at, ends_at

    def _borrower_department_id(self) -> int | None:
        """The department a department borrower is: it cannot borrow from itself."""
        kind, _sep, pk = str(self._raw_owner() or "").partition(":")
        return int(pk) if kind == "department" and pk.isdigit() else None

    def _raw_owner(self):
        if self.is_bound:
            return self.data.get(self.add_prefix("owner"))
        return self.initial.get("owner")

    def _offered_lenders(self) -> list:
        if self.flavor_shown is None:
            return []
        own = self._borrower_department_id()
        return [
            lender for lender in loan_lenders_lendable(self.flavor_shown.pk, *self._period())
            if lender.department.pk != own
        ]

    def clean(self):
        data = super().clean()
        owner, flavor, code = data.get("owner"), data.get("flavor"), data.get("lender")
        if flavor is None:
            return data
        if code:
            offered = {lender.department.code: lender for lender in self.lenders}
            if code not in offered:
                self.add_error("lender", self._not_offered(code, flavor))
                data["lender"] = None
            else:
                data["lender"] = offered[code].department
        if owner is not None:
            field = "project" if isinstance(owner, Project) else "department"
            node = QuotaNode.objects.filter(flavor=flavor, **{field: owner}).select_related("flavor").first()
            if node is None:
                self.add_error(
                    "owner",
                    _("%(owner)s holds no quota of %(flavor)s; ask for a quota first.")
                    % {"owner": owner, "flavor": flavor.name},
                )
            data["borrower"] = node
        return data

    def _not_offered(self, code: str, flavor: Flavor) -> str:
        """Why a lender is not on the list: it holds none of the flavor, it is the borrower
        itself, or it has lent all of it in the period."""
        holds = loan_lenders(flavor).filter(code=code).first()
        if holds is None:
            return _("%(lender)s holds no quota of %(flavor)s to lend.") % {
                "lender": code, "flavor": flavor.name}
        if holds.pk == self._borrower_department_id():
            return _("A department cannot borrow from itself.")
        return _("%(lender)s has no %(flavor)s left to lend in this period.") % {
            "lender": holds, "flavor": flavor.name}

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {
            name: data[name] for name in ("borrower", "lender", "amount", "starts_at", "ends_at", "reason")
        }


def _lender_label(lender) -> str:
    return _("%(name)s (%(code)s) — %(amount)s of %(flavor)s lendable") % {
        "name": lender.department.name,
        "code": lender.department.code,
        "amount": f"{lender.lendable.normalize():f}",
        "flavor": lender.node.flavor.name,
    }


def loan_request_initial(params) -> dict:
    """The choices the page was asked to show (``?flavor=<id>&starts_at=…``): the htmx refresh of
    the lender list sends the form's current values; the flavor may be named too (the quota tree)."""
    initial = {}
    for name in ("owner", "starts_at", "ends_at", "amount", "reason", "lender"):
        if params.get(name):
            initial[name] = params[name]
    flavor = params.get("flavor") or ""
    found = Flavor.objects.filter(active=True).filter(
        Q(pk=int(flavor)) if flavor.isdigit() else Q(name=flavor)
    ).values_list("pk", flat=True).first() if flavor else None
    if found is not None:
        initial["flavor"] = found
    return initial


def request_quota_initial(params, form: QuotaRequestForm) -> dict:
    """``?project=<code>`` or ``?department=<code>`` and ``&flavor=<name>`` (the quota tree's
    "request more") preselect the owner and flavor and start from the current quota."""
    initial = {}
    owner = None
    if params.get("project"):
        owner = next((p for p in form._projects.values() if p.code == params["project"]), None)
        if owner is not None:
            initial["owner"] = f"project:{owner.pk}"
    elif params.get("department"):
        owner = next((d for d in form._departments.values() if d.code == params["department"]), None)
        if owner is not None:
            initial["owner"] = f"department:{owner.pk}"
    flavor = Flavor.objects.filter(active=True, name=params.get("flavor") or "").first()
    if flavor is not None:
        initial["flavor"] = flavor.pk
        if owner is not None:
            field = "project" if isinstance(owner, Project) else "department"
            node = QuotaNode.objects.filter(flavor=flavor, **{field: owner}).first()
            if node is not None:
                initial["quota"] = node.quota.normalize()
    return initial


class ProjectMoveForm(forms.Form):
    """Where a project goes, from when, and why (``portal.services.project_move``)."""

    department = forms.ModelChoiceField(queryset=Department.objects.none(), label=_("New department"))
    at = forms.DateTimeField(
        label=_("Effective from"),
        required=False,
        help_text=_("Site time, e.g. 2026-03-01 00:00. Empty: now."),
        widget=forms.DateTimeInput(attrs={"placeholder": "YYYY-MM-DD HH:MM"}),
    )
    reason = forms.CharField(label=_("Reason"), max_length=300, widget=forms.Textarea(attrs={"rows": 3}))

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        others = Department.objects.exclude(pk=project.department_id)
        self.fields["department"].queryset = others.order_by("code")

    def service_kwargs(self) -> dict:
        data = self.cleaned_data
        return {"to_department": data["department"], "at": data["at"], "reason": data["reason"]}


class BaselineForm(_ServiceErrors, forms.Form):
    """A software baseline (DESIGN §15); the service (quotas.baselines) checks the versions and
    that the flavor has no other baseline there."""

    SERVICE_FIELDS: dict[str, str] = {}

    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Flavor"))
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.none(), required=False, label=_("Cluster"), empty_label=_("every cluster"),
        help_text=_("A cluster's baseline overrides the flavor's baseline for every cluster."),
    )
    driver_version = forms.CharField(
        max_length=40, required=False, label=_("Driver version"),
        widget=forms.TextInput(attrs={"placeholder": "535.104.05"}),
    )
    cuda_version = forms.CharField(
        max_length=20, required=False, label=_("CUDA version"),
        widget=forms.TextInput(attrs={"placeholder": "12.4"}),
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["flavor"].queryset = Flavor.objects.order_by("name")
        self.fields["cluster"].queryset = Cluster.objects.order_by("name")
