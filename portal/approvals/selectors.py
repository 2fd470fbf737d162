"""Reads of approval requests, always from the one scope (``portal.selectors.scope_for``).

A request is visible to its requester, to whoever sees its project as a member, to the
department admins and finance of its department's subtree (and of the counterparty's, e.g. the
lender of a loan), and to platform admins and auditors. Everyone else gets 404."""

from __future__ import annotations

from django.db.models import Exists, OuterRef, Q, QuerySet

from portal.models import ApprovalRequest, ApprovalState, ApprovalStep, Role, StepState, User
from portal.selectors import Scope, scope_for

from .services import can_act_on_step


def visible_approval_requests(user: User) -> QuerySet[ApprovalRequest]:
    scope = scope_for(user)
    qs = ApprovalRequest.objects.select_related("requester", "department", "project", "counterparty")
    if scope.user_id is None:
        return qs.none()
    if scope.sees_everything:
        return qs
    return qs.filter(
        Q(requester_id=scope.user_id)
        | Q(project_id__in=scope.member_projects)
        | Q(department_id__in=scope.department_ids)
        | Q(counterparty_id__in=scope.department_ids)
    )


def _addressed_to(scope: Scope) -> Q:
    """Open steps addressed to the user's level: platform steps for platform admins, department
    steps of the subtree a department admin administers."""
    q = Q(approver_role=Role.DEPARTMENT_ADMIN, department_id__in=scope.admin_departments)
    if scope.platform_admin:
        q |= Q(approver_role=Role.PLATFORM_ADMIN)
    return q


def inbox_steps(user: User) -> QuerySet[ApprovalStep]:
    """Open steps the user is asked to decide now (never on their own requests). Platform
    admins may decide any step; their inbox holds the ones addressed to the platform."""
    scope = scope_for(user)
    if scope.user_id is None:
        return ApprovalStep.objects.none()
    return (
        ApprovalStep.objects.filter(_addressed_to(scope), state=StepState.PENDING)
        .filter(request__state=ApprovalState.PENDING)
        .exclude(request__requester_id=scope.user_id)
        .select_related(
            "request", "request__requester", "request__department", "request__project", "department"
        )
        .order_by("deadline", "id")
    )


def inbox_requests(user: User) -> QuerySet[ApprovalRequest]:
    """The visible requests with a step in the user's inbox."""
    steps = inbox_steps(user).filter(request_id=OuterRef("pk"))
    return visible_approval_requests(user).filter(Exists(steps))


def open_step(request: ApprovalRequest) -> ApprovalStep | None:
    return request.steps.filter(state=StepState.PENDING).select_related("department").first()


def can_decide(user: User, request: ApprovalRequest) -> bool:
    """Whether ``user`` may approve or reject the request now (for showing the buttons)."""
    if request.state != ApprovalState.PENDING or request.requester_id == user.pk:
        return False
    step = open_step(request)
    return step is not None and can_act_on_step(scope_for(user), step)


def can_cancel(user: User, request: ApprovalRequest) -> bool:
    return request.state == ApprovalState.PENDING and (
        request.requester_id == user.pk or scope_for(user).platform_admin
    )


def request_steps(request: ApprovalRequest) -> QuerySet[ApprovalStep]:
    return request.steps.select_related("department", "decided_by").order_by("order", "id")


def request_audit(request: ApprovalRequest):
    return request.audit.select_related("actor", "step").order_by("at", "id")
