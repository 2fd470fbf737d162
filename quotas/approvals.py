"""Quota requests and loan requests: two kinds of the generic approval engine (DESIGN §6).

Quota request — a project (its members or admins) asks for a new quota of a flavor: the
department admin of its department decides. If granting it would break the department's own
quota (the department itself, or a department above it, must grow) a platform admin step
follows, and approving it raises those departments' quotas and then the project's in one
transaction. A department admin asks for its department the same way: the admin of the parent
department decides (the platform for a top-level department), then a platform admin when
departments above must grow.

Loan request — the borrower's admin asks a lender department for an amount of a flavor for a
period; the lender's department admin decides; approval records the loan and makes it active.
It returns by itself at its end (``quotas.effective``; the ``quotas.return_loans`` beat task
then marks it returned).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from portal import permissions as perm
from portal.approvals import StepSpec, approval_request_create
from portal.models import ApprovalKind, ApprovalRequest, ApprovalState, Department, Project, Role, User
from portal.selectors import scope_for
from portal.texts import message, when

from .models import Flavor, Loan, LoanState, QuotaNode
from .selectors import healthy_capacity
from .services import (
    _check_level,
    _check_units,
    _level,
    _max_overlapping_out,
    _n,
    _owner_label,
    loan_create,
    quota_node_set,
)
from .validation import Share, level_violations

MAX_LOAN_DAYS = 366

# --- quota requests ---------------------------------------------------------------------------


def _units(flavor: Flavor) -> Decimal:
    return Decimal("0.001") if flavor.shareable else Decimal(1)


def _needed_parent_quota(flavor: Flavor, ratio: Decimal, shares) -> Decimal:
    """The smallest parent quota under which ``shares`` pass both level rules."""
    shares = list(shares)
    by_ratio = sum((s.quota for s in shares), Decimal(0)) / ratio
    kept = sum((s.never_lent for s in shares), Decimal(0))
    return max(by_ratio, kept).quantize(_units(flavor), rounding=ROUND_CEILING)


def growth_plan(flavor: Flavor, key: tuple[str, int], quota: Decimal) -> list[tuple[int, Decimal, Decimal]]:
    """The departments that must grow so that ``key`` (("project"|"department", id)) can hold
    ``quota``: [(department id, current quota, needed quota)], top-down. Raises the pool's own
    validation error when even the pool root cannot take it (more hardware is needed)."""
    node = QuotaNode.objects.filter(flavor=flavor, **{key[0]: key[1]}).first()
    share = Share(quota, node.lend_limit if node else None)
    if key[0] == "project":
        parent_id = Project.objects.values_list("department_id", flat=True).get(pk=key[1])
    else:
        parent_id = Department.objects.values_list("parent_id", flat=True).get(pk=key[1])
    plan = []
    while True:
        parent_quota, ratio, shares = _level(flavor, parent_id)
        shares[key] = share
        if not level_violations(parent_quota, ratio, shares.values()):
            break
        if parent_id is None:
            _check_level(flavor, None, child=(key, share))  # raises with the pool's numbers
            break
        needed = _needed_parent_quota(flavor, ratio, shares.values())
        parent_node = QuotaNode.objects.filter(flavor=flavor, department_id=parent_id).first()
        plan.append((parent_id, parent_quota, needed))
        key, share = ("department", parent_id), Share(needed, parent_node.lend_limit if parent_node else None)
        parent_id = Department.objects.values_list("parent_id", flat=True).get(pk=parent_id)
    return list(reversed(plan))


def _parent_of(key: tuple[str, int]) -> int | None:
    if key[0] == "project":
        return Project.objects.values_list("department_id", flat=True).get(pk=key[1])
    return Department.objects.values_list("parent_id", flat=True).get(pk=key[1])


def most_grantable(flavor: Flavor, key: tuple[str, int]) -> Decimal:
    """The largest quota of ``flavor`` that ``key`` could be granted now, the departments above
    it growing as far as their own levels allow (``growth_plan``'s rules, solved for the quota
    instead of checked): top-down, the most a parent can hold bounds what its children may add
    up to — ratio × its most − the others' quotas, and for a child with a lend limit, its most −
    the others' never-lent parts + that limit. At the pool the bound is the healthy capacity.
    Rounded down to the flavor's units; never below 0."""
    node = QuotaNode.objects.filter(flavor=flavor, **{key[0]: key[1]}).first()
    lend_limit = node.lend_limit if node else None
    parent_id = _parent_of(key)
    parent_quota, ratio, shares = _level(flavor, parent_id)
    shares.pop(key, None)
    room = parent_quota if parent_id is None else most_grantable(flavor, ("department", parent_id))
    most = ratio * room - sum((s.quota for s in shares.values()), Decimal(0))
    kept = room - sum((s.never_lent for s in shares.values()), Decimal(0))
    if kept < 0:
        return Decimal(0)  # the others alone already break the level: nothing more fits
    if lend_limit is not None:
        most = min(most, kept + lend_limit)
    return max(most, Decimal(0)).quantize(_units(flavor), rounding=ROUND_FLOOR)


