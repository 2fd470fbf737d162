"""The API tokens page (docs/identity.md "API tokens"), from the user menu: a signed-in user's own
personal tokens — make one (shown once, on the page that answers the form, and stored nowhere),
list them, revoke one. Everything goes through ``portal.tokens``."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext
from django.views.decorators.http import require_POST

from . import tokens
from .forms import ServiceErrorsMixin
from .selectors import get_visible

DAY_CHOICES = (7, 30, 90, 180, 365)


def _day_choices() -> list[tuple[int, str]]:
    days = sorted({d for d in DAY_CHOICES if d <= tokens.max_days()} | {tokens.max_days()})
    return [(d, ngettext("%(n)d day", "%(n)d days", d) % {"n": d}) for d in days]


class ApiTokenForm(ServiceErrorsMixin, forms.Form):
    name = forms.CharField(
        label=gettext_lazy("Name"), max_length=80,
        help_text=gettext_lazy("What will use it: a script, a notebook, a machine."),
    )
    expires_in_days = forms.TypedChoiceField(label=gettext_lazy("Expires after"), coerce=int, choices=())

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["expires_in_days"].choices = _day_choices()
        self.fields["expires_in_days"].initial = min(tokens.DEFAULT_DAYS, tokens.max_days())


def _page(request, form: ApiTokenForm, issued: tokens.Issued | None = None, status: int = 200):
    response = render(request, "portal/api_tokens.html", {
        "form": form, "issued": issued, "tokens": tokens.visible_api_tokens(request.user),
        "now": timezone.now(),
    }, status=status)
    response["Cache-Control"] = "no-store"  # the page that shows a new token must not be kept
    return response


@login_required
def api_token_list(request):
    if request.method != "POST":
        return _page(request, ApiTokenForm())
    form = ApiTokenForm(request.POST)
    if form.is_valid():
        try:
            issued = tokens.api_token_create(actor=request.user, **form.cleaned_data)
        except ValidationError as exc:
            form.add_service_error(exc)
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        else:
            return _page(request, ApiTokenForm(), issued=issued)
    return _page(request, form, status=400)


@login_required
@require_POST
def api_token_revoke(request, pk: int):
    token = get_visible(tokens.visible_api_tokens(request.user), pk=pk)
    tokens.api_token_revoke(actor=request.user, token=token)
    messages.success(request, _("The token %(name)s was revoked: it no longer works.") % {"name": token.name})
    return redirect("api-token-list")
