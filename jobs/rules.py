"""What a submission must satisfy besides its shape (issue 18 items 4–6), in one place for
``job_submit`` (so the API, the form's live check, the CLI and seeding share it) and for the
approval of a job:

* it can ever run (``check_can_ever_run``): its smallest start — ``min_workers`` (else
  ``workers``) × ``gpus_per_worker`` (× ``gpu_milli``/1000), in units of the flavor — fits the
  flavor's nodes of one cluster and stays within every cap on its project's path;
* its priority class may be used for its kind by the submitter (``priority_class_reasons``);
* its maximum runtime is within the centre's maximum for its kind (``job_runtime``).

Refusals are ``ValidationError``s naming the field and the numbers; the approval a rule asks for
comes back as reasons, like ``approvals.approval_reasons``."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone, translation
from django.utils.translation import gettext as _
from django.utils.translation import gettext_noop

from jobs.models import USAGE_ROLE_RANK, JobKind, PriorityClass, UsageRole
from portal.models import Project, User
from portal.selectors import scope_for, visible_departments
from portal.texts import Message, message
from quotas.models import Flavor
from quotas.selectors import Ceiling, node_sizes_by_cluster, path_ceilings

MILLI = Decimal(1000)


def _qty(value: Decimal) -> str:
    return f"{value.normalize():f}"


# --- item 4: a job that could never run ----------------------------------------------------


def min_demand(workers: int, gpus_per_worker: int, gpu_milli: int | None, min_workers: int | None) -> Decimal:
    """The units of the flavor a job needs at once to start: an elastic job starts at
    ``min_workers``; a shared request is ``gpu_milli`` thousandths of one device."""
    units = Decimal((min_workers or workers) * gpus_per_worker)
    return units * gpu_milli / MILLI if gpu_milli else units


@dataclass(frozen=True)
class Capacity:
    """The flavor's nodes in active clusters, whatever their state (a cordoned or down node
    comes back), as a job sees them: a worker on one node, a job within one cluster."""

    sizes: dict[int, list[int]]  # cluster id → GPU count of each node

    @property
    def total(self) -> int:
        return sum(sum(nodes) for nodes in self.sizes.values())

    @property
    def largest_node(self) -> int:
        return max((max(nodes) for nodes in self.sizes.values()), default=0)

    @property
    def largest_cluster(self) -> int:
        return max((sum(nodes) for nodes in self.sizes.values()), default=0)

    def workers_fitting(self, gpus_per_worker: int) -> int:
        """The most workers of that size one cluster can hold at once."""
        return max((sum(n // gpus_per_worker for n in nodes) for nodes in self.sizes.values()), default=0)


def flavor_capacity(flavor: Flavor) -> Capacity:
    return Capacity(node_sizes_by_cluster(flavor.pk))


def _capacity_errors(
    capacity: Capacity, flavor: Flavor, size_field: str, workers: int, gpus_per_worker: int, demand: Decimal
) -> dict[str, list[str]]:
    if not capacity.sizes:
        return {
            "flavor": [
                _("No node of an active cluster offers %(f)s: a job on it could never run.") % {"f": flavor}
            ]
        }
    if gpus_per_worker > capacity.largest_node:
        return {
            "gpus_per_worker": [
                _("%(f)s nodes have at most %(n)d devices; a worker must fit on one node.")
                % {"f": flavor, "n": capacity.largest_node}
            ]
        }
    if demand > capacity.largest_cluster:
        return {
            size_field: [
                _(
                    "The job needs %(n)s × %(f)s at once, more than the %(c)d that the largest cluster "
                    "has (a job runs within one cluster)."
                )
                % {"n": _qty(demand), "f": flavor, "c": capacity.largest_cluster}
            ]
        }
    fitting = capacity.workers_fitting(gpus_per_worker)
    if workers > fitting:
        return {
            size_field: [
                _(
                    "At most %(k)d workers of %(g)d × %(f)s fit on the nodes of one cluster; the job "
                    "needs %(m)d at once."
                )
                % {"k": fitting, "g": gpus_per_worker, "f": flavor, "m": workers}
            ]
        }
    return {}


def owner_label(ceiling: Ceiling, viewer: User, project: Project) -> str:
    """The capped node's name when the viewer may see it; otherwise only where it is."""
    node = ceiling.node
    if node.project_id is not None:
        return node.project.code
    scope = scope_for(viewer)
    if scope.sees_everything or visible_departments(viewer).filter(pk=node.department_id).exists():
        return node.department.name
    return _("a department above %(project)s") % {"project": project.code}


