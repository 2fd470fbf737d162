"""Pages of the approval engine (DESIGN §6): the inbox and request lists, one request with its
steps and audit trail, decisions (one or many), cancel, comments; and the notifications.

Requests are read through ``visible_approval_requests`` (404 outside it); every write goes
through ``portal.approvals`` / ``portal.notifications``, whose refusals (segregation of duties,
not an approver, decided meanwhile) come back to the page as messages, never as errors."""

from __future__ import annotations

from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from . import approvals
from .forms import ApprovalFilterForm, BulkDecisionForm, CancelForm, CommentForm, DecisionForm
from .models import ApprovalKind, ApprovalRequest, ApprovalState, ApprovalStep, Role, StepState
from .notifications import notification_mark_read, notifications_for, notifications_mark_all_read
from .selectors import get_visible, scope_for
from .texts import render_data

PAGE_SIZE = 50
NOTIFICATIONS_PAGE_SIZE = 50
TABS = ("inbox", "mine", "all")


# --- the lists ---------------------------------------------------------------------------------


def _requests_of_tab(user, tab: str):
    if tab == "inbox":
        return approvals.inbox_requests(user)
    qs = approvals.visible_approval_requests(user)
    return qs.filter(requester_id=user.pk) if tab == "mine" else qs


def _rows(user, requests) -> list[dict]:
    """Each request with its open step and whether ``user`` may decide it now — from the
    prefetched steps, with the engine's own rule (``can_act_on_step``; never the requester) —
    and the line of key figures an approver decides with (``approval_contexts``: one batch for
    the page, None where the user may not see them)."""
    scope = scope_for(user)
    requests = list(requests)
    contexts = approvals.approval_contexts(user, requests)
    rows = []
    for req in requests:
        step = next((s for s in req.steps.all() if s.state == StepState.PENDING), None)
        decidable = (
            req.state == ApprovalState.PENDING
            and step is not None
            and req.requester_id != user.pk
            and approvals.can_act_on_step(scope, step)
        )
        rows.append(
            {"request": req, "step": step, "can_decide": decidable, "context": contexts.get(req.pk)}
        )
    return rows


@login_required
def approval_inbox(request):
    tab = request.GET.get("tab", "inbox")
    if tab not in TABS:
        tab = "inbox"
    form = ApprovalFilterForm(request.GET)
    requests = _requests_of_tab(request.user, tab).filter(**form.filters())
    steps = ApprovalStep.objects.select_related("department").order_by("order", "id")
    requests = requests.prefetch_related(Prefetch("steps", queryset=steps)).order_by("-created_at", "-id")
    page = Paginator(requests, PAGE_SIZE).get_page(request.GET.get("page"))
    rows = _rows(request.user, page.object_list)
    return render(
        request,
        "approvals/inbox.html",
        {
            "tab": tab,
            "form": form,
            "page": page,
            "rows": rows,
            "decidable": any(r["can_decide"] for r in rows),
            "bulk": BulkDecisionForm(),
            "now": timezone.now(),
        },
    )