def _growth_or_refusal(flavor: Flavor, key: tuple[str, int], quota: Decimal, current: Decimal):
    """``growth_plan``, or — when even the pool cannot take it — a refusal that says the most
    that could be granted (issue 32 item 8), not the pool's arithmetic ("… overcommit ratio 1 ×
    quota 56")."""
    try:
        return growth_plan(flavor, key, quota)
    except ValidationError:
        most = most_grantable(flavor, key)
        values = {"owner": _owner_label(key), "flavor": flavor.name, "most": _n(most), "asked": _n(quota),
                  "capacity": _n(healthy_capacity(flavor.pk)), "current": _n(current)}
        if most > current:
            text = _(
                "At most %(most)s of %(flavor)s can be granted to %(owner)s now; you asked for %(asked)s. "
                "The rest of the pool's healthy capacity (%(capacity)s) is promised to other quotas."
            )
        else:
            text = _(
                "The quota of %(owner)s for %(flavor)s cannot grow now (it is %(current)s): the pool's "
                "healthy capacity (%(capacity)s) is promised to other quotas."
            )
        raise ValidationError({"quota": [text % values]}) from None


def _can_ask_quota(actor: User, project: Project | None, department: Department | None) -> bool:
    scope = scope_for(actor)
    if project is not None:
        return project.pk in scope.member_projects or perm.can_manage_projects_of(
            scope, project.department_id
        )
    return scope.platform_admin or department.pk in scope.admin_departments


def _check_shrink(node: QuotaNode | None, quota: Decimal) -> None:
    """A lower quota must still cover the node's own children and its promised loans."""
    if node is None:
        return
    if node.department_id:
        _check_level(node.flavor, node.department_id, parent_override=(quota, node.overcommit_ratio))
    lent = _max_overlapping_out(node, None, None)
    if lent > quota:
        raise ValidationError(
            {
                "quota": [
                    _("%(amount)s of this quota is promised to loans; it cannot go below that.")
                    % {"amount": _n(lent)}
                ]
            }
        )


def quota_request_create(
    *,
    actor: User,
    flavor: Flavor,
    quota: Decimal,
    project: Project | None = None,
    department: Department | None = None,
    reason: str = "",
) -> ApprovalRequest:
    """Ask for a new quota of ``flavor`` for a project or a department (exactly one)."""
    if (project is None) == (department is None):
        raise ValidationError(_("Ask for the quota of exactly one project or department."))
    perm.require(_can_ask_quota(actor, project, department))
    _check_units(flavor, quota=quota)
    with transaction.atomic():
        return _quota_request(actor, flavor, quota, project, department, reason)


def _quota_request(actor, flavor, quota, project, department, reason) -> ApprovalRequest:
    Flavor.objects.select_for_update().get(pk=flavor.pk)  # serialises with quota edits of the tree
    key = ("project", project.pk) if project is not None else ("department", department.pk)
    node = QuotaNode.objects.filter(flavor=flavor, **{key[0]: key[1]}).first()
    current = node.quota if node else Decimal(0)
    if quota == current:
        raise ValidationError({"quota": [_("The quota is already %(q)s.") % {"q": _n(current)}]})
    pending = ApprovalRequest.objects.filter(
        kind=ApprovalKind.QUOTA,
        state=ApprovalState.PENDING,
        payload__flavor=flavor.pk,
        payload__owner=key[0],
        payload__owner_id=key[1],
    ).first()
    if pending is not None:
        raise ValidationError(
            {"quota": [_("Request #%(id)d for this quota is still pending.") % {"id": pending.pk}]}
        )
    if quota < current:
        _check_shrink(node, quota)
    plan = _growth_or_refusal(flavor, key, quota, current) if quota > current else []
    owner_department = project.department if project is not None else department
    steps = _quota_chain(project, department, plan)
    # A message: each reader gets it in their own language (portal/texts.py).
    summary = message(
        gettext_noop("Quota of %(owner)s for %(flavor)s: %(old)s → %(new)s"),
        owner=str(project or department),
        flavor=flavor.name,
        old=_n(current),
        new=_n(quota),
    )
    return approval_request_create(
        requester=actor,
        kind=ApprovalKind.QUOTA,
        department=owner_department,
        project=project,
        payload={
            "flavor": flavor.pk,
            "flavor_name": flavor.name,
            "owner": key[0],
            "owner_id": key[1],
            "owner_name": str(project or department),
            "quota": _n(quota),
            "previous": _n(current),
            "growth": [
                {"department": d, "name": _owner_label(("department", d)), "from": _n(old), "to": _n(new)}
                for d, old, new in plan
            ],
        },
        summary=summary,
        reason=reason,
        steps=steps,
    )