def ceiling_parts(ceiling: Ceiling) -> str:
    parts = [
        _("quota %(n)s") % {"n": _qty(ceiling.quota)},
        _("borrow limit %(n)s") % {"n": _qty(ceiling.borrow_limit)},
    ]
    if ceiling.loans:
        parts.append(_("approved loans %(n)s") % {"n": _qty(ceiling.loans)})
    return " + ".join(parts)


def binding_ceiling(project: Project, flavor: Flavor) -> Ceiling | None:
    """The smallest cap on the project's path (None: nothing below the pool's capacity)."""
    ceilings = path_ceilings(project, flavor.pk, timezone.now())
    return min(ceilings, key=lambda c: c.limit, default=None)


def _quota_errors(
    viewer: User, project: Project, flavor: Flavor, size_field: str, demand: Decimal
) -> dict[str, list[str]]:
    ceiling = binding_ceiling(project, flavor)
    if ceiling is None or demand <= ceiling.limit:
        return {}
    field = "flavor" if ceiling.limit == 0 else size_field
    return {
        field: [
            _(
                "The job needs %(n)s × %(f)s at once, more than %(owner)s may ever hold: "
                "%(limit)s (%(parts)s)."
            )
            % {
                "n": _qty(demand),
                "f": flavor,
                "owner": owner_label(ceiling, viewer, project),
                "limit": _qty(ceiling.limit),
                "parts": ceiling_parts(ceiling),
            }
        ]
    }


def never_runs_errors(
    *,
    viewer: User,
    project: Project,
    flavor: Flavor,
    workers: int,
    gpus_per_worker: int,
    gpu_milli: int | None,
    min_workers: int | None,
) -> dict[str, list[str]]:
    """Why a job of this shape could never start (empty: it could), per field. Quota caps use
    the values configured now: a quota raised or a loan approved later lets a resubmission in."""
    size_field = "min_workers" if min_workers else "workers"
    start = min_workers or workers
    demand = min_demand(workers, gpus_per_worker, gpu_milli, min_workers)
    errors = _capacity_errors(flavor_capacity(flavor), flavor, size_field, start, gpus_per_worker, demand)
    for field, messages in _quota_errors(viewer, project, flavor, size_field, demand).items():
        errors.setdefault(field, []).extend(messages)
    return errors


def check_can_ever_run(**shape) -> None:
    errors = never_runs_errors(**shape)
    if errors:
        raise ValidationError(errors)


# --- item 5: who may use a priority class ---------------------------------------------------


def usage_rank(actor: User, project: Project | None) -> int:
    """The actor's rank (``USAGE_ROLE_RANK``) in the project; without one, the highest over the
    projects the actor may submit to (what a form shows before a project is chosen)."""
    scope = scope_for(actor)
    if scope.platform_admin:
        return USAGE_ROLE_RANK[UsageRole.PLATFORM_ADMIN]
    if project is None:
        admin_department = bool(scope.admin_departments)
        admin_project = bool(scope.admin_projects)
    else:
        admin_department = project.department_id in scope.admin_departments
        admin_project = project.pk in scope.admin_projects
    if admin_department:
        return USAGE_ROLE_RANK[UsageRole.DEPARTMENT_ADMIN]
    if admin_project:
        return USAGE_ROLE_RANK[UsageRole.PROJECT_ADMIN]
    return USAGE_ROLE_RANK[UsageRole.MEMBER]


def kind_allowed(priority_class: PriorityClass, kind: str) -> bool:
    return not priority_class.allowed_kinds or kind in priority_class.allowed_kinds