def _back(request, fallback: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return fallback


def _decided_message(pk: int, state: str) -> str:
    if state == ApprovalState.APPROVED:
        return _("Request #%(id)d was approved.") % {"id": pk}
    if state == ApprovalState.REJECTED:
        return _("Request #%(id)d was rejected.") % {"id": pk}
    # Approved a step of a longer chain: the request is still pending.
    return _("Your step is approved; request #%(id)d goes to the next approver.") % {"id": pk}


@login_required
@require_POST
def approval_bulk_decide(request):
    """Decide the ticked requests with one comment; one message per request, as the API's
    per-id results (a refusal of one does not undo the others)."""
    back = _back(request, reverse("approval-inbox"))
    form = BulkDecisionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect(back)
    ids = form.cleaned_data["ids"]
    found = approvals.visible_approval_requests(request.user).in_bulk(ids)
    results = approvals.approval_bulk_decide(
        actor=request.user,
        requests={pk: found.get(pk) for pk in ids},
        approve=form.approve,
        comment=form.cleaned_data["comment"],
    )
    for result in results:
        if result["ok"]:
            messages.success(request, _decided_message(result["id"], result["state"]))
        else:
            messages.error(
                request,
                _("Request #%(id)d was not decided: %(error)s")
                % {"id": result["id"], "error": result["error"]},
            )
    return redirect(back)


# --- one request ------------------------------------------------------------------------------


def _approver_label(step: ApprovalStep) -> str:
    if step.approver_role == Role.PLATFORM_ADMIN or step.department is None:
        return _("Platform admins")
    return _("Department admins of %(department)s") % {"department": step.department.name}


def _when(value):
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return value


def _details(req: ApprovalRequest) -> dict:
    """The payload of the request, readable: each kind stores what it needs to apply it, and
    its messages (a job's reasons) are rendered in the page's language."""
    payload = render_data(req.payload or {})
    if req.kind == ApprovalKind.LOAN:
        return {
            **payload,
            "starts_at": _when(payload.get("starts_at")),
            "ends_at": _when(payload.get("ends_at")),
        }
    if req.kind == ApprovalKind.IDLE_EXEMPTION:
        return {**payload, "until": _when(payload.get("until"))}
    if req.kind == ApprovalKind.JOB:
        devices = (payload.get("workers") or 0) * (payload.get("gpus_per_worker") or 0)
        return {**payload, "devices": devices}
    return payload


def _can_comment(user, req: ApprovalRequest, steps) -> bool:
    # The service's rule (approval_comment): the requester, or whoever may act on a step.
    scope = scope_for(user)
    return req.requester_id == user.pk or any(approvals.can_act_on_step(scope, s) for s in steps)


@login_required
def approval_detail(request, pk: int):
    req = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
    steps = list(approvals.request_steps(req))
    for step in steps:
        step.approver_label = _approver_label(step)
    current = next((s for s in steps if s.state == StepState.PENDING), None)
    facts = approvals.handler_for(req.kind).facts
    return render(
        request,
        "approvals/detail.html",
        {
            "req": req,
            "details": _details(req),
            "facts": facts(req, request.user) if facts is not None else None,
            "context": approvals.approval_contexts(request.user, [req]).get(req.pk),
            "steps": steps,
            "current": current,
            "audit": approvals.request_audit(req),
            "is_requester": req.requester_id == request.user.pk,
            "can_decide": approvals.can_decide(request.user, req),
            "can_cancel": approvals.can_cancel(request.user, req),
            "can_comment": _can_comment(request.user, req, steps),
            "decision_form": DecisionForm(),
            "comment_form": CommentForm(),
            "cancel_form": CancelForm(),
            "now": timezone.now(),
        },
    )


def _refusal(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        return " ".join(exc.messages)
    return str(exc) or _("You do not have permission to do this.")


@login_required
@require_POST
def approval_decide(request, pk: int):
    """Approve or reject from the request's page. A forged POST by the requester or by someone
    who is not an approver is refused by the service and shown as a message."""
    req = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            for error in errors:
                messages.error(request, error)
        return redirect("approval-detail", pk=req.pk)
    try:
        req = approvals.approval_decide(
            actor=request.user,
            step_or_request=req,
            approve=form.approve,
            comment=form.cleaned_data["comment"],
        )
    except (PermissionDenied, ValidationError) as exc:
        messages.error(request, _refusal(exc))
    else:
        messages.success(request, _decided_message(req.pk, req.state))
    return redirect("approval-detail", pk=req.pk)


@login_required
@require_POST
def approval_cancel(request, pk: int):
    req = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
    form = CancelForm(request.POST)
    if form.is_valid():
        try:
            approvals.approval_cancel(actor=request.user, request=req, comment=form.cleaned_data["comment"])
        except (PermissionDenied, ValidationError) as exc:
            messages.error(request, _refusal(exc))
        else:
            messages.success(request, _("Request #%(id)d was withdrawn.") % {"id": req.pk})
    else:
        messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
    return redirect("approval-detail", pk=req.pk)


@login_required
@require_POST
def approval_comment(request, pk: int):
    req = get_visible(approvals.visible_approval_requests(request.user), pk=pk)
    form = CommentForm(request.POST)
    if form.is_valid():
        try:
            approvals.approval_comment(actor=request.user, request=req, comment=form.cleaned_data["comment"])
        except (PermissionDenied, ValidationError) as exc:
            messages.error(request, _refusal(exc))
        else:
            messages.success(request, _("Your comment was added."))
    else:  # empty, or too long: say which (the browser no longer cuts it, issue 32 item 2)
        messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
    return redirect("approval-detail", pk=req.pk)


# --- notifications ------------------------------------------------------------------------------


@login_required
def notification_list(request):
    notes = notifications_for(request.user).order_by("-created_at", "-id")
    if request.GET.get("unread"):
        notes = notes.filter(read_at__isnull=True)
    page = Paginator(notes, NOTIFICATIONS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request, "portal/notifications.html", {"page": page, "unread_only": bool(request.GET.get("unread"))}
    )


@login_required
@require_POST
def notification_read(request, pk: int):
    """Mark one notification read; with ``next`` (its link) go there, otherwise back to the list."""
    note = get_visible(notifications_for(request.user), pk=pk)
    notification_mark_read(actor=request.user, notification=note)
    return redirect(_back(request, reverse("notification-list")))


@login_required
@require_POST
def notification_read_all(request):
    marked = notifications_mark_all_read(actor=request.user)
    messages.success(
        request,
        ngettext("%(n)d notification marked as read.", "%(n)d notifications marked as read.", marked)
        % {"n": marked},
    )
    return redirect("notification-list")
