"""Reservations, maintenance windows and queue states (DESIGN §17; docs/reservations.md).

Reservation request — whoever may edit a project asks for GPUs for it over ``[starts_at,
ends_at)``: a count of a flavor, or named nodes. The capacity is the platform's, so a platform
admin decides (one step of the generic approval engine, kind ``reservation``, as a loan's lender
decides a loan); approval records the reservation, checked again against what is reserved then.

Maintenance — a platform admin puts named nodes under maintenance over a window (no approval: it
is the platform's own act). Either is cancelled by a platform admin, or a reservation by whoever
may edit its project.

Queue state — a platform admin, or the admin of the department (of the project's department for
a project), sets a project's or a department's queue open, on hold or draining. Draining signals
the running jobs under it to stop through the preemption path (checkpointing jobs first: they
save on the signal and resume from it), which requeues them; the queue then holds them.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet, Sum
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs import reasons
from jobs.models import Job
from jobs.reservation_models import (
    QueueSetting,
    QueueState,
    QueueStateEvent,
    Reservation,
    ReservationState,
)
from jobs.states import HOLDING
from portal import permissions as perm
from portal.approvals import StepSpec, approval_request_create
from portal.daterange import in_range
from portal.enqueue import enqueue
from portal.models import ApprovalKind, ApprovalRequest, Department, Project, Role, User
from portal.selectors import scope_for, visible_projects
from portal.texts import message, when
from quotas.models import Flavor, Node

MAX_DAYS = 90  # a reservation or a maintenance lasts at most this long
REASON_MAX = 300


# --- checks -------------------------------------------------------------------------------------


def _check_window(starts_at: datetime, ends_at: datetime, now: datetime) -> None:
    errors: dict[str, list[str]] = {}
    for field, at in (("starts_at", starts_at), ("ends_at", ends_at)):
        if not in_range(at):
            errors[field] = [_("Give a date from 2000-01-01 to 2100-12-31.")]
    if not errors:
        if ends_at <= starts_at:
            errors["ends_at"] = [_("The window must end after it starts.")]
        elif ends_at <= now:
            errors["ends_at"] = [_("The window is already over.")]
        elif ends_at - starts_at > timedelta(days=MAX_DAYS):
            errors["ends_at"] = [_("A window lasts at most %(n)d days.") % {"n": MAX_DAYS}]
    if errors:
        raise ValidationError(errors)


def _overlapping(starts_at: datetime, ends_at: datetime,
                 exclude: int | None = None) -> QuerySet[Reservation]:
    rows = Reservation.objects.filter(state=ReservationState.ACTIVE, starts_at__lt=ends_at,
                                      ends_at__gt=starts_at)
    return rows.exclude(pk=exclude) if exclude else rows


def _check_room(flavor: Flavor | None, gpus: int | None, nodes: list[Node], starts_at, ends_at,
                exclude: int | None = None) -> None:
    """A count fits in the flavor's GPUs less the counts and reserved nodes of other windows
    overlapping it; named nodes are in no other window then."""
    others = _overlapping(starts_at, ends_at, exclude)
    if nodes:
        taken = sorted(Node.objects.filter(reservations__in=others, pk__in=[n.pk for n in nodes])
                       .values_list("name", flat=True).distinct())
        if taken:
            raise ValidationError({"nodes": [_("Already reserved or under maintenance then: %(nodes)s.")
                                             % {"nodes": ", ".join(taken)}]})
        return
    total = Node.objects.filter(flavor=flavor, cluster__active=True).aggregate(n=Sum("gpu_count"))["n"] or 0
    if gpus > total:
        raise ValidationError({"gpus": [_("%(flavor)s has %(total)d GPUs in all; ask for at most that many.")
                                        % {"flavor": flavor.name, "total": total}]})
    counted = others.filter(flavor=flavor, gpus__isnull=False).aggregate(n=Sum("gpus"))["n"] or 0
    on_nodes = Node.objects.filter(flavor=flavor, reservations__in=others).distinct() \
        .aggregate(n=Sum("gpu_count"))["n"] or 0
    if counted + on_nodes + gpus > total:
        raise ValidationError({"gpus": [_("%(flavor)s has %(total)d GPUs, %(held)d of them reserved in this "
                                          "window already; at most %(left)d more can be reserved.")
                                        % {"flavor": flavor.name, "total": total, "held": counted + on_nodes,
                                           "left": max(0, total - counted - on_nodes)}]})


def _check_shape(flavor: Flavor | None, gpus: int | None, nodes: list[Node]) -> None:
    if bool(nodes) == (gpus is not None):
        raise ValidationError({"gpus": [_("Give either a number of GPUs of a flavor, or nodes.")]})
    if gpus is not None:
        if flavor is None:
            raise ValidationError({"flavor": [_("Name the flavor of the GPUs.")]})
        if gpus <= 0:
            raise ValidationError({"gpus": [_("Ask for at least one GPU.")]})
        if flavor.shareable:
            raise ValidationError({"flavor": [_("Reserve whole GPUs: %(flavor)s is a shared flavor.")
                                              % {"flavor": flavor.name}]})


def _clean_reason(reason, *, required: bool) -> str:
    text = " ".join(str(reason or "").split())
    if required and not text:
        raise ValidationError({"reason": [_("Say why (the reason is kept with the history).")]})
    if len(text) > REASON_MAX:
        raise ValidationError({"reason": [_("At most %(max)d characters.") % {"max": REASON_MAX}]})
    return text


# --- reservation requests -------------------------------------------------------------------------


def reservation_request_create(*, actor: User, project: Project, starts_at: datetime, ends_at: datetime,
                               flavor: Flavor | None = None, gpus: int | None = None,
                               nodes: list[Node] | tuple = (), reason: str = "",
                               now: datetime | None = None) -> ApprovalRequest:
    """Ask for ``gpus`` of ``flavor``, or for ``nodes``, for ``project`` over the window; a
    platform admin decides."""
    now = now or timezone.now()
    perm.require(perm.can_edit_project(scope_for(actor), project))
    nodes = list(nodes)
    _check_shape(flavor, gpus, nodes)
    _check_window(starts_at, ends_at, now)
    text = _clean_reason(reason, required=False)
    with transaction.atomic():
        _check_room(flavor, gpus, nodes, starts_at, ends_at)
        what = (f"{gpus} × {flavor.name}" if gpus is not None else ", ".join(sorted(n.name for n in nodes)))
        return approval_request_create(
            requester=actor,
            kind=ApprovalKind.RESERVATION,
            department=project.department,
            project=project,
            payload={
                "project": project.pk,
                "flavor": flavor.pk if flavor else None,
                "flavor_name": flavor.name if flavor else "",
                "gpus": gpus,
                "nodes": sorted(n.pk for n in nodes),
                "node_names": sorted(n.name for n in nodes),
                "starts_at": starts_at.isoformat(),
                "ends_at": ends_at.isoformat(),
            },
            summary=message(gettext_noop("Reservation of %(what)s for %(project)s, %(start)s – %(end)s"),
                            what=what, project=project.code, start=when(starts_at), end=when(ends_at)),
            reason=text,
            steps=[StepSpec(Role.PLATFORM_ADMIN)],
            now=now,
        )


def reservation_request_apply(request: ApprovalRequest, actor: User) -> None:
    """Record the reservation, its window and room checked again now."""
    payload = request.payload
    starts_at = datetime.fromisoformat(payload["starts_at"])
    ends_at = datetime.fromisoformat(payload["ends_at"])
    if ends_at <= timezone.now():
        raise ValidationError(_("The requested period is already over."))
    flavor = Flavor.objects.filter(pk=payload["flavor"]).first() if payload.get("flavor") else None
    nodes = list(Node.objects.filter(pk__in=payload.get("nodes") or []))
    _check_room(flavor, payload.get("gpus"), nodes, starts_at, ends_at)
    resv = Reservation.objects.create(
        project_id=payload["project"], flavor=flavor, gpus=payload.get("gpus"), starts_at=starts_at,
        ends_at=ends_at, reason=request.reason[:500], requested_by=request.requester, request=request,
    )
    resv.nodes.set(nodes)
    ApprovalRequest.objects.filter(pk=request.pk).update(subject_id=resv.pk)
    request.subject_id = resv.pk
    enqueue("jobs.sync_slurm_reservations")


def reservation_request_close(request, outcome, actor, comment) -> None:
    """Recorded only on approval: nothing to undo."""


# --- maintenance and cancelling -----------------------------------------------------------------


def maintenance_create(*, actor: User, nodes: list[Node], starts_at: datetime, ends_at: datetime,
                       reason: str, now: datetime | None = None) -> Reservation:
    """Put ``nodes`` under maintenance over the window (platform admins)."""
    if not scope_for(actor).platform_admin:
        raise PermissionDenied(_("Only platform admins schedule maintenance."))
    now = now or timezone.now()
    nodes = list(nodes)
    if not nodes:
        raise ValidationError({"nodes": [_("Name the nodes under maintenance.")]})
    _check_window(starts_at, ends_at, now)
    text = _clean_reason(reason, required=True)
    with transaction.atomic():
        _check_room(None, None, nodes, starts_at, ends_at)
        resv = Reservation.objects.create(starts_at=starts_at, ends_at=ends_at, reason=text,
                                          requested_by=actor, created_at=now)
        resv.nodes.set(nodes)
        enqueue("jobs.sync_slurm_reservations")
    return resv


def reservation_cancel(*, actor: User, reservation: Reservation) -> bool:
    """Cancel a reservation or a maintenance; False when it already was."""
    scope = scope_for(actor)
    allowed = scope.platform_admin or (
        reservation.project is not None and perm.can_edit_project(scope, reservation.project))
    perm.require(allowed)
    with transaction.atomic():
        done = Reservation.objects.filter(pk=reservation.pk, state=ReservationState.ACTIVE).update(
            state=ReservationState.CANCELLED)
        if done:
            enqueue("jobs.sync_slurm_reservations")
    return bool(done)


def visible_reservations(user: User) -> QuerySet[Reservation]:
    """Maintenance windows (every user plans around them) and the reservations of the projects
    the user sees."""
    scope = scope_for(user)
    rows = Reservation.objects.select_related("project", "flavor").prefetch_related("nodes")
    if scope.sees_everything:
        return rows
    return rows.filter(Q(project__isnull=True) | Q(project__in=visible_projects(user)))


def live_windows(now: datetime) -> list[Reservation]:
    """The active reservations and maintenance windows not yet over (what the Slurm sync writes;
    the engine reads the same rows through ``jobs.scheduling.config.engine_windows``)."""
    return list(Reservation.objects.filter(state=ReservationState.ACTIVE, ends_at__gt=now)
                .select_related("project", "flavor").prefetch_related("nodes").order_by("starts_at", "id"))


# --- queue states -----------------------------------------------------------------------------------


def queue_state_of(*, project: Project | None = None, department: Department | None = None) -> str:
    """The queue's own state (no row: open); a department above may hold it too."""
    owner = {"project": project} if project is not None else {"department": department}
    row = QueueSetting.objects.filter(**owner).first()
    return row.state if row else QueueState.OPEN


