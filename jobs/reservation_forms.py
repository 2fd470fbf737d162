"""Forms of the reservations page (DESIGN §17): ask for a reservation, schedule a maintenance, set
a queue's state. They check the shape; ``jobs.reservations`` checks the rest, and its refusals land
on the field they name (``portal.forms.ServiceErrorsMixin``). Times are in the site time zone."""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from jobs.reservation_models import QueueState
from portal import permissions as perm
from portal.forms import ServiceErrorsMixin
from portal.models import Department, Project, User
from portal.selectors import scope_for, visible_departments, visible_projects
from quotas.forms import _datetime_field
from quotas.models import Flavor, Node


def editable_projects(user: User) -> list[Project]:
    scope = scope_for(user)
    return [p for p in visible_projects(user).order_by("code") if perm.can_edit_project(scope, p)]


def queue_targets(user: User) -> list[tuple[str, str]]:
    """("p<id>" | "d<id>", label) of the queues ``user`` may set: platform admins every one, a
    department admin its departments and their projects."""
    scope = scope_for(user)
    if scope.platform_admin:
        departments, projects = visible_departments(user), visible_projects(user)
    else:
        departments = Department.objects.filter(pk__in=scope.admin_departments)
        projects = Project.objects.filter(department_id__in=scope.admin_departments)
    return [(f"d{d.pk}", f"{d.name} ({d.code})") for d in departments.order_by("code")] + \
        [(f"p{p.pk}", f"{p.name} ({p.code})") for p in projects.order_by("code")]


class _NodesField(forms.CharField):
    """Node names, separated by commas or spaces; unknown names are an error naming them."""

    def clean(self, value):
        names = sorted(set(str(super().clean(value) or "").replace(",", " ").split()))
        found = {n.name: n for n in Node.objects.filter(name__in=names)}
        unknown = [n for n in names if n not in found]
        if unknown:
            raise forms.ValidationError(_("No such node: %(names)s.") % {"names": ", ".join(unknown)})
        return [found[n] for n in names]


def _window_initial(form: forms.Form) -> None:
    if not form.is_bound:
        start = timezone.localtime().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        form.initial.setdefault("starts_at", start)
        form.initial.setdefault("ends_at", start + timedelta(days=1))


class ReservationRequestForm(ServiceErrorsMixin, forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), label=_("Project"))
    flavor = forms.ModelChoiceField(queryset=Flavor.objects.none(), label=_("Flavor"), required=False)
    gpus = forms.IntegerField(label=_("GPUs"), min_value=1, max_value=1_000_000, required=False,
                              help_text=_("A number of whole GPUs of the flavor, on any nodes."))
    nodes = _NodesField(label=_("Node names"), required=False,
                        help_text=_("Or named nodes instead of a number, separated by commas."))
    starts_at = _datetime_field(_("Starts at"))
    ends_at = _datetime_field(_("Ends at"))
    reason = forms.CharField(label=_("Reason"), max_length=300, required=False)

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        mine = [p.pk for p in editable_projects(user)]
        self.fields["project"].queryset = Project.objects.filter(pk__in=mine).order_by("code")
        self.fields["flavor"].queryset = Flavor.objects.filter(active=True).order_by("name")
        _window_initial(self)

    def service_kwargs(self) -> dict:
        d = self.cleaned_data
        return {"project": d["project"], "flavor": d.get("flavor"), "gpus": d.get("gpus"),
                "nodes": d.get("nodes") or [], "starts_at": d["starts_at"], "ends_at": d["ends_at"],
                "reason": d.get("reason", "")}


class MaintenanceForm(ServiceErrorsMixin, forms.Form):
    nodes = _NodesField(label=_("Node names"), help_text=_("Node names, separated by commas."))
    starts_at = _datetime_field(_("Starts at"))
    ends_at = _datetime_field(_("Ends at"))
    reason = forms.CharField(label=_("Reason"), max_length=300)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _window_initial(self)


class QueueStateForm(ServiceErrorsMixin, forms.Form):
    queue = forms.ChoiceField(label=_("Queue of"))
    state = forms.ChoiceField(label=_("State"), choices=QueueState.choices)
    reason = forms.CharField(label=_("Reason"), max_length=300)

    def __init__(self, *args, user: User, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["queue"].choices = queue_targets(user)

    def owner(self) -> dict:
        key = self.cleaned_data["queue"]
        if key.startswith("p"):
            return {"project": Project.objects.get(pk=int(key[1:]))}
        return {"department": Department.objects.get(pk=int(key[1:]))}
