"""The generic approval engine (DESIGN §6): requests with chains of steps, deadlines that
escalate or expire, notifications, an append-only audit trail. Kinds register themselves
(``register_kind``); ``portal`` never imports the apps that own them."""

from .context import HISTORY_DAYS, approval_contexts, may_see_context
from .deadlines import approval_deadlines_process
from .registry import KINDS, ApprovalKindHandler, context_providers, handler_for, register_kind
from .selectors import (
    can_cancel,
    can_decide,
    inbox_requests,
    inbox_steps,
    open_step,
    request_audit,
    request_steps,
    visible_approval_requests,
)
from .services import (
    AlreadyDecided,
    StepSpec,
    approval_bulk_decide,
    approval_cancel,
    approval_comment,
    approval_decide,
    approval_request_close,
    approval_request_create,
    approvers_of,
    can_act_on_step,
    request_link,
)

__all__ = [
    "HISTORY_DAYS",
    "KINDS",
    "AlreadyDecided",
    "ApprovalKindHandler",
    "StepSpec",
    "approval_bulk_decide",
    "approval_cancel",
    "approval_comment",
    "approval_contexts",
    "approval_deadlines_process",
    "approval_decide",
    "approval_request_close",
    "approval_request_create",
    "approvers_of",
    "can_act_on_step",
    "can_cancel",
    "can_decide",
    "context_providers",
    "handler_for",
    "inbox_requests",
    "inbox_steps",
    "may_see_context",
    "open_step",
    "register_kind",
    "request_audit",
    "request_link",
    "request_steps",
    "visible_approval_requests",
]
