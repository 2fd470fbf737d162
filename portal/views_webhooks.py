"""The webhooks page (issue 24 item 7, docs/notifications.md): a user's own hooks and the hooks
of the projects they may edit, each with its delivery log; add, change, delete, send a test.
Everything goes through ``portal.webhooks`` (reads and writes) and ``webhook_test_send``."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy
from django.views.decorators.http import require_POST

from . import webhooks
from .forms import ServiceErrorsMixin
from .models import DeliveryStatus, NotificationTopic, Webhook, WebhookDelivery, WebhookKind
from .selectors import get_visible
from .webhook_delivery import TooManyTestSends, webhook_test_send
from .webhook_formats import masked_url


class WebhookForm(ServiceErrorsMixin, forms.Form):
    name = forms.CharField(label=gettext_lazy("Name"), max_length=80)
    kind = forms.ChoiceField(label=gettext_lazy("Kind"), choices=WebhookKind.choices)
    project = forms.ModelChoiceField(
        label=gettext_lazy("Project"), queryset=None, required=False,
        empty_label=gettext_lazy("— none: my own webhook —"),
        help_text=gettext_lazy("A project's webhook gets every notification about the project, once."),
    )
    url = forms.CharField(
        label=gettext_lazy("URL"), max_length=500,
        help_text=gettext_lazy("The robot's webhook address (https)."),
    )
    secret = forms.CharField(
        label=gettext_lazy("Secret"), max_length=200, required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=gettext_lazy("DingTalk signing (加签) or Feishu signature secret; the key of the JSON "
                               "signature (required there). Never shown again."),
    )
    topics = forms.MultipleChoiceField(
        label=gettext_lazy("Topics"), choices=NotificationTopic.choices, required=False,
        widget=forms.CheckboxSelectMultiple, help_text=gettext_lazy("None ticked: all of them."),
    )
    language = forms.ChoiceField(label=gettext_lazy("Language"), choices=settings.LANGUAGES)
    active = forms.BooleanField(label=gettext_lazy("Active"), required=False, initial=True)

    def __init__(self, *args, user, hook: Webhook | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = webhooks.managed_projects(user).order_by("code")
        if hook is not None:  # kind and owner stay what they were
            del self.fields["kind"], self.fields["project"]
            # The URL holds the robot's key: shown cut short on the page, never in the field.
            self.fields["url"].required = False
            self.fields["url"].help_text = _("Leave blank to keep the saved URL.")
            if hook.secret:
                self.fields["secret"].help_text = _("A secret is saved. Leave blank to keep it.")


@login_required
def webhook_list(request):
    hooks = list(webhooks.visible_webhooks(request.user).order_by("project__code", "name", "id"))
    # Each hook's latest attempt in one query (DISTINCT ON), not one per hook.
    latest = {
        d.webhook_id: d
        for d in WebhookDelivery.objects.filter(webhook__in=hooks)
        .order_by("webhook_id", "-id")
        .distinct("webhook_id")
    }
    for hook in hooks:
        hook.shown_url = masked_url(hook.url)
        hook.last = latest.get(hook.pk)
    return render(request, "portal/webhooks.html", {
        "own": [h for h in hooks if h.user_id == request.user.pk],
        "project_hooks": [h for h in hooks if h.project_id],
        "manages_projects": webhooks.managed_projects(request.user).exists(),
    })


@login_required
def webhook_edit(request, pk: int | None = None):
    """Add a hook, or change one (and read its delivery log)."""
    hook = get_visible(webhooks.visible_webhooks(request.user), pk=pk) if pk is not None else None
    initial = ({"name": hook.name, "topics": hook.topics, "language": hook.language,
                "active": hook.active} if hook else {"language": request.LANGUAGE_CODE, "active": True})
    form = WebhookForm(request.POST if request.method == "POST" else None, initial=initial,
                       user=request.user, hook=hook)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                hook = _save(request.user, hook, form.cleaned_data)
        except ValidationError as exc:
            form.add_service_error(exc)
        except PermissionDenied as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, _("The webhook %(name)s was saved.") % {"name": hook.name})
            return redirect("webhook-edit", hook.pk)
    log = list(webhooks.webhook_log(hook)) if hook else []
    return render(request, "portal/webhook_form.html", {
        "form": form, "hook": hook, "log": log, "shown_url": masked_url(hook.url) if hook else "",
        "DeliveryStatus": DeliveryStatus,
    })


def _save(actor, hook: Webhook | None, data: dict) -> Webhook:
    if hook is None:
        return webhooks.webhook_create(actor=actor, **data)
    if not data.get("url"):
        data = {k: v for k, v in data.items() if k != "url"}
    return webhooks.webhook_update(actor=actor, webhook=hook, **data)


@login_required
@require_POST
def webhook_delete(request, pk: int):
    hook = get_visible(webhooks.visible_webhooks(request.user), pk=pk)
    try:
        with transaction.atomic():
            webhooks.webhook_delete(actor=request.user, webhook=hook)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, _("The webhook %(name)s was deleted.") % {"name": hook.name})
    return redirect("webhook-list")


@login_required
@require_POST
def webhook_test(request, pk: int):
    hook = get_visible(webhooks.visible_webhooks(request.user), pk=pk)
    try:
        row = webhook_test_send(actor=request.user, webhook=hook)
    except PermissionDenied as exc:
        messages.error(request, str(exc))
        return redirect("webhook-list")
    except TooManyTestSends as exc:
        messages.error(request, _("Too many test messages: try again in %(n)d seconds.") % {"n": exc.wait})
        return redirect("webhook-edit", hook.pk)
    if row.status == DeliveryStatus.DELIVERED:
        messages.success(request, _("The test message was delivered."))
    else:
        messages.error(request, _("The test message was not delivered: %(error)s") % {"error": row.error})
    return redirect("webhook-edit", hook.pk)
