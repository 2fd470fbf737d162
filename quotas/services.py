"""Writes of resources and the quota tree.

Every quota change of a flavor first locks that flavor's row, so concurrent edits of one
tree are serialised and the level checks below read a tree no one else is changing.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import permissions as perm
from portal.models import Department, Project, User
from portal.selectors import scope_for

from . import fractions
from .models import Cluster, Flavor, Loan, LoanState, Node, QuotaNode, QuotaWindow
from .selectors import LIVE_LOANS, healthy_capacity, lent_out
from .validation import Share, level_violations

ChildKey = tuple[str, int]

# --- resources (platform admins) --------------------------------------------------------


def _platform_write(actor: User) -> None:
    perm.require(scope_for(actor).platform_admin)


def _save(obj, **fields):
    for name, value in fields.items():
        setattr(obj, name, value)
    obj.full_clean(validate_constraints=False)
    obj.save()
    return obj


def card_fraction_from_input(value) -> Fraction:
    """A card fraction typed by a person or sent by a client ("1/7", "0.5", …), exactly; bad
    input is a ValidationError with a translated message."""
    try:
        return fractions.parse_card_fraction(value)
    except fractions.FractionError as exc:
        raise ValidationError({"card_fraction": [_fraction_message(exc.code, value)]}) from None


def _fraction_message(code: str, value) -> str:
    if code == "range":
        return _("A card fraction must be above 0 and at most 1 (a whole card).")
    if code == "denominator":
        limit = fractions.MAX_DENOMINATOR
        return _("The denominator of a card fraction may be at most %(n)d.") % {"n": limit}
    if code == "inexact":
        return _(
            "%(value)s is not a fraction of a card with a denominator of at most %(n)d: write it as a "
            "fraction, e.g. 1/7."
        ) % {"value": value, "n": fractions.MAX_DENOMINATOR}
    return _("Enter a card fraction such as 1/7, or a decimal such as 0.5.")


def _fraction_fields(fields: dict, current: Flavor | None = None) -> dict:
    """``card_fraction`` (any accepted input) or ``fraction_numerator`` / ``fraction_denominator``
    → the two stored integers, reduced. ``card_fraction`` itself is derived by the database."""
    fields = dict(fields)
    given = fields.pop("card_fraction", None)
    top, bottom = fields.pop("fraction_numerator", None), fields.pop("fraction_denominator", None)
    if given is None and top is None and bottom is None:
        return fields
    if given is None:
        top = current.fraction_numerator if top is None and current else top
        bottom = current.fraction_denominator if bottom is None and current else bottom
        given = f"{top if top is not None else 1}/{bottom if bottom is not None else 1}"
    value = card_fraction_from_input(given)
    return fields | {"fraction_numerator": value.numerator, "fraction_denominator": value.denominator}


def flavor_create(*, actor: User, **fields) -> Flavor:
    _platform_write(actor)
    return _derived(_save(Flavor(), **_fraction_fields(fields)))


def _derived(flavor: Flavor) -> Flavor:
    """The database computes ``card_fraction``; read it back after a write."""
    flavor.refresh_from_db(fields=["card_fraction"])
    return flavor


def flavor_update(*, actor: User, flavor: Flavor, **fields) -> Flavor:
    _platform_write(actor)
    fields = _fraction_fields(fields, flavor)
    if "pool_overcommit_ratio" in fields:
        Flavor.objects.select_for_update().get(pk=flavor.pk)
        _check_level(
            flavor, None, parent_override=(healthy_capacity(flavor.pk), fields["pool_overcommit_ratio"])
        )
    return _derived(_save(flavor, **fields))


def cluster_create(*, actor: User, **fields) -> Cluster:
    _platform_write(actor)
    return _save(Cluster(), **fields)


def cluster_update(*, actor: User, cluster: Cluster, **fields) -> Cluster:
    _platform_write(actor)
    return _save(cluster, **fields)


def node_create(*, actor: User, **fields) -> Node:
    _platform_write(actor)
    return _save(Node(), **fields)


def node_update(*, actor: User, node: Node, **fields) -> Node:
    _platform_write(actor)
    if node.hold and fields.get("state", node.state) != node.state:
        # The hold is the node map's (jobs.clusters.nodes): it reaches the cluster and leaves an event.
        raise ValidationError({"state": [_(
            "A platform admin holds this node (%(hold)s): return it to service on the node map "
            "or with POST /api/v1/nodes/{id}/uncordon/."
        ) % {"hold": node.get_hold_display()}]})
    return _save(node, **fields)


# --- quota tree ---------------------------------------------------------------------------


def _key_of(node: QuotaNode) -> ChildKey:
    return ("project", node.project_id) if node.project_id else ("department", node.department_id)


def _owner_label(key: ChildKey | None) -> str:
    if key is None:
        return _("the pool")
    model = Project if key[0] == "project" else Department
    return str(model.objects.filter(pk=key[1]).first() or key[1])


def _level(flavor: Flavor, parent_id: int | None):
    """(parent quota, parent ratio, {child key: Share}) of one level, as stored."""
    if parent_id is None:
        parent_quota, ratio = healthy_capacity(flavor.pk), flavor.pool_overcommit_ratio
        children = QuotaNode.objects.filter(
            flavor=flavor, department__isnull=False, department__parent__isnull=True
        )
    else:
        parent = QuotaNode.objects.filter(flavor=flavor, department_id=parent_id).first()
        parent_quota = parent.quota if parent else Decimal(0)
        ratio = parent.overcommit_ratio if parent else Decimal(1)
        children = QuotaNode.objects.filter(
            Q(department__parent_id=parent_id) | Q(project__department_id=parent_id), flavor=flavor
        )
    return parent_quota, ratio, {_key_of(c): Share(c.quota, c.lend_limit) for c in children}


def _check_level(
    flavor: Flavor,
    parent_id: int | None,
    *,
    child: tuple[ChildKey, Share | None] | None = None,
    parent_override: tuple[Decimal, Decimal] | None = None,
    field: str = "quota",
) -> None:
    parent_quota, ratio, shares = _level(flavor, parent_id)
    if parent_override is not None:
        parent_quota, ratio = parent_override
    if child is not None:
        key, share = child
        if share is None:
            shares.pop(key, None)
        else:
            shares[key] = share
    violations = level_violations(parent_quota, ratio, shares.values())
    if violations:
        where = _owner_label(("department", parent_id) if parent_id else None)
        raise ValidationError(
            {field: [_violation_text(v, where, flavor, ratio, parent_quota) for v in violations]}
        )


def _violation_text(v, where: str, flavor: Flavor, ratio: Decimal, parent_quota: Decimal) -> str:
    if v.rule == "overcommit":
        return _(
            "The quotas of %(where)s's children for %(flavor)s would add up to %(total)s, above "
            "its overcommit ratio %(ratio)s × quota %(quota)s = %(limit)s."
        ) % {
            "where": where,
            "flavor": flavor,
            "total": _n(v.total),
            "ratio": _n(ratio),
            "quota": _n(parent_quota),
            "limit": _n(v.limit),
        }
    return _(
        "The never-lent parts (quota − lend limit) of %(where)s's children for %(flavor)s would "
        "add up to %(total)s, above its quota %(quota)s: they cannot be oversold."
    ) % {"where": where, "flavor": flavor, "total": _n(v.total), "quota": _n(parent_quota)}


def _n(value: Decimal) -> str:
    return f"{value.normalize():f}"


def _check_units(flavor: Flavor, **values: Decimal | None) -> None:
    errors = {}
    for name, value in values.items():
        if value is None:
            continue
        if value < 0 or value > Decimal(1_000_000):
            errors[name] = [_("Must be between 0 and 1,000,000.")]
        elif not flavor.shareable and value != value.to_integral_value():
            errors[name] = [_("%(flavor)s is not shareable: use whole units.") % {"flavor": flavor}]
    if errors:
        raise ValidationError(errors)


def _parent_department_id(department: Department | None, project: Project | None) -> int | None:
    return project.department_id if project is not None else department.parent_id


def quota_node_set(
    *,
    actor: User,
    flavor: Flavor,
    department: Department | None = None,
    project: Project | None = None,
    quota: Decimal,
    borrow_limit: Decimal | None = None,
    lend_limit: Decimal | None = None,
    overcommit_ratio: Decimal = Decimal(1),
) -> QuotaNode:
    """Create the quota node of (owner, flavor), or replace its values."""
    if (department is None) == (project is None):
        raise ValidationError(_("A quota node belongs to exactly one department or project."))
    perm.require(perm.can_edit_quota_of(scope_for(actor), department=department, project=project))
    Flavor.objects.select_for_update().get(pk=flavor.pk)
    node = QuotaNode.objects.filter(flavor=flavor, department=department, project=project).first()
    node = node or QuotaNode(flavor=flavor, department=department, project=project)
    return _apply_quota_values(
        node, quota=quota, borrow_limit=borrow_limit, lend_limit=lend_limit, overcommit_ratio=overcommit_ratio
    )


def quota_node_update(*, actor: User, node: QuotaNode, **fields) -> QuotaNode:
    perm.require(perm.can_edit_quota_of(scope_for(actor), department=node.department, project=node.project))
    Flavor.objects.select_for_update().get(pk=node.flavor_id)
    values = {
        name: getattr(node, name) for name in ("quota", "borrow_limit", "lend_limit", "overcommit_ratio")
    }
    values.update(fields)
    return _apply_quota_values(node, **values)


def _apply_quota_values(node: QuotaNode, *, quota, borrow_limit, lend_limit, overcommit_ratio) -> QuotaNode:
    flavor = node.flavor
    _check_units(flavor, quota=quota, borrow_limit=borrow_limit, lend_limit=lend_limit)
    if lend_limit is not None and lend_limit > quota:
        raise ValidationError(
            {"lend_limit": [_("The lend limit cannot exceed the quota (%(q)s).") % {"q": _n(quota)}]}
        )
    share = Share(quota, lend_limit)
    _check_level(flavor, _parent_department_id(node.department, node.project), child=(_key_of(node), share))
    if node.department_id:
        _check_level(flavor, node.department_id, parent_override=(quota, overcommit_ratio))
    _check_loans_fit(node, quota)
    return _save(
        node, quota=quota, borrow_limit=borrow_limit, lend_limit=lend_limit, overcommit_ratio=overcommit_ratio
    )


def quota_node_delete(*, actor: User, node: QuotaNode) -> None:
    perm.require(perm.can_edit_quota_of(scope_for(actor), department=node.department, project=node.project))
    Flavor.objects.select_for_update().get(pk=node.flavor_id)
    if node.loans_out.exists() or node.loans_in.exists():
        raise ValidationError(_("This quota has loans on record; set its quota to 0 instead."))
    if node.department_id:
        _check_level(node.flavor, node.department_id, parent_override=(Decimal(0), Decimal(1)))
    node.delete()


def check_tree_move(kind: str, obj_id: int, new_department_id: int | None) -> None:
    """Registered with ``portal.hooks``: a department or project may move only if each of
    its quota nodes fits under the new parent."""
    nodes = QuotaNode.objects.filter(**{kind: obj_id}).select_related("flavor")
    for node in nodes:
        Flavor.objects.select_for_update().get(pk=node.flavor_id)
        _check_level(
            node.flavor,
            new_department_id,
            child=(_key_of(node), Share(node.quota, node.lend_limit)),
            field="parent" if kind == "department" else "department",
        )


# --- moving a project (portal.services.project_move, through portal.hooks) ---------------


def check_project_move(project: Project, to_department: Department, at: datetime) -> None:
    """A project with a live loan (pending, or active and not yet over) on any of its quota nodes
    does not move: the loan was agreed between the admins of its current department and the other
    side, and the lender's hold-backs were computed in the old tree. Cancel it or let it end."""
    live = Loan.objects.filter(
        Q(lender__project=project) | Q(borrower__project=project),
        state__in=_LIVE_LOANS,
        ends_at__gt=timezone.now(),
    ).order_by("pk")
    ids = list(live.values_list("pk", flat=True))
    if ids:
        raise ValidationError({"department": [_(
            "The project has live loans (%(ids)s); cancel them or wait until they end before moving it."
        ) % {"ids": ", ".join(f"#{pk}" for pk in ids)}]})


