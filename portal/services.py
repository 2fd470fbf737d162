"""Writes of the tenancy model. Each takes the acting user, checks permission against the
one scope, validates, and writes inside the caller's transaction."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils.translation import gettext as _

from . import permissions as perm
from .hooks import run_tree_move_checks
from .models import Department, Membership, Project, Role, User
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


def project_create(
    *, actor: User, code: str, name: str, department: Department, description: str = ""
) -> Project:
    perm.require(perm.can_manage_projects_of(scope_for(actor), department.pk))
    project = Project(code=code, name=name, department=department, description=description)
    _full_clean(project)
    project.save()
    return project


def project_update(*, actor: User, project: Project, **fields) -> Project:
    scope = scope_for(actor)
    perm.require(perm.can_edit_project(scope, project))
    new_department = fields.pop("department", project.department)
    if new_department.pk != project.department_id:
        perm.require(
            perm.can_manage_projects_of(scope, project.department_id)
            and perm.can_manage_projects_of(scope, new_department.pk)
        )
        run_tree_move_checks("project", project.pk, new_department.pk)
        project.department = new_department
    for name, value in fields.items():
        setattr(project, name, value)
    _full_clean(project)
    project.save()
    return project


def membership_create(
    *,
    actor: User,
    user: User,
    role: str,
    department: Department | None = None,
    project: Project | None = None,
) -> Membership:
    _check_scope_kind(role, department, project)
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


def _check_scope_kind(role: str, department, project) -> None:
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
    membership.delete()
    forget_scope(membership.user)
