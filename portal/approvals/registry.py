"""Approval kinds are registered by the apps that own them (``quotas``: quota and loan
requests, ``jobs``: jobs), so ``portal`` runs the workflow without importing them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from portal.models import ApprovalRequest, User


@dataclass(frozen=True)
class ApprovalKindHandler:
    kind: str
    # Called inside the decision's transaction when the last step is approved. It makes the
    # effect (queue the job, change the quota, create the loan) or raises ValidationError, in
    # which case nothing of the decision is kept.
    apply: Callable[[ApprovalRequest, User], None]
    # Called when the request ends without approval: outcome is rejected, expired or cancelled.
    close: Callable[[ApprovalRequest, str, User | None, str], None]
    # Optional: ``POST /api/v1/approvals/`` with ``{"kind": …}`` validates with ``api_input``
    # (a DRF serializer class) and creates with ``api_create(actor, validated_data)``.
    api_input: Any = None
    api_create: Callable[[User, dict], ApprovalRequest] | None = None
    # Optional: ``facts(request, viewer) -> dict | None`` — current figures the request page shows
    # next to the request (a job: the flavor's capacity, the project's quotas and usage).
    facts: Callable[[ApprovalRequest, User], dict | None] | None = None


KINDS: dict[str, ApprovalKindHandler] = {}

# What an approver weighs a request against (issue 24 item 3), from the apps that own the
# figures: ``provide(requests, now) -> {request id: {key: value}}`` for a whole page of requests
# at once — a constant number of queries however many requests there are (the inbox). ``jobs``
# gives usage, capacity, the cost estimate and the requester's jobs; ``billing`` the budgets.
# ``portal.approvals.context`` merges them and decides who may see them.
ContextProvider = Callable[[list["ApprovalRequest"], datetime], dict[int, dict]]
context_providers: list[ContextProvider] = []


def register_kind(handler: ApprovalKindHandler) -> None:
    KINDS[str(handler.kind)] = handler


def handler_for(kind: str) -> ApprovalKindHandler:
    try:
        return KINDS[str(kind)]
    except KeyError:
        raise ImproperlyConfigured(f"No approval kind {kind!r} is registered.") from None
