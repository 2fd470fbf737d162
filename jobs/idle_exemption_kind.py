"""The ``idle_exemption`` approval kind's registration and API body (``jobs.idle_exemptions``
holds the services); kept apart so the services never import the API that calls them."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _h
from rest_framework import serializers

from jobs.idle_exemptions import idle_exemption_apply, idle_exemption_close, idle_exemption_request_create
from jobs.selectors import visible_jobs
from portal.approvals import ApprovalKindHandler, register_kind
from portal.models import ApprovalKind, ApprovalRequest, User


class IdleExemptionRequestIn(serializers.Serializer):
    kind = serializers.CharField(required=False, help_text=_h('"idle_exemption" (on POST /approvals/)'))
    job = serializers.IntegerField(min_value=1, help_text=_h("The job to leave alone (one you can see)."))
    until = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                      help_text=_h("When the exemption ends (empty: for the job's life)."))
    reason = serializers.CharField(max_length=2000)

    def validate_kind(self, value):
        if value != ApprovalKind.IDLE_EXEMPTION:
            raise serializers.ValidationError(
                _("This body is a %(kind)s request.") % {"kind": ApprovalKind.IDLE_EXEMPTION})
        return value

    def validate_job(self, value):
        request = self.context.get("request")
        if request is None:
            raise serializers.ValidationError(_("No such job."))
        job = visible_jobs(request.user).filter(pk=value).first()
        if job is None:
            raise serializers.ValidationError(_("No such job."))
        return job


def create_idle_exemption_request(actor: User, data: dict) -> ApprovalRequest:
    return idle_exemption_request_create(actor=actor, job=data["job"], until=data.get("until"),
                                         reason=data["reason"])


def register() -> None:
    register_kind(ApprovalKindHandler(
        kind=ApprovalKind.IDLE_EXEMPTION,
        apply=idle_exemption_apply,
        close=idle_exemption_close,
        api_input=IdleExemptionRequestIn,
        api_create=create_idle_exemption_request,
    ))
