"""Writes of the approval engine: create a request, decide a step, cancel, comment, and the
deadline sweep. Kinds (job, quota, loan) plug in through ``registry``.

Every state change is a conditional UPDATE from the states ``states`` allows, made while the
request row is locked, so two approvers deciding at the same moment give one outcome and one
audit row; the loser gets ``AlreadyDecided``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal.models import (
    ApprovalAudit,
    ApprovalRequest,
    ApprovalState,
    ApprovalStep,
    AuditAction,
    Department,
    Membership,
    OnDeadline,
    Project,
    Role,
    StepState,
    User,
)
from portal.notifications import notify
from portal.selectors import Scope, department_ancestors, scope_for
from portal.texts import Message, is_message, message, render_for_site

from .registry import handler_for
from .states import REQUEST_TRANSITIONS, STEP_TRANSITIONS, sources_of

MAX_COMMENT = 2000


class AlreadyDecided(ValidationError):
    """The request or step was decided (or ended) before this decision."""


@dataclass(frozen=True)
class StepSpec:
    """One step of a chain as a kind asks for it. A department step goes to the admins of the
    nearest department at or above ``department_id`` that has one (other than the requester),
    or to the platform admins when there is none."""

    approver_role: str  # Role.DEPARTMENT_ADMIN or Role.PLATFORM_ADMIN
    department_id: int | None = None
    timeout: timedelta | None = None
    on_deadline: str = OnDeadline.ESCALATE  # platform steps always expire: nobody is above them


def default_timeout() -> timedelta:
    return timedelta(hours=settings.GPUPOOL["APPROVAL_STEP_HOURS"])


# --- who may act -------------------------------------------------------------------------


def can_act_on_step(scope: Scope, step: ApprovalStep) -> bool:
    """A platform admin may act on any step; a department admin on steps of departments in its
    subtree. Segregation of duties (never the requester) is checked separately."""
    if scope.platform_admin:
        return True
    return step.approver_role == Role.DEPARTMENT_ADMIN and step.department_id in scope.admin_departments


def approvers_of(role: str, department_id: int | None, *, exclude: int | None = None) -> list[User]:
    """The users a step is addressed to: the department's own admins, or the platform admins."""
    if role == Role.PLATFORM_ADMIN:
        users = User.objects.filter(is_active=True).filter(
            pk__in=Membership.objects.filter(role=Role.PLATFORM_ADMIN).values("user_id")
        ) | User.objects.filter(is_active=True, is_superuser=True)
    else:
        users = User.objects.filter(
            is_active=True,
            pk__in=Membership.objects.filter(role=Role.DEPARTMENT_ADMIN, department_id=department_id).values(
                "user_id"
            ),
        )
    return list(users.exclude(pk=exclude).distinct().order_by("id"))


def _route(requester_id: int, role: str, department_id: int | None) -> tuple[str, int | None]:
    if role == Role.DEPARTMENT_ADMIN and department_id is not None:
        for dept_id in department_ancestors(department_id):
            if approvers_of(role, dept_id, exclude=requester_id):
                return role, dept_id
    return Role.PLATFORM_ADMIN, None


def _who(role: str, department_id: int | None) -> str:
    if role == Role.PLATFORM_ADMIN:
        return _("a platform admin")
    department = Department.objects.filter(pk=department_id).first()
    return _("a department admin of %(department)s") % {"department": department or department_id}


# --- small helpers ------------------------------------------------------------------------


def _clean_comment(comment: str | None) -> str:
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise ValidationError({"comment": [_("At most %(n)d characters.") % {"n": MAX_COMMENT}]})
    return comment


def _audit(request, action, *, step=None, actor=None, comment="", data=None, at=None) -> ApprovalAudit:
    return ApprovalAudit.objects.create(
        request=request,
        step=step,
        action=action,
        actor=actor,
        comment=comment,
        data=data or {},
        at=at or timezone.now(),
    )


def _move_step(step: ApprovalStep, target: str, **fields) -> bool:
    sources = sources_of(STEP_TRANSITIONS, target)
    return bool(ApprovalStep.objects.filter(pk=step.pk, state__in=sources).update(state=target, **fields))


def _move_request(request: ApprovalRequest, target: str, **fields) -> bool:
    sources = sources_of(REQUEST_TRANSITIONS, target)
    return bool(
        ApprovalRequest.objects.filter(pk=request.pk, state__in=sources).update(state=target, **fields)
    )


