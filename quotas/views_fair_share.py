"""The fair-share weight of one node of the tree (DESIGN §16), set or cleared by a platform admin
from the quota tree page or the fair-share report. A node the viewer cannot see is a 404; a bad
weight is shown on the form (400) and changes nothing."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from portal.selectors import scope_for

from .fair_weights import fair_share_weight_clear, fair_share_weight_set, node_shares, visible_owner


class WeightForm(forms.Form):
    # A text field: the service parses and judges the value (one rule for the form and the API).
    weight = forms.CharField(
        label=_("Fair-share weight"), max_length=40, required=False,
        help_text=_("A number greater than 0. Empty the field to return to the default."))


def _back(request) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return "quota-tree"


@login_required
def fair_share_weight(request, kind: str, pk: int):
    owner = visible_owner(request.user, kind, pk)
    if not scope_for(request.user).platform_admin:
        raise PermissionDenied
    found = node_shares(owner)
    form = WeightForm(request.POST if request.method == "POST" else None,
                      initial={"weight": "" if found.weight is None else f"{found.weight.normalize():f}"})
    if request.method == "POST" and form.is_valid():
        raw = form.cleaned_data["weight"].strip()
        try:
            if raw:
                fair_share_weight_set(actor=request.user, owner=owner, weight=raw)
                text = gettext("The fair-share weight of %(owner)s is now %(weight)s.") % {
                    "owner": owner.code, "weight": raw}
            else:
                fair_share_weight_clear(actor=request.user, owner=owner)
                text = gettext("%(owner)s is back to its default fair-share shares.") % {"owner": owner.code}
        except ValidationError as exc:
            form.add_error("weight", exc.message_dict.get("weight", exc.messages))
        else:
            messages.success(request, text)
            return redirect(_back(request))
    if form.errors:
        form.fields["weight"].widget.attrs["aria-invalid"] = "true"
    context = {"form": form, "found": found, "next": request.POST.get("next") or request.GET.get("next", "")}
    return render(request, "quotas/fair_share_weight.html", context, status=400 if form.errors else 200)
