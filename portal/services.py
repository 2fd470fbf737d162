"""Writes of the tenancy model. Each takes the acting user, checks permission against the
one scope, validates, and writes inside the caller's transaction."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from . import permissions as perm
from .hooks import run_project_move_checks, run_project_move_hooks, run_tree_move_checks
from .models import (
    ApprovalRequest,
    ApprovalState,
    Department,
    Membership,
    Project,
    ProjectMove,
    Queueing,
    Role,
    User,
)
from .selectors import department_ancestors, forget_scope, scope_for


def _full_clean(obj, exclude=None) -> None:
    obj.full_clean(exclude=exclude, validate_constraints=False)


def department_create(
    *, actor: User, code: str, name: str, parent: Department | None, cost_centre: str = ""
) -> Department:
    perm.require(perm.can_create_department(scope_for(actor), parent.pk if parent else None))
    department = Department(code=code, name=name, parent=parent, cost_centre=cost_centre)
    _full_clean(department)
    department.save()
    return department


def department_update(*, actor: User, department: Department, **fields) -> Department:
    scope = scope_for(actor)
    perm.require(perm.can_edit_department(scope, department))
    if "parent" in fields and fields["parent"] != department.parent:
        _reparent(scope, department, fields.pop("parent"))
    for name, value in fields.items():
        setattr(department, name, value)
    _full_clean(department)
    department.save()
    return department


def _reparent(scope, department: Department, parent: Department | None) -> None:
    # Lock the department rows so two concurrent moves cannot build a cycle between them.
    list(Department.objects.select_for_update().order_by("id").values_list("id"))
    if parent is not None and department.pk in department_ancestors(parent.pk):
        raise ValidationError(
            {"parent": _("A department cannot be moved below itself or its own sub-department.")}
        )
    perm.require(perm.can_create_department(scope, parent.pk if parent else None))
    run_tree_move_checks("department", department.pk, parent.pk if parent else None)
    department.parent = parent


def department_delete(*, actor: User, department: Department) -> None:
    perm.require(perm.can_edit_department(scope_for(actor), department))
    if department.children.exists() or department.projects.exists():
        raise ValidationError(_("Only an empty department (no sub-departments, no projects) can be deleted."))
    department.delete()


# Set, like the quota, by the admin of the project's department: a strict or aged job holds a
# reservation that binds other projects' jobs, and a cap decides what the project's users may run.
QUEUEING_FIELDS = ("queueing", "aging_bound_seconds", "user_gpu_cap", "user_running_jobs_cap")


def project_create(
    *, actor: User, code: str, name: str, department: Department, description: str = "",
    queueing: str = Queueing.BEST_EFFORT, aging_bound_seconds: int | None = None,
    user_gpu_cap: int | None = None, user_running_jobs_cap: int | None = None,
) -> Project:
    perm.require(perm.can_manage_projects_of(scope_for(actor), department.pk))
    project = Project(code=code, name=name, department=department, description=description,
                      queueing=queueing, aging_bound_seconds=aging_bound_seconds,
                      user_gpu_cap=user_gpu_cap, user_running_jobs_cap=user_running_jobs_cap)
    _full_clean(project)
    project.save()
    return project


def project_update(*, actor: User, project: Project, **fields) -> Project:
    """Edit a project's own fields. A change of department is a move (``project_move``, now,
    without a reason): effective-dated, platform admins only, quota nodes carried along."""
    scope = scope_for(actor)
    perm.require(perm.can_edit_project(scope, project))
    if any(name in fields and fields[name] != getattr(project, name) for name in QUEUEING_FIELDS):
        # A strict or aged job holds a reservation that binds other projects' jobs: like the
        # quota, the queueing strategy is set by the admin of the project's department.
        perm.require(perm.can_edit_quota_of(scope, department=None, project=project))
    new_department = fields.pop("department", project.department)
    if new_department.pk != project.department_id:
        project_move(project=project, to_department=new_department, actor=actor, reason="")
        project.refresh_from_db()
    for name, value in fields.items():
        setattr(project, name, value)
    _full_clean(project)
    project.save()
    return project


def project_move(
    *, project: Project, to_department: Department, actor: User, reason: str = "", at: datetime | None = None
) -> ProjectMove:
    """Move a project to another department from ``at`` (default now) on: the one way a project
    changes department (DESIGN §7, "charged to the department that owned the project at the time
    of use"). Platform admins only. In one transaction, with the project row locked: the
    ProjectMove row (the effective-dated history the meter reads), the project's department, and
    whatever the apps above do through ``portal.hooks`` (billing refuses an ``at`` already
    metered or in a closed month; quotas refuses while loans are live and re-parents the
    project's quota nodes under the new department). Refusals are ValidationErrors naming the
    field: "department", "at" or "reason"."""
    perm.require(scope_for(actor).platform_admin)
    now = timezone.now()
    at = now if at is None else at
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        to_department = Department.objects.select_for_update().get(pk=to_department.pk)
        _check_move(project, to_department, at, now, reason)
        run_project_move_checks(project, to_department, at)
        from_department_id = project.department_id
        move = ProjectMove.objects.create(
            project=project, from_department_id=from_department_id, to_department=to_department,
            at=at, actor=actor, reason=reason,
        )
        project.department = to_department
        project.save(update_fields=["department"])
        run_project_move_hooks(project, from_department_id, actor)
    return move


def _check_move(
    project: Project, to_department: Department, at: datetime, now: datetime, reason: str
) -> None:
    if to_department.pk == project.department_id:
        already = _("The project already belongs to %(d)s.") % {"d": to_department}
        raise ValidationError({"department": already})
    if len(reason) > ProjectMove._meta.get_field("reason").max_length:
        raise ValidationError({"reason": _("Keep the reason within 300 characters.")})
    if timezone.is_naive(at):
        raise ValidationError({"at": _("Give the time of the move with its time zone.")})
    if at > now:
        raise ValidationError({"at": _("A move cannot take effect in the future; move the project then.")})
    if at < project.created_at:
        raise ValidationError({"at": _("The project did not exist yet at that time.")})
    last = project.moves.order_by("-at").values_list("at", flat=True).first()
    if last is not None and at <= last:
        text = _("The project's last move took effect at %(t)s; a new one must be later.")
        raise ValidationError({"at": text % {"t": _local(last)}})
    open_requests = ApprovalRequest.objects.filter(project=project, state=ApprovalState.PENDING)
    pending = sorted(open_requests.values_list("pk", flat=True))
    if pending:
        # Their approvers were chosen in the old department: decide or cancel them first.
        raise ValidationError({"department": _(
            "The project has pending approval requests (%(ids)s) addressed to its current department's "
            "approvers; decide or cancel them before moving it."
        ) % {"ids": ", ".join(f"#{pk}" for pk in pending)}})


def _local(at: datetime) -> str:
    return timezone.localtime(at).strftime("%Y-%m-%d %H:%M:%S %Z")


def membership_create(
    *,
    actor: User,
    user: User,
    role: str,
    department: Department | None = None,
    project: Project | None = None,
) -> Membership:
    check_scope_kind(role, department, project)
    perm.require(perm.can_grant(scope_for(actor), role, department, project))
    try:
        with transaction.atomic():
            membership = Membership.objects.create(
                user=user, role=role, department=department, project=project
            )
    except IntegrityError:
        raise ValidationError(_("This user already holds this role here.")) from None
    forget_scope(user)
    return membership


def check_scope_kind(role: str, department, project) -> None:
    if role in (Role.MEMBER, Role.PROJECT_ADMIN) and (project is None or department is not None):
        raise ValidationError({"project": _("This role is granted on a project (and only a project).")})
    if role in (Role.DEPARTMENT_ADMIN, Role.FINANCE) and (department is None or project is not None):
        raise ValidationError(
            {"department": _("This role is granted on a department (and only a department).")}
        )
    if role in (Role.PLATFORM_ADMIN, Role.AUDITOR) and (department is not None or project is not None):
        raise ValidationError({"role": _("This role applies to the whole platform; give no scope.")})


def membership_delete(*, actor: User, membership: Membership) -> None:
    perm.require(perm.can_grant(scope_for(actor), membership.role, membership.department, membership.project))
    if membership.rule_id is not None:
        # Removed here it would come back at the user's next sign-in: the directory decides.
        raise ValidationError(
            _("This role is managed by the directory (group %(group)s); change the group or the rule.")
            % {"group": membership.rule.group}
        )
    membership.delete()
    forget_scope(membership.user)
