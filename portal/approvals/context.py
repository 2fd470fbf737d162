"""What an approver weighs a request against (issue 24 item 3): next to each request, the
usage against quota of the flavor it concerns, the capacity free now, the estimated cost, the
requester's recent history and the budgets left this month.

The figures come from the apps that own them, registered in ``registry.context_providers``
(``portal`` imports none of them); this module adds the requester's approval history, which is
its own, and decides who sees any of it. Every provider works on a whole page of requests at
once, so the inbox costs the same number of queries for 5 requests as for 50.

Who sees the context: whoever may act on a step of the request (an approver of its chain), the
department admins and finance of the request's department, and platform admins and auditors.
The requester and the project's members see the request, not the figures next to it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from portal.models import ApprovalRequest, ApprovalState, ApprovalStep, User
from portal.selectors import Scope, scope_for

from .registry import context_providers
from .services import can_act_on_step

HISTORY_DAYS = 90


def may_see_context(scope: Scope, request: ApprovalRequest, steps: Iterable[ApprovalStep]) -> bool:
    """The rule above, from the request's (prefetched) steps: no query."""
    if scope.user_id is None:
        return False
    if scope.sees_everything or request.department_id in scope.department_ids:
        return True
    return any(can_act_on_step(scope, step) for step in steps)


def approval_contexts(
    viewer: User, requests: Iterable[ApprovalRequest], *, now: datetime | None = None
) -> dict[int, dict]:
    """{request id: context} for the requests ``viewer`` may see the context of (the others are
    left out). ``requests`` come from ``visible_approval_requests`` with their steps prefetched
    (``request.steps.all()``; otherwise one query each)."""
    now = now or timezone.now()
    scope = scope_for(viewer)
    shown = [r for r in requests if may_see_context(scope, r, r.steps.all())]
    if not shown:
        return {}
    contexts: dict[int, dict] = {r.pk: {} for r in shown}
    for provide in [_history, *context_providers]:
        for pk, part in provide(shown, now).items():
            _merge(contexts[pk], part)
    return contexts


def _merge(into: dict, part: dict) -> None:
    for key, value in part.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            into[key] = {**into[key], **value}
        else:
            into[key] = value


def _history(requests: list[ApprovalRequest], now: datetime) -> dict[int, dict]:
    """The requester's approval requests decided in the last ``HISTORY_DAYS`` days (any kind):
    how many were approved and how many rejected. One query for all requesters."""
    since = now - timedelta(days=HISTORY_DAYS)
    counts: dict[int, dict[str, int]] = defaultdict(lambda: {"approved": 0, "rejected": 0})
    rows = (
        ApprovalRequest.objects.filter(
            requester_id__in={r.requester_id for r in requests},
            state__in=[ApprovalState.APPROVED, ApprovalState.REJECTED],
            decided_at__gte=since,
            decided_at__lte=now,
        )
        .values_list("requester_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for requester_id, state, n in rows:
        counts[requester_id][str(state)] = n
    return {r.pk: {"history": {"days": HISTORY_DAYS, **counts[r.requester_id]}} for r in requests}