def _can_set_queue(actor: User, project: Project | None, department: Department | None) -> bool:
    scope = scope_for(actor)
    if scope.platform_admin:
        return True
    dept_id = project.department_id if project is not None else department.pk
    return dept_id in scope.admin_departments


def queue_state_set(*, actor: User, state: str, reason: str, project: Project | None = None,
                    department: Department | None = None,
                    now: datetime | None = None) -> QueueStateEvent | None:
    """Set the queue state of one project or one department; None when it already was."""
    if (project is None) == (department is None):
        raise ValidationError({"project": [_("Give exactly one project or department.")]})
    if state not in QueueState.values:
        raise ValidationError({"state": [_("One of: open, hold, drain.")]})
    if not _can_set_queue(actor, project, department):
        raise PermissionDenied(_("Only platform admins and the department's admins set its queues."))
    text = _clean_reason(reason, required=True)
    now = now or timezone.now()
    owner = {"project": project} if project is not None else {"department": department}
    with transaction.atomic():
        row, _created = QueueSetting.objects.select_for_update().get_or_create(**owner)
        before = row.state
        to_stop = _draining_jobs(project, department) if state == QueueState.DRAIN else []
        if before == state and not to_stop:
            return None
        row.state, row.updated_at = state, now
        row.save(update_fields=["state", "updated_at"])
        stopped = _stop(to_stop, project or department, text, now)
        event = QueueStateEvent.objects.create(from_state=before, to_state=state, reason=text, actor=actor,
                                               at=now, data={"requeued": stopped}, **owner)
    enqueue("jobs.schedule_cycle")
    return event