def _quota_chain(project: Project | None, department: Department | None, plan) -> list[StepSpec]:
    """First whoever may set the node (the admin of its parent), then a platform admin when
    departments must grow."""
    if project is not None:
        first = StepSpec(Role.DEPARTMENT_ADMIN, project.department_id)
    elif department.parent_id is not None:
        first = StepSpec(Role.DEPARTMENT_ADMIN, department.parent_id)
    else:
        first = StepSpec(Role.PLATFORM_ADMIN)
    steps = [first]
    if plan and first.approver_role != Role.PLATFORM_ADMIN:
        steps.append(StepSpec(Role.PLATFORM_ADMIN))
    return steps


def _set_quota(actor: User, flavor: Flavor, key: tuple[str, int], quota: Decimal) -> QuotaNode:
    node = QuotaNode.objects.filter(flavor=flavor, **{key[0]: key[1]}).first()
    owner = Project.objects.get(pk=key[1]) if key[0] == "project" else Department.objects.get(pk=key[1])
    return quota_node_set(
        actor=actor,
        flavor=flavor,
        quota=quota,
        borrow_limit=node.borrow_limit if node else None,
        lend_limit=node.lend_limit if node else None,
        overcommit_ratio=node.overcommit_ratio if node else Decimal(1),
        **{key[0]: owner},
    )


def quota_request_apply(request: ApprovalRequest, actor: User) -> None:
    """Grow the departments that must grow (re-computed now: the tree may have changed since
    the request), top-down, then set the requested quota, all validated by quota_node_set."""
    payload = request.payload
    flavor = Flavor.objects.select_for_update().get(pk=payload["flavor"])
    key = (payload["owner"], payload["owner_id"])
    quota = Decimal(payload["quota"])
    node = QuotaNode.objects.filter(flavor=flavor, **{key[0]: key[1]}).first()
    try:
        plan = _growth_or_refusal(flavor, key, quota, node.quota if node else Decimal(0))
        for department_id, _old, needed in plan:
            _set_quota(actor, flavor, ("department", department_id), needed)
        node = _set_quota(actor, flavor, key, quota)
    except PermissionDenied:
        raise ValidationError(
            _(
                "Granting this now needs a department's own quota to grow, which only a platform "
                "admin can approve. Ask a platform admin to decide it, or reject it."
            )
        ) from None
    ApprovalRequest.objects.filter(pk=request.pk).update(subject_id=node.pk)
    request.subject_id = node.pk


def quota_request_close(request, outcome, actor, comment) -> None:
    """Nothing was changed before approval, so there is nothing to undo."""


# --- loan requests ------------------------------------------------------------------------------


def _can_ask_loan(actor: User, borrower: QuotaNode) -> bool:
    scope = scope_for(actor)
    if borrower.project_id is not None:
        return perm.can_edit_project(scope, borrower.project)
    return scope.platform_admin or borrower.department_id in scope.admin_departments


def loan_request_create(
    *,
    actor: User,
    borrower: QuotaNode,
    lender: Department,
    amount: Decimal,
    starts_at: datetime,
    ends_at: datetime,
    reason: str = "",
) -> ApprovalRequest:
    """The borrower's admin asks department ``lender`` for ``amount`` of the borrower's flavor
    between ``starts_at`` and ``ends_at``; the lender's department admin decides."""
    perm.require(_can_ask_loan(actor, borrower))
    flavor = borrower.flavor
    lender_node = QuotaNode.objects.filter(flavor=flavor, department=lender).first()
    _check_loan(borrower, lender, lender_node, amount, starts_at, ends_at)
    with transaction.atomic():
        return _loan_request(actor, borrower, lender, lender_node, amount, starts_at, ends_at, reason)