def request_link(request: ApprovalRequest) -> str:
    """The page of the request when the UI has one, its API detail otherwise."""
    try:
        return reverse("approval-detail", args=[request.pk])
    except NoReverseMatch:
        return reverse("api:approval-detail", args=[request.pk])


def _notify(recipients, text: Message, request: ApprovalRequest) -> None:
    # Stored as a message: each recipient reads it in their own language (portal/texts.py).
    notify(recipients=recipients, text=text, link=request_link(request), request=request)


def _summary(request: ApprovalRequest) -> Message | str:
    """The request's summary as a parameter of a notification: its message, or the text of a
    request made before summaries were stored as messages."""
    return request.summary_message or request.summary


# --- create ---------------------------------------------------------------------------------


def approval_request_create(
    *,
    requester: User,
    kind: str,
    summary: Message | str,
    steps: list[StepSpec],
    department: Department | None = None,
    project: Project | None = None,
    counterparty: Department | None = None,
    subject_id: int | None = None,
    payload: dict | None = None,
    reason: str = "",
    now: datetime | None = None,
) -> ApprovalRequest:
    """Record a request with its chain and open the first step. Kinds call this after their
    own permission and validation checks. ``summary`` is a message (``portal.texts.message``),
    rendered for each reader; its site-language text is kept in ``summary`` too."""
    handler_for(kind)
    if not steps:
        raise ValueError("an approval chain needs at least one step")
    reason = (reason or "").strip()
    if len(reason) > MAX_COMMENT:
        raise ValidationError({"reason": [_("At most %(n)d characters.") % {"n": MAX_COMMENT}]})
    now = now or timezone.now()
    request = ApprovalRequest.objects.create(
        kind=kind,
        subject_id=subject_id,
        payload=payload or {},
        summary=render_for_site(summary)[:300],
        summary_message=summary if is_message(summary) else None,
        reason=reason,
        requester=requester,
        department=department,
        project=project,
        counterparty=counterparty,
        created_at=now,
    )
    created = []
    for order, spec in enumerate(steps, start=1):
        created.append(
            ApprovalStep.objects.create(
                request=request,
                order=order,
                approver_role=spec.approver_role,
                department_id=spec.department_id if spec.approver_role == Role.DEPARTMENT_ADMIN else None,
                timeout_seconds=int((spec.timeout or default_timeout()).total_seconds()),
                on_deadline=spec.on_deadline,
                state=StepState.WAITING,
            )
        )
    _audit(
        request,
        AuditAction.CREATED,
        actor=requester,
        comment=reason,
        data={"steps": [[s.approver_role, s.department_id] for s in created]},
        at=now,
    )
    _open_step(request, created[0], now)
    return request


def _open_step(
    request: ApprovalRequest, step: ApprovalStep, now: datetime, *, escalated: bool = False
) -> None:
    """Open ``step``: route it to the nearest level that has an approver other than the
    requester, set its deadline and tell its approvers. A directly following waiting step
    addressed to the same approver is covered by this one (one decision, not two)."""
    role, department_id = _route(request.requester_id, step.approver_role, step.department_id)
    on_deadline = OnDeadline.EXPIRE if role == Role.PLATFORM_ADMIN else step.on_deadline
    deadline = now + timedelta(seconds=step.timeout_seconds)
    if not _move_step(
        step,
        StepState.PENDING,
        approver_role=role,
        department_id=department_id,
        on_deadline=on_deadline,
        opened_at=now,
        deadline=deadline,
    ):
        raise AlreadyDecided(_("This request changed meanwhile; try again."))
    covered = []
    for later in request.steps.filter(state=StepState.WAITING, order__gt=step.order).order_by("order", "id"):
        if _route(request.requester_id, later.approver_role, later.department_id) != (role, department_id):
            break
        if _move_step(later, StepState.SKIPPED, decided_at=now):
            covered.append(later.pk)
    step.refresh_from_db()
    _audit(
        request,
        AuditAction.OPENED,
        step=step,
        at=now,
        data={"role": role, "department": department_id, "deadline": deadline.isoformat(), "covers": covered},
    )
    if escalated:
        text = message(
            gettext_noop("Escalated to you (not decided in time): %(summary)s"), summary=_summary(request)
        )
    else:
        text = message(
            gettext_noop("%(requester)s asks for your approval: %(summary)s"),
            requester=str(request.requester),
            summary=_summary(request),
        )
    _notify(approvers_of(role, department_id, exclude=request.requester_id), text, request)