def below_role(priority_class: PriorityClass, rank: int) -> bool:
    return rank < USAGE_ROLE_RANK.get(priority_class.min_role, 0)


def usable(priority_class: PriorityClass, kind: str, rank: int) -> bool:
    """May be chosen (perhaps with approval) for this kind at this rank."""
    return kind_allowed(priority_class, kind) and (
        not below_role(priority_class, rank) or priority_class.approval_below_role
    )


def priority_class_check(*, rank: int, project: Project, kind: str, priority_class: PriorityClass) -> bool:
    """Refuses a class that is not for this kind, or above the submitter's role (``rank`` in the
    project, ``usage_rank``) when the class does not let lower roles ask for it; True when the job
    needs approval for its class."""
    if not kind_allowed(priority_class, kind):
        raise ValidationError(
            {
                "priority_class": [
                    _("The priority class %(pc)s is for %(kinds)s jobs only.")
                    % {"pc": priority_class.name, "kinds": priority_class.kinds_display}
                ]
            }
        )
    if not below_role(priority_class, rank):
        return False
    if not priority_class.approval_below_role:
        raise ValidationError(
            {
                "priority_class": [
                    _("The priority class %(pc)s is for the role %(role)s or above in %(project)s.")
                    % {
                        "pc": priority_class.name,
                        "role": UsageRole(priority_class.min_role).label,
                        "project": project.code,
                    }
                ]
            }
        )
    return True


def priority_class_reason(priority_class: PriorityClass) -> Message:
    """Why a job needs approval for its class (``priority_class_check`` said so): a message,
    stored with the request and rendered for each reader (the role's name too)."""
    with translation.override("en"):
        role = str(UsageRole(priority_class.min_role).label)  # the msgid of the role's name
    return message(
        gettext_noop("The priority class %(pc)s needs approval below the role %(role)s."),
        pc=priority_class.name,
        role=message(role),
    )


def priority_class_reasons(rank: int, kind: str, priority_class: PriorityClass) -> list[Message]:
    """The approval reason of the class at the submitter's ``rank``, if it asks for one, without
    refusing (for summaries)."""
    asks = priority_class.approval_below_role and below_role(priority_class, rank)
    if kind_allowed(priority_class, kind) and asks:
        return [priority_class_reason(priority_class)]
    return []


def class_needs_platform(priority_class: PriorityClass, rank: int) -> bool:
    """A class reserved to platform admins is granted to others by a platform admin."""
    return priority_class.min_role == UsageRole.PLATFORM_ADMIN and below_role(priority_class, rank)


# --- item 6: the centre's maximum runtime per kind ------------------------------------------


def max_runtime_hours(kind: str) -> int:
    """The centre's maximum for the kind (0: none below the 90 days any job may ask for)."""
    return settings.GPUPOOL["MAX_RUNTIME_HOURS"].get(kind, 0)


def default_runtime(kind: str) -> int | None:
    """A job's maximum runtime when it names none: a dev job's lifetime, else the kind's
    maximum (as Slurm gives a job without ``--time`` its partition's limit); None: unbounded."""
    if kind == JobKind.DEV:
        return settings.GPUPOOL["DEV_LIFETIME_SECONDS"]
    return max_runtime_hours(kind) * 3600 or None


def job_runtime(kind: str, max_runtime_seconds: int | None) -> int | None:
    """The maximum runtime the job gets; refused above the centre's maximum for its kind —
    never shortened quietly."""
    if max_runtime_seconds is None:
        return default_runtime(kind)
    limit = max_runtime_hours(kind)
    if limit and max_runtime_seconds > limit * 3600:
        raise ValidationError(
            {
                "max_runtime_seconds": [
                    _(
                        "%(kind)s jobs may run at most %(max)d h here (the centre's maximum); "
                        "%(h)s h was asked."
                    )
                    % {
                        "kind": dict(JobKind.choices).get(kind, kind),
                        "max": limit,
                        "h": _qty((Decimal(max_runtime_seconds) / 3600).quantize(Decimal("0.1"))),
                    }
                ]
            }
        )
    return max_runtime_seconds