def _loan_request(
    actor, borrower, lender, lender_node, amount, starts_at, ends_at, reason
) -> ApprovalRequest:
    flavor = borrower.flavor
    borrower_department = borrower.department or borrower.project.department
    summary = message(
        gettext_noop(
            "Loan of %(amount)s × %(flavor)s from %(lender)s to %(borrower)s, %(start)s – %(end)s"
        ),
        amount=_n(amount),
        flavor=flavor.name,
        lender=str(lender),
        borrower=str(borrower.owner),
        start=when(starts_at),
        end=when(ends_at),
    )
    return approval_request_create(
        requester=actor,
        kind=ApprovalKind.LOAN,
        department=borrower_department,
        project=borrower.project,
        counterparty=lender,
        payload={
            "flavor": flavor.pk,
            "flavor_name": flavor.name,
            "lender": lender_node.pk,
            "lender_name": str(lender),
            "borrower": borrower.pk,
            "borrower_name": str(borrower.owner),
            "amount": _n(amount),
            "starts_at": starts_at.isoformat(),
            "ends_at": ends_at.isoformat(),
        },
        summary=summary,
        reason=reason,
        steps=[StepSpec(Role.DEPARTMENT_ADMIN, lender.pk)],
    )


def _check_loan(borrower, lender, lender_node, amount, starts_at, ends_at) -> None:
    errors: dict[str, list[str]] = {}
    flavor = borrower.flavor
    if lender_node is None:
        errors["lender"] = [
            _("%(lender)s holds no quota of %(flavor)s to lend.") % {"lender": lender, "flavor": flavor}
        ]
    elif lender_node.pk == borrower.pk or borrower.department_id == lender.pk:
        errors["lender"] = [_("A department cannot borrow from itself.")]
    if amount <= 0:
        errors["amount"] = [_("Ask for a positive amount.")]
    if ends_at <= starts_at:
        errors["ends_at"] = [_("The loan must end after it starts.")]
    elif ends_at <= timezone.now():
        errors["ends_at"] = [_("The period is already over.")]
    elif ends_at - starts_at > timedelta(days=MAX_LOAN_DAYS):
        errors["ends_at"] = [_("A loan lasts at most %(n)d days.") % {"n": MAX_LOAN_DAYS}]
    if errors:
        raise ValidationError(errors)
    _check_units(flavor, amount=amount)
    already = _max_overlapping_out(lender_node, starts_at, ends_at)
    if already + amount > lender_node.quota:
        raise ValidationError(
            {
                "amount": [
                    _(
                        "%(lender)s has quota %(q)s and %(lent)s already lent in this period; "
                        "it cannot lend %(a)s more."
                    )
                    % {"lender": lender, "q": _n(lender_node.quota), "lent": _n(already), "a": _n(amount)}
                ]
            }
        )


def loan_request_apply(request: ApprovalRequest, actor: User) -> None:
    payload = request.payload
    ends_at = datetime.fromisoformat(payload["ends_at"])
    if ends_at <= timezone.now():
        raise ValidationError(_("The requested period is already over."))
    # Recorded through the validated service (the lender's capacity is checked again now),
    # then activated: the approval is what makes it active.
    loan = loan_create(
        actor=actor,
        lender=QuotaNode.objects.get(pk=payload["lender"]),
        borrower=QuotaNode.objects.get(pk=payload["borrower"]),
        amount=Decimal(payload["amount"]),
        starts_at=datetime.fromisoformat(payload["starts_at"]),
        ends_at=ends_at,
        # The request's own reason; its summary only repeats what the loan's columns say.
        reason=request.reason[:500],
        state=LoanState.PENDING,
    )
    Loan.objects.filter(pk=loan.pk, state=LoanState.PENDING).update(
        state=LoanState.ACTIVE, requested_by=request.requester
    )
    ApprovalRequest.objects.filter(pk=request.pk).update(subject_id=loan.pk)
    request.subject_id = loan.pk


def loan_request_close(request, outcome, actor, comment) -> None:
    """The loan is only recorded on approval: nothing to undo."""


def loans_return_expired(*, now: datetime | None = None) -> int:
    """Mark active loans past their end as returned. Effective quota already stopped counting
    them at ``ends_at`` (``quotas.effective``); this only makes the state say so. Idempotent."""
    now = now or timezone.now()
    return Loan.objects.filter(state=LoanState.ACTIVE, ends_at__lte=now).update(state=LoanState.RETURNED)


def loan_lenders(flavor: Flavor) -> QuerySet[Department]:
    """Departments that may be asked for a loan of ``flavor``: those holding quota of it. The
    department directory (codes and names) is not tenant data; their quotas and usage are."""
    return Department.objects.filter(quota_nodes__flavor=flavor, quota_nodes__quota__gt=0).order_by("code")
