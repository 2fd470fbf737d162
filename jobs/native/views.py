"""The external sources page (DESIGN §11): the Slurm accounts and Kubernetes namespaces external
jobs come from. Platform admins see the unmapped ones with what was seen running from them and
map each to a project in one step; mapped sources are listed read-only. Reads go through
``visible_external_sources``; the mapping through ``services.external_source_map``."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.db import transaction
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_POST

from jobs.native import services
from jobs.native.external_sources import can_map_sources, observed, visible_external_sources
from portal import permissions as perm
from portal.models import Project
from portal.selectors import get_visible

SHOWN = 500  # sources per list: a centre has tens of accounts; more is a sign to use the API


class MapSourceForm(forms.Form):
    project = forms.ModelChoiceField(queryset=Project.objects.none(), label=gettext_lazy("Project"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Platform admins only reach this form: every active project is theirs to choose.
        self.fields["project"].queryset = Project.objects.filter(active=True).order_by("code")


@login_required
def external_source_list(request):
    sources = visible_external_sources(request.user).order_by("cluster__name", "kind", "name")
    unmapped = list(sources.filter(project__isnull=True)[:SHOWN])
    mapped = list(sources.filter(project__isnull=False)[:SHOWN])
    seen = observed(unmapped)
    can_map = can_map_sources(request.user)
    return render(request, "jobs/external_sources.html", {
        "unmapped": [{"source": s, "observed": seen.get(s.pk)} for s in unmapped],
        "mapped": mapped,
        "form": MapSourceForm() if can_map else None,
    })


@login_required
@require_POST
def external_source_map(request, pk: int):
    source = get_visible(visible_external_sources(request.user), pk=pk)
    perm.require(can_map_sources(request.user))
    form = MapSourceForm(request.POST)
    if not form.is_valid():
        messages.error(request, _("Choose an active project to map %(name)s to.") % {"name": source.name})
        return redirect("external-source-list")
    project = form.cleaned_data["project"]
    try:
        with transaction.atomic():
            outcome = services.external_source_map(actor=request.user, source=source, project=project)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("external-source-list")
    created = outcome.counts["created"]
    text = ngettext(
        "%(name)s is now mapped to project %(project)s: %(n)d job was recorded. Its metering "
        "back-fills on the meter's next run.",
        "%(name)s is now mapped to project %(project)s: %(n)d jobs were recorded. Their metering "
        "back-fills on the meter's next run.",
        created,
    ) % {"name": source.name, "project": project.code, "n": created}
    if outcome.counts["unknown_resource"]:
        text += " " + _("%(n)d left out: their resource names no flavor.") % {
            "n": outcome.counts["unknown_resource"]}
    messages.success(request, text)
    return redirect("external-source-list")
