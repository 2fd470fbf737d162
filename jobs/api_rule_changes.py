"""The API side of rule-change requests: ``POST /api/v1/approvals/`` with ``{"kind": "policy",
"changes": [...], "reason": "…"}`` (docs/approvals.md, "Rule changes"). Platform admins only:
anyone else gets 403 before the body is read."""

from __future__ import annotations

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _h
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from jobs.rule_changes import rule_change_request_create
from portal.models import ApprovalKind, ApprovalRequest, User
from portal.selectors import scope_for


class RuleChangeRequestIn(serializers.Serializer):
    kind = serializers.CharField(required=False, help_text=_h('"policy" (on POST /approvals/)'))
    changes = serializers.JSONField(
        help_text=_h("A list of changes, each {\"type\": project_queueing | quota_limits | quota_window | "
                     "priority_grace | scheduler_backfill | scheduler_packing, the target, the new values, "
                     "optionally \"before\"} (docs/approvals.md, \"Rule changes\")."))
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")

    def run_validation(self, data=serializers.empty):
        request = self.context.get("request")
        if request is None or not scope_for(request.user).platform_admin:
            raise PermissionDenied(_("Only platform admins can ask for rule changes."))
        return super().run_validation(data)

    def validate_kind(self, value):
        if value != ApprovalKind.POLICY:
            raise serializers.ValidationError(
                _("This body is a %(kind)s request.") % {"kind": ApprovalKind.POLICY})
        return value


def create_rule_change_request(actor: User, data: dict) -> ApprovalRequest:
    return rule_change_request_create(actor=actor, changes=data["changes"], reason=data.get("reason", ""))