def move_project_quota(project: Project, from_department_id: int, actor: User) -> None:
    """After ``project`` changed department: its quota nodes now hang under the new department's
    nodes of the same flavor (a project node's parent is its department's node). The nodes keep
    their approved values (quota, limits, windows, loans on record); each flavor's level at the new
    department is validated as a quota edit would be (DESIGN §3). Where the new department has no
    node of a flavor in which the project holds guaranteed quota, the department's node is created
    with just that much quota (Σ of its children's), no borrow or lend limit, validated one level
    up; if that level cannot hold it either, the move is refused with the reason."""
    department = project.department
    errors = []
    for node in QuotaNode.objects.filter(project=project).select_related("flavor").order_by("flavor_id"):
        Flavor.objects.select_for_update().get(pk=node.flavor_id)
        try:
            _hold_under(node, department)
        except ValidationError as exc:
            errors.append(
                _("%(department)s cannot hold the project's quota of %(quota)s %(flavor)s: %(why)s")
                % {"department": department, "quota": _n(node.quota), "flavor": node.flavor,
                   "why": " ".join(exc.messages)}
            )
    if errors:
        raise ValidationError({"department": errors})


def _hold_under(node: QuotaNode, department: Department) -> None:
    if QuotaNode.objects.filter(flavor=node.flavor, department=department).exists():
        _check_level(node.flavor, department.pk)
        return
    _quota, _ratio, shares = _level(node.flavor, department.pk)  # the project is among them now
    needed = max(
        sum((c.quota for c in shares.values()), Decimal(0)),
        sum((c.never_lent for c in shares.values()), Decimal(0)),
    )
    if needed == 0:
        return  # nothing guaranteed: a missing department node (quota 0) holds it
    _apply_quota_values(
        QuotaNode(flavor=node.flavor, department=department),
        quota=needed, borrow_limit=None, lend_limit=None, overcommit_ratio=Decimal(1),
    )


