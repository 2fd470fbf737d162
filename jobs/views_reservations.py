"""The reservations page (DESIGN §17; docs/reservations.md): the maintenance windows and the
reservations of the projects the user sees, the queues on hold or draining; a form to ask for a
reservation (whoever may edit a project; a platform admin decides), and for platform admins and
department admins the maintenance and queue-state forms. The services decide; the page shows."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Q
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext

from jobs import reservations as svc
from jobs.reservation_forms import (
    MaintenanceForm,
    QueueStateForm,
    ReservationRequestForm,
    editable_projects,
    queue_targets,
)
from jobs.reservation_models import QueueSetting, QueueState, ReservationState
from portal.selectors import scope_for, visible_departments, visible_projects


def _run(form, call):
    """Run the service; its refusals land on the form. Returns what it returned, or None."""
    try:
        with transaction.atomic():
            return call()
    except ValidationError as exc:
        form.add_service_error(exc)
    except PermissionDenied as exc:
        form.add_error(None, str(exc) or gettext("You may not do this."))
    return None


@login_required
def reservations_page(request):
    user = request.user
    action = request.POST.get("action") if request.method == "POST" else None
    data = request.POST if request.method == "POST" else None
    ask = ReservationRequestForm(data if action == "request" else None, user=user)
    maint = MaintenanceForm(data if action == "maintenance" else None)
    queue = QueueStateForm(data if action == "queue" else None, user=user)
    if action == "request" and ask.is_valid():
        created = _run(ask, lambda: svc.reservation_request_create(actor=user, **ask.service_kwargs()))
        if created is not None:
            messages.success(request, gettext("Reservation request #%(id)d was sent for approval.")
                             % {"id": created.pk})
            return redirect("approval-detail", pk=created.pk)
    elif action == "maintenance" and maint.is_valid():
        if _run(maint, lambda: svc.maintenance_create(actor=user, **maint.cleaned_data)) is not None:
            messages.success(request, gettext("The maintenance window was scheduled."))
            return redirect("reservations")
    elif action == "queue" and queue.is_valid():
        done = _run(queue, lambda: svc.queue_state_set(actor=user, state=queue.cleaned_data["state"],
                                                       reason=queue.cleaned_data["reason"], **queue.owner()))
        if not queue.errors:
            messages.success(request, gettext("The queue state was set.") if done else
                             gettext("The queue already was in that state."))
            return redirect("reservations")
    elif action == "cancel":
        resv = get_object_or_404(svc.visible_reservations(user), pk=request.POST.get("reservation"))
        try:
            svc.reservation_cancel(actor=user, reservation=resv)
        except PermissionDenied:
            messages.error(request, gettext("You may not cancel this reservation."))
        return redirect("reservations")
    now = timezone.now()
    rows = svc.visible_reservations(user).filter(state=ReservationState.ACTIVE, ends_at__gt=now) \
        .order_by("starts_at", "id")
    held = QueueSetting.objects.exclude(state=QueueState.OPEN).filter(
        Q(project__in=visible_projects(user)) | Q(department__in=visible_departments(user)))
    for f in (ask, maint, queue):
        for name in f.errors:
            if name in f.fields:
                f.fields[name].widget.attrs["aria-invalid"] = "true"
    scope = scope_for(user)
    mine = {p.pk for p in editable_projects(user)}
    cancellable = {r.pk for r in rows if scope.platform_admin or r.project_id in mine}
    return render(request, "jobs/reservations.html", {
        "reservations": rows, "now": now, "held": held.select_related("project", "department"),
        "cancellable": cancellable,
        "ask": ask if editable_projects(user) else None,
        "maint": maint if scope.platform_admin else None,
        "queue": queue if queue_targets(user) else None,
    })
