"""The rule-change kind ("policy") of the generic approval engine: what applies or closes a
decided request (``jobs.rule_changes``) and how the API takes a new one
(``jobs.api_rule_changes``). Registered once, from ``JobsConfig.ready``; kept apart so the
services never import the API that calls them (as ``quotas.approval_kinds``)."""

from jobs.api_rule_changes import RuleChangeRequestIn, create_rule_change_request
from jobs.rule_changes import rule_change_request_apply, rule_change_request_close
from portal.approvals import ApprovalKindHandler, register_kind
from portal.models import ApprovalKind


def register() -> None:
    register_kind(
        ApprovalKindHandler(
            kind=ApprovalKind.POLICY,
            apply=rule_change_request_apply,
            close=rule_change_request_close,
            api_input=RuleChangeRequestIn,
            api_create=create_rule_change_request,
        )
    )