# --- loans and windows --------------------------------------------------------------------

_LIVE_LOANS = LIVE_LOANS


def _check_loans_fit(node: QuotaNode, quota: Decimal) -> None:
    if not node.pk:
        return
    lent = _max_overlapping_out(node, None, None)
    if lent > quota:
        raise ValidationError(
            {
                "quota": [
                    _("%(amount)s of this quota is promised to loans; the quota cannot go below that.")
                    % {"amount": _n(lent)}
                ]
            }
        )


def _max_overlapping_out(lender: QuotaNode, starts_at: datetime | None, ends_at: datetime | None) -> Decimal:
    """Upper bound of what ``lender`` has lent at once within [starts_at, ends_at): the sum of
    all live outgoing loans overlapping the interval (the whole future when unbounded)."""
    return lent_out([lender.pk], starts_at, ends_at).get(lender.pk, Decimal(0))


def loan_create(
    *,
    actor: User,
    lender: QuotaNode,
    borrower: QuotaNode,
    amount: Decimal,
    starts_at: datetime,
    ends_at: datetime,
    reason: str = "",
    state: str = LoanState.PENDING,
) -> Loan:
    """Record a loan. Pending loans wait for the lender's admin (approval workflow);
    a platform admin may record one directly as active."""
    scope = scope_for(actor)
    if state == LoanState.ACTIVE:
        perm.require(scope.platform_admin)
    else:
        perm.require(not scope.auditor and scope.user_id is not None)
    errors = {}
    if lender.flavor_id != borrower.flavor_id:
        errors["borrower"] = [_("Lender and borrower must hold quota of the same flavor.")]
    if lender.pk == borrower.pk:
        errors["borrower"] = [_("A node cannot borrow from itself.")]
    if ends_at <= starts_at:
        errors["ends_at"] = [_("The loan must end after it starts.")]
    if errors:
        raise ValidationError(errors)
    Flavor.objects.select_for_update().get(pk=lender.flavor_id)
    _check_units(lender.flavor, amount=amount)
    if amount <= 0:
        raise ValidationError({"amount": [_("Lend a positive amount.")]})
    already = _max_overlapping_out(lender, starts_at, ends_at)
    if already + amount > lender.quota:
        raise ValidationError(
            {
                "amount": [
                    _(
                        "%(owner)s has quota %(q)s and %(lent)s already lent in "
                        "this period; it cannot lend %(amount)s more."
                    )
                    % {
                        "owner": lender.owner,
                        "q": _n(lender.quota),
                        "lent": _n(already),
                        "amount": _n(amount),
                    }
                ]
            }
        )
    return _save(
        Loan(),
        lender=lender,
        borrower=borrower,
        amount=amount,
        starts_at=starts_at,
        ends_at=ends_at,
        reason=reason,
        state=state,
        requested_by=actor,
    )


