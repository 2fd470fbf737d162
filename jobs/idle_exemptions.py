"""Exemptions from the idle policy (DESIGN §16): the ``idle_exemption`` kind of the generic
approval engine. A user asks for one job (``POST /api/v1/approvals/`` with ``{"kind":
"idle_exemption", "job": id, "until": …, "reason": …}``); the department admin of the job's
project decides; approved, an ``IdleExemption`` row makes ``jobs.idle_service`` leave the job alone
(until ``until`` when one is given). The kind's API side is ``jobs.idle_exemption_kind``."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.idle_models import IdleExemption
from jobs.models import Job, JobKind
from jobs.states import TERMINAL
from portal import permissions as perm
from portal.approvals import StepSpec, approval_request_create
from portal.models import ApprovalKind, ApprovalRequest, Role, User
from portal.selectors import scope_for
from portal.texts import message

STEP_TIMEOUT = timedelta(hours=48)


def idle_exemption_request_create(*, actor: User, job: Job, until: datetime | None, reason: str,
                                  now: datetime | None = None) -> ApprovalRequest:
    """Ask that ``job`` be left alone by the idle policy (until ``until``; None: for its life).
    Its owner or whoever may edit its project asks; a live portal job only; ``until`` in the
    future; a reason is required (the approver weighs it)."""
    now = now or timezone.now()
    perm.require(job.submitted_by_id == actor.pk or perm.can_edit_project(scope_for(actor), job.project))
    if job.kind == JobKind.EXTERNAL or job.state in TERMINAL:
        raise ValidationError({"job": [_("Only a job that has not ended, submitted through the portal, "
                                         "can be exempted from the idle policy.")]})
    if until is not None and until <= now:
        raise ValidationError({"until": [_("Must be in the future.")]})
    if not (reason or "").strip():
        raise ValidationError({"reason": [_("Say why the job may hold its GPUs while they are idle.")]})
    project = job.project
    return approval_request_create(
        requester=actor,
        kind=ApprovalKind.IDLE_EXEMPTION,
        department=project.department,
        project=project,
        subject_id=job.pk,
        payload={"job": job.pk, "name": job.name, "until": until.isoformat() if until else None},
        summary=message(gettext_noop("Exempt job %(name)s in %(project)s from the idle policy"),
                        name=job.name, project=project.code),
        reason=reason,
        steps=[StepSpec(Role.DEPARTMENT_ADMIN, project.department_id, timeout=STEP_TIMEOUT)],
        now=now,
    )


def idle_exemption_apply(request: ApprovalRequest, actor: User) -> None:
    until = request.payload.get("until")
    ends_at = datetime.fromisoformat(until) if until else None
    now = timezone.now()
    if ends_at is not None and ends_at <= now:
        raise ValidationError(_("The requested period is already over."))
    IdleExemption.objects.create(job_id=request.subject_id, ends_at=ends_at, request=request, created_at=now)


def idle_exemption_close(request, outcome, actor, comment) -> None:
    """Recorded only on approval: nothing to undo."""


def exempt_job_ids(job_ids, now: datetime) -> set[int]:
    """Those of ``job_ids`` an approved exemption covers at ``now``."""
    return set(
        IdleExemption.objects.filter(job_id__in=list(job_ids))
        .filter(Q(ends_at__isnull=True) | Q(ends_at__gt=now))
        .values_list("job_id", flat=True)
    )