# --- decide -----------------------------------------------------------------------------------


def _lock(request_id: int) -> ApprovalRequest:
    return ApprovalRequest.objects.select_for_update().get(pk=request_id)


def _already(request: ApprovalRequest) -> AlreadyDecided:
    return AlreadyDecided(
        _("This request was already decided: it is %(state)s.") % {"state": request.get_state_display()}
    )


def approval_decide(
    *,
    actor: User,
    step_or_request: ApprovalStep | ApprovalRequest,
    approve: bool,
    comment: str = "",
    now: datetime | None = None,
) -> ApprovalRequest:
    """Approve or reject the open step of a request (or the given step). Approving the last
    step applies the kind's effect in the same transaction; if the effect is refused the whole
    decision is undone and the error says why. Rejecting ends the request."""
    comment = _clean_comment(comment)
    now = now or timezone.now()
    given_step = step_or_request if isinstance(step_or_request, ApprovalStep) else None
    request_id = given_step.request_id if given_step else step_or_request.pk
    with transaction.atomic():
        request = _lock(request_id)
        step = _decidable_step(actor, request, given_step)
        target = StepState.APPROVED if approve else StepState.REJECTED
        if not _move_step(step, target, decided_by=actor, decided_at=now, comment=comment):
            raise AlreadyDecided(_("This step was already decided."))
        action = AuditAction.APPROVED if approve else AuditAction.REJECTED
        _audit(request, action, step=step, actor=actor, comment=comment, at=now)
        if not approve:
            if not _finish(request, ApprovalState.REJECTED, actor=actor, comment=comment, now=now):
                raise _already(request)
        else:
            following = request.steps.filter(state=StepState.WAITING).order_by("order", "id").first()
            if following is not None:
                _open_step(request, following, now)
            else:
                _finish_approved(request, actor, comment, now)
    request.refresh_from_db()
    return request


def _decidable_step(actor: User, request: ApprovalRequest, given_step: ApprovalStep | None) -> ApprovalStep:
    """The open step ``actor`` is about to decide, or the reason they cannot (the request row
    is locked by the caller)."""
    if request.requester_id == actor.pk:
        raise PermissionDenied(
            _("You made this request, so someone else has to decide it (segregation of duties).")
        )
    if request.state != ApprovalState.PENDING:
        raise _already(request)
    if given_step is not None:
        step = ApprovalStep.objects.get(pk=given_step.pk)
        if step.state != StepState.PENDING:
            raise AlreadyDecided(
                _("This step was already decided: it is %(state)s.") % {"state": step.get_state_display()}
            )
    else:
        step = request.steps.filter(state=StepState.PENDING).first()
        if step is None:
            raise _already(request)
    if not can_act_on_step(scope_for(actor), step):
        if step.approver_role == Role.PLATFORM_ADMIN:
            raise PermissionDenied(_("Only a platform admin can decide this step."))
        raise PermissionDenied(
            _("Only %(who)s or a platform admin can decide this step.")
            % {"who": _who(step.approver_role, step.department_id)}
        )
    return step


def _finish_approved(request: ApprovalRequest, actor: User, comment: str, now: datetime) -> None:
    if not _move_request(request, ApprovalState.APPROVED, decided_at=now):
        raise _already(request)
    request.refresh_from_db()
    try:
        handler_for(request.kind).apply(request, actor)
    except ValidationError as exc:
        # Raising undoes the whole decision (the caller's transaction): nothing is approved.
        raise ValidationError(
            _("Not approved: %(why)s") % {"why": " ".join(str(m) for m in exc.messages)}
        ) from exc
    _audit(request, AuditAction.APPLIED, actor=actor, at=now, data={"subject": request.subject_id})
    text = message(gettext_noop("Approved: %(summary)s"), note=comment, summary=_summary(request))
    _notify([request.requester], text, request)


_OUTCOME_TEXT = {
    ApprovalState.REJECTED: gettext_noop("Rejected: %(summary)s"),
    ApprovalState.EXPIRED: gettext_noop("Expired without a decision: %(summary)s"),
    ApprovalState.CANCELLED: gettext_noop("Cancelled: %(summary)s"),
}