def loan_cancel(*, actor: User, loan: Loan) -> Loan:
    scope = scope_for(actor)
    perm.require(scope.platform_admin or loan.requested_by_id == actor.pk)
    # Conditional update: only a live loan can be cancelled, and only once.
    changed = Loan.objects.filter(pk=loan.pk, state__in=_LIVE_LOANS).update(state=LoanState.CANCELLED)
    if not changed:
        raise ValidationError(_("Only a pending or active loan can be cancelled."))
    loan.refresh_from_db()
    return loan


def _check_window(node: QuotaNode, quota: Decimal | None, lend_limit: Decimal | None) -> None:
    _check_units(node.flavor, quota=quota, lend_limit=lend_limit)
    if quota is None and lend_limit is None:
        raise ValidationError(_("A window must override the quota, the lend limit, or both."))
    # A window may only give capacity back to the pool, never take more than validated.
    if quota is not None and quota > node.quota:
        raise ValidationError(
            {"quota": [_("A window can lower the quota (%(q)s), not raise it.") % {"q": _n(node.quota)}]}
        )
    ceiling = node.quota if quota is None else quota
    if lend_limit is not None and lend_limit > ceiling:
        raise ValidationError(
            {"lend_limit": [_("The lend limit cannot exceed the quota (%(q)s).") % {"q": _n(ceiling)}]}
        )


def window_create(*, actor: User, quota_node: QuotaNode, **fields) -> QuotaWindow:
    perm.require(
        perm.can_edit_quota_of(scope_for(actor), department=quota_node.department, project=quota_node.project)
    )
    _check_window(quota_node, fields.get("quota"), fields.get("lend_limit"))
    return _save(QuotaWindow(quota_node=quota_node), **fields)


def window_update(*, actor: User, window: QuotaWindow, **fields) -> QuotaWindow:
    node = window.quota_node
    perm.require(perm.can_edit_quota_of(scope_for(actor), department=node.department, project=node.project))
    _check_window(node, fields.get("quota", window.quota), fields.get("lend_limit", window.lend_limit))
    return _save(window, **fields)


def window_delete(*, actor: User, window: QuotaWindow) -> None:
    node = window.quota_node
    perm.require(perm.can_edit_quota_of(scope_for(actor), department=node.department, project=node.project))
    window.delete()