def _draining_jobs(project: Project | None, department: Department | None) -> list[Job]:
    """The portal jobs holding GPUs under the queue, not stopping already; checkpointing ones
    first (they lose nothing on the signal), then the most recent first."""
    jobs = Job.objects.filter(state__in=list(HOLDING), terminating_since__isnull=True) \
        .exclude(kind="external")
    if project is not None:
        jobs = jobs.filter(project=project)
    else:
        jobs = jobs.filter(project__department_id__in=_subtree(department))
    return sorted(jobs, key=lambda j: (not j.checkpointing, -(j.admitted_at or j.submitted_at).timestamp()))


def _subtree(department: Department) -> list[int]:
    ids, frontier = [department.pk], [department.pk]
    while frontier:
        frontier = list(Department.objects.filter(parent_id__in=frontier).values_list("pk", flat=True))
        ids.extend(frontier)
    return ids


def _stop(jobs: list[Job], owner, text: str, now: datetime) -> list[int]:
    if not jobs:
        return []
    from jobs.scheduling.cycle import preemption_signal

    why = reasons.reason(reasons.QUEUE_DRAINED, queue=str(owner), reason=text)
    # One at a time, in the order given: the checkpointing jobs are signalled (and their events
    # written) first.
    data = {"queue": str(owner)}
    stopped = [pk for job in jobs for pk in preemption_signal([(job.pk, why)], now, data=data)]
    enqueue("jobs.backend_work")
    return stopped

