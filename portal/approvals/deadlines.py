"""Deadlines of approval steps (DESIGN §6): an overdue department step escalates to the next
level up, an overdue platform step (nobody is above it) expires the request. Run every minute
by the ``portal.approvals_tick`` beat task."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction
from django.utils import timezone

from portal.models import (
    ApprovalRequest,
    ApprovalState,
    ApprovalStep,
    AuditAction,
    Department,
    OnDeadline,
    Role,
    StepState,
)

from .services import _audit, _finish, _lock, _move_step, _open_step, _route


def approval_deadlines_process(*, now: datetime | None = None, limit: int = 500) -> dict[str, int]:
    """Escalate or expire every open step past its deadline. Idempotent: each step is moved by
    a conditional update under the request lock, so a second run (or a decision racing it)
    changes nothing twice."""
    now = now or timezone.now()
    counts = {"escalated": 0, "expired": 0}
    due = ApprovalStep.objects.filter(state=StepState.PENDING, deadline__lte=now).order_by("deadline", "id")
    for pk, request_id in due.values_list("pk", "request_id")[:limit]:
        with transaction.atomic():
            request = _lock(request_id)
            step = ApprovalStep.objects.get(pk=pk)
            if (
                request.state != ApprovalState.PENDING
                or step.state != StepState.PENDING
                or step.deadline > now
            ):
                continue
            if step.approver_role == Role.DEPARTMENT_ADMIN and step.on_deadline == OnDeadline.ESCALATE:
                _escalate(request, step, now)
                counts["escalated"] += 1
            else:
                _expire(request, step, now)
                counts["expired"] += 1
    return counts


def _escalate(request: ApprovalRequest, step: ApprovalStep, now: datetime) -> None:
    parent_id = Department.objects.filter(pk=step.department_id).values_list("parent_id", flat=True).first()
    if parent_id is None:
        role, department_id = Role.PLATFORM_ADMIN, None
    else:
        role, department_id = _route(request.requester_id, Role.DEPARTMENT_ADMIN, parent_id)
    if not _move_step(step, StepState.ESCALATED, decided_at=now):
        return
    successor = ApprovalStep.objects.create(
        request=request,
        order=step.order,
        approver_role=role,
        department_id=department_id,
        timeout_seconds=step.timeout_seconds,
        on_deadline=step.on_deadline,
        state=StepState.WAITING,
        escalated_from=step,
    )
    _audit(request, AuditAction.ESCALATED, step=step, at=now, data={"to": [role, department_id]})
    _open_step(request, successor, now, escalated=True)


def _expire(request: ApprovalRequest, step: ApprovalStep, now: datetime) -> None:
    if not _move_step(step, StepState.EXPIRED, decided_at=now):
        return
    _finish(request, ApprovalState.EXPIRED, actor=None, comment="", now=now, step=step)
