"""The quota and loan kinds of the generic approval engine (``portal.approvals``): what applies
or closes a decided request (``quotas.approvals``) and how the API takes a new one
(``quotas.api_approvals``). Registered once, from ``QuotasConfig.ready``; kept apart so the
services never import the API that calls them."""

from portal.approvals import ApprovalKindHandler, register_kind
from portal.models import ApprovalKind

from .api_approvals import LoanRequestIn, QuotaRequestIn, create_loan_request, create_quota_request
from .approvals import loan_request_apply, loan_request_close, quota_request_apply, quota_request_close


def register() -> None:
    register_kind(
        ApprovalKindHandler(
            kind=ApprovalKind.QUOTA,
            apply=quota_request_apply,
            close=quota_request_close,
            api_input=QuotaRequestIn,
            api_create=create_quota_request,
        )
    )
    register_kind(
        ApprovalKindHandler(
            kind=ApprovalKind.LOAN,
            apply=loan_request_apply,
            close=loan_request_close,
            api_input=LoanRequestIn,
            api_create=create_loan_request,
        )
    )
