"""Who may change what. Reading is decided by ``portal.selectors``; these answer writes.

All take a ``Scope`` so a request computes memberships once. Auditors never pass any of
them: they hold no write role.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.utils.translation import gettext as _

from .models import Department, Project, Role
from .selectors import Scope


def can_edit_department(scope: Scope, department: Department) -> bool:
    # A department admin shapes the subtree *below* its department; its own node (and its
    # place in the tree) belongs to whoever administers the parent.
    return scope.platform_admin or (
        department.parent_id is not None and department.parent_id in scope.admin_departments
    )


def can_create_department(scope: Scope, parent_id: int | None) -> bool:
    return scope.platform_admin or (parent_id is not None and parent_id in scope.admin_departments)


def can_manage_projects_of(scope: Scope, department_id: int) -> bool:
    return scope.platform_admin or department_id in scope.admin_departments


def can_edit_project(scope: Scope, project: Project) -> bool:
    return can_manage_projects_of(scope, project.department_id) or project.pk in scope.admin_projects


def can_grant(scope: Scope, role: str, department: Department | None, project: Project | None) -> bool:
    if role in (Role.PLATFORM_ADMIN, Role.AUDITOR):
        return scope.platform_admin
    if department is not None:
        return can_manage_projects_of(scope, department.pk)
    return project is not None and can_edit_project(scope, project)


def can_edit_quota_of(scope: Scope, *, department: Department | None, project: Project | None) -> bool:
    """Quota of a node is set by the admin of its parent: the platform for top-level
    departments, a department admin for what sits below its department."""
    if project is not None:
        return can_manage_projects_of(scope, project.department_id)
    return department is not None and can_edit_department(scope, department)


def require(allowed: bool) -> None:
    if not allowed:
        raise PermissionDenied(_("You do not have permission to change this."))