def _finish(
    request: ApprovalRequest,
    outcome: str,
    *,
    actor: User | None,
    comment: str,
    now: datetime,
    step: ApprovalStep | None = None,
) -> bool:
    """End a request without approval: skip what is left of the chain, let the kind undo its
    subject (the job becomes rejected / expired / cancelled), tell the requester."""
    if not _move_request(request, outcome, decided_at=now):
        return False
    request.refresh_from_db()
    for left in request.steps.filter(state__in=[StepState.WAITING, StepState.PENDING]):
        _move_step(left, StepState.SKIPPED, decided_at=now)
    if outcome in (ApprovalState.CANCELLED, ApprovalState.EXPIRED):
        action = AuditAction.CANCELLED if outcome == ApprovalState.CANCELLED else AuditAction.EXPIRED
        _audit(request, action, step=step, actor=actor, comment=comment, at=now)
    handler_for(request.kind).close(request, outcome, actor, comment)
    if actor is None or actor.pk != request.requester_id:
        text = message(_OUTCOME_TEXT[outcome], note=comment, summary=_summary(request))
        _notify([request.requester], text, request)
    return True


def approval_request_close(
    *, request: ApprovalRequest, outcome: str, actor: User | None, comment: str = ""
) -> bool:
    """End a pending request from the kind's side (e.g. its job was cancelled). Returns False
    when it had already ended."""
    with transaction.atomic():
        request = _lock(request.pk)
        if request.state != ApprovalState.PENDING:
            return False
        return _finish(request, outcome, actor=actor, comment=_clean_comment(comment), now=timezone.now())


def approval_cancel(*, actor: User, request: ApprovalRequest, comment: str = "") -> ApprovalRequest:
    """The requester (or a platform admin) withdraws a pending request."""
    comment = _clean_comment(comment)
    if request.requester_id != actor.pk and not scope_for(actor).platform_admin:
        raise PermissionDenied(_("Only the requester or a platform admin can cancel a request."))
    with transaction.atomic():
        locked = _lock(request.pk)
        if locked.state != ApprovalState.PENDING:
            raise _already(locked)
        _finish(locked, ApprovalState.CANCELLED, actor=actor, comment=comment, now=timezone.now())
    request.refresh_from_db()
    return request


def approval_comment(*, actor: User, request: ApprovalRequest, comment: str) -> ApprovalAudit:
    """A comment on the record, from the requester or from someone who may decide it."""
    comment = _clean_comment(comment)
    if not comment:
        raise ValidationError({"comment": [_("Write a comment.")]})
    scope = scope_for(actor)
    is_requester = request.requester_id == actor.pk
    if not is_requester and not any(can_act_on_step(scope, s) for s in request.steps.all()):
        raise PermissionDenied(_("Only the requester and the approvers can comment."))
    entry = _audit(request, AuditAction.COMMENT, actor=actor, comment=comment)
    text = message(
        gettext_noop("%(user)s commented on %(summary)s: %(comment)s"),
        user=str(actor),
        summary=_summary(request),
        comment=comment,
    )
    if is_requester:
        step = request.steps.filter(state=StepState.PENDING).first()
        recipients = approvers_of(step.approver_role, step.department_id, exclude=actor.pk) if step else []
    else:
        recipients = [request.requester]
    _notify(recipients, text, request)
    return entry


def approval_bulk_decide(
    *, actor: User, requests: dict[int, ApprovalRequest | None], approve: bool, comment: str = ""
) -> list[dict]:
    """Decide several requests; each one on its own (one refusal does not undo the others).
    ``requests`` maps each asked id to the visible request, or None when it is not visible."""
    results = []
    for pk, request in requests.items():
        if request is None:
            results.append({"id": pk, "ok": False, "state": None, "error": _("Not found.")})
            continue
        try:
            decided = approval_decide(actor=actor, step_or_request=request, approve=approve, comment=comment)
        except (ValidationError, PermissionDenied) as exc:
            message = " ".join(exc.messages) if isinstance(exc, ValidationError) else str(exc)
            results.append({"id": pk, "ok": False, "state": request.state, "error": message})
        else:
            results.append({"id": pk, "ok": True, "state": decided.state, "error": ""})
    return results
