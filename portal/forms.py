"""Forms of the approval pages. They check the shape of the input; who may decide, cancel or
comment stays in ``portal.approvals`` and reaches the page as a message."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from .approvals.services import MAX_COMMENT
from .models import ApprovalKind, ApprovalState

BULK_MAX = 100  # as the API's bulk-decide


class ServiceErrorsMixin:
    """For a form whose data a service validates: the service's errors land on the field they
    name, the others above the form."""

    def add_service_error(self, error: ValidationError) -> None:
        if hasattr(error, "error_dict"):
            for field, errors in error.error_dict.items():
                self.add_error(field if field in self.fields else None, errors)
        else:
            self.add_error(None, error)


class ApprovalFilterForm(forms.Form):
    """Filters of the request list (GET). Invalid values are ignored."""

    kind = forms.ChoiceField(required=False, label=_("Kind"), choices=[("", _("all")), *ApprovalKind.choices])
    state = forms.ChoiceField(
        required=False, label=_("State"), choices=[("", _("all")), *ApprovalState.choices]
    )

    def filters(self) -> dict:
        self.is_valid()
        return {k: v for k, v in getattr(self, "cleaned_data", {}).items() if v}


class DecisionForm(forms.Form):
    """Approve or reject the open step of one request; the button pressed is the decision."""

    decision = forms.ChoiceField(choices=[("approve", _("Approve")), ("reject", _("Reject"))])
    comment = forms.CharField(
        label=_("Comment"),
        max_length=MAX_COMMENT,
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text=_("Shown to the requester and kept in the audit trail."),
    )

    @property
    def approve(self) -> bool:
        return self.cleaned_data["decision"] == "approve"


class _IdsField(forms.Field):
    """Request numbers ticked in the list (``ids`` repeated)."""

    widget = forms.MultipleHiddenInput
    default_error_messages = {
        "required": _("Tick at least one request."),
        "invalid": _("Request numbers are whole numbers."),
        "too_many": _("At most %(n)d requests at once."),
    }

    def to_python(self, value):
        if not value:
            return []
        try:
            ids = [int(v) for v in value]
        except (TypeError, ValueError):
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None
        if any(i < 1 for i in ids):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        ids = list(dict.fromkeys(ids))
        if len(ids) > BULK_MAX:
            raise ValidationError(self.error_messages["too_many"] % {"n": BULK_MAX}, code="too_many")
        return ids


class BulkDecisionForm(DecisionForm):
    """The same decision and comment for several requests of the list. Which of them the user
    may see and decide is the selector's and the service's business: each id gets its result."""

    ids = _IdsField()


class CommentForm(forms.Form):
    comment = forms.CharField(
        label=_("Comment"), max_length=MAX_COMMENT, widget=forms.Textarea(attrs={"rows": 2})
    )


class CancelForm(forms.Form):
    comment = forms.CharField(label=_("Why (optional)"), max_length=MAX_COMMENT, required=False)
