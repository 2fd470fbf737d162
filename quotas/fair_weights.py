"""Fair-share shares of the tree's nodes (DESIGN §16): the default (a node's own quota in normalised
cards, summed over its flavors) and the weight a platform admin sets instead (``FairShareWeight``).

Reads go through the visibility selector: a node the caller cannot see is a 404. Only platform
admins set or clear a weight; the next scheduling cycle reads it with the rest of its configuration
(``jobs.scheduling.config``: the weights are among the rows its digest covers)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from portal import permissions as perm
from portal.models import Department, Project, User
from portal.selectors import get_visible, scope_for, visible_departments, visible_projects

from .fair_shares import shares_of
from .models import FAIR_WEIGHT_MAX, FairShareWeight, QuotaNode

KINDS = ("department", "project")
Owner = Department | Project


def tree_id(owner: Owner) -> str:
    return f"p{owner.pk}" if isinstance(owner, Project) else f"d{owner.pk}"


def visible_owner(user: User, kind: str, pk) -> Owner:
    """The department or project ``pk`` if the user sees it; anything else (an unknown kind too)
    is a 404."""
    if kind == "department":
        return get_visible(visible_departments(user), pk=pk)
    if kind == "project":
        return get_visible(visible_projects(user), pk=pk)
    return get_visible(Department.objects.none(), pk=pk)


def normalised_quota(nodes) -> dict[str, float]:
    """Tree id → its own quota in normalised cards (nodes: QuotaNode rows with their flavor)."""
    quota = [(f"p{n.project_id}" if n.project_id else f"d{n.department_id}", n.flavor.name, n.quota)
             for n in nodes]
    norms = {n.flavor.name: n.flavor.relative_throughput * n.flavor.fraction_numerator
             / n.flavor.fraction_denominator for n in nodes}
    return shares_of((), quota, norms, {})


def all_shares() -> tuple[dict[str, float], dict[str, FairShareWeight]]:
    """Every department's and project's shares, and the weights set (tree id →)."""
    nodes = [f"d{pk}" for pk in Department.objects.values_list("pk", flat=True)]
    nodes += [f"p{pk}" for pk in Project.objects.values_list("pk", flat=True)]
    weights = {(f"p{w.project_id}" if w.project_id else f"d{w.department_id}"): w
               for w in FairShareWeight.objects.select_related("set_by")}
    defaults = normalised_quota(QuotaNode.objects.select_related("flavor"))
    shares = {node: defaults.get(node, 0.0) for node in nodes}
    shares.update({node: float(w.weight) for node, w in weights.items()})
    return shares, weights


@dataclass(frozen=True)
class NodeShares:
    kind: str
    owner: Owner
    default_shares: float  # its quota in normalised cards
    weight: Decimal | None  # an admin's weight, None: the default applies
    set_by: str | None
    set_at: datetime | None

    @property
    def shares(self) -> float:
        return self.default_shares if self.weight is None else float(self.weight)


def node_shares(owner: Owner) -> NodeShares:
    kind = "project" if isinstance(owner, Project) else "department"
    nodes = QuotaNode.objects.select_related("flavor").filter(**{kind: owner})
    default = normalised_quota(nodes).get(tree_id(owner), 0.0)
    w = FairShareWeight.objects.select_related("set_by").filter(**{kind: owner}).first()
    return NodeShares(kind, owner, default, None if w is None else w.weight,
                      None if w is None or w.set_by is None else w.set_by.username,
                      None if w is None else w.set_at)


def parse_weight(value) -> Decimal:
    """A weight from a form or JSON: a number > 0, at most 1,000,000, at most 3 decimals."""
    bad = ValidationError({"weight": [_("The weight must be a number greater than 0 and at most "
                                        "1,000,000, with at most 3 decimals.")]})
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise bad
    try:
        d = Decimal(str(value).strip())
    except InvalidOperation:
        raise bad from None
    if not d.is_finite() or d <= 0 or d > FAIR_WEIGHT_MAX or d != d.quantize(Decimal("0.001")):
        raise bad
    return d


def fair_share_weight_set(*, actor: User, owner: Owner, weight) -> FairShareWeight:
    """Set the node's weight (platform admins only); a bad value changes nothing."""
    perm.require(scope_for(actor).platform_admin)
    value = parse_weight(weight)
    kind = "project" if isinstance(owner, Project) else "department"
    with transaction.atomic():
        row, _created = FairShareWeight.objects.update_or_create(
            **{kind: owner}, defaults={"weight": value, "set_by": actor, "set_at": timezone.now()})
    return row


def fair_share_weight_clear(*, actor: User, owner: Owner) -> bool:
    """Return the node to its default shares (platform admins only); True if a weight was set."""
    perm.require(scope_for(actor).platform_admin)
    kind = "project" if isinstance(owner, Project) else "department"
    deleted, _rows = FairShareWeight.objects.filter(**{kind: owner}).delete()
    return bool(deleted)

