"""The one place that decides what a user may see (DESIGN §1: visibility fails closed).

Every list, detail, export and report starts from ``scope_for(user)``. A user with no
membership sees no tenant object; an object outside the scope answers 404, never 403,
so its existence is not disclosed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import Http404

from .models import Department, DirectoryRule, Membership, Project, Role, User

_SCOPE_ATTR = "_gpupool_scope"
_PROJECT_IDS_ATTR = "_gpupool_project_ids"


@dataclass(frozen=True, slots=True)
class Scope:
    user_id: int | None
    platform_admin: bool = False
    auditor: bool = False
    # Department ids whose subtree the user administers / reads as finance (expanded).
    admin_departments: frozenset[int] = frozenset()
    finance_departments: frozenset[int] = frozenset()
    # The departments named directly on department_admin memberships (not expanded).
    admin_roots: frozenset[int] = frozenset()
    member_projects: frozenset[int] = frozenset()
    admin_projects: frozenset[int] = frozenset()

    @property
    def sees_everything(self) -> bool:
        return self.platform_admin or self.auditor

    @property
    def department_ids(self) -> frozenset[int]:
        return self.admin_departments | self.finance_departments

    @property
    def roles(self) -> frozenset[str]:
        found = set()
        for role, present in (
            (Role.PLATFORM_ADMIN, self.platform_admin),
            (Role.AUDITOR, self.auditor),
            (Role.DEPARTMENT_ADMIN, self.admin_roots),
            (Role.FINANCE, self.finance_departments),
            (Role.PROJECT_ADMIN, self.admin_projects),
            (Role.MEMBER, self.member_projects),
        ):
            if present:
                found.add(str(role))
        return frozenset(found)


def department_children_map(
    pairs: Iterable[tuple[int, int | None]] | None = None,
) -> dict[int | None, list[int]]:
    """Each department's children, from the given (department, parent) pairs or else read."""
    children: dict[int | None, list[int]] = defaultdict(list)
    if pairs is None:
        pairs = Department.objects.values_list("id", "parent_id")
    for dept_id, parent_id in pairs:
        children[parent_id].append(dept_id)
    return children


def subtree_ids(roots, children: dict[int | None, list[int]]) -> frozenset[int]:
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(children.get(node, ()))
    return frozenset(seen)


def _build_scope(user: User) -> Scope:
    if not user.is_authenticated or not user.is_active:
        return Scope(user_id=None)
    rows = list(Membership.objects.filter(user=user).values_list("role", "department_id", "project_id"))
    by_role: dict[str, set[int]] = defaultdict(set)
    for role, dept_id, project_id in rows:
        by_role[role].add(dept_id or project_id or 0)
    children = department_children_map() if (by_role[Role.DEPARTMENT_ADMIN] or by_role[Role.FINANCE]) else {}
    return Scope(
        user_id=user.pk,
        platform_admin=Role.PLATFORM_ADMIN in by_role or user.is_superuser,
        auditor=Role.AUDITOR in by_role,
        admin_departments=subtree_ids(by_role[Role.DEPARTMENT_ADMIN], children),
        finance_departments=subtree_ids(by_role[Role.FINANCE], children),
        admin_roots=frozenset(by_role[Role.DEPARTMENT_ADMIN]),
        member_projects=frozenset(by_role[Role.MEMBER] | by_role[Role.PROJECT_ADMIN]),
        admin_projects=frozenset(by_role[Role.PROJECT_ADMIN]),
    )


def scope_for(user: User) -> Scope:
    """The user's scope, computed once per user object (i.e. once per request)."""
    scope = getattr(user, _SCOPE_ATTR, None)
    if scope is None:
        scope = _build_scope(user)
        if user.is_authenticated:
            setattr(user, _SCOPE_ATTR, scope)
    return scope


def forget_scope(user: User) -> None:
    """Drop the cached scope after the user's memberships changed."""
    for attr in (_SCOPE_ATTR, _PROJECT_IDS_ATTR):
        if hasattr(user, attr):
            delattr(user, attr)


def visible_departments(user: User) -> QuerySet[Department]:
    scope = scope_for(user)
    if scope.sees_everything:
        return Department.objects.all()
    member_depts = Project.objects.filter(id__in=scope.member_projects).values("department_id")
    return Department.objects.filter(id__in=scope.department_ids) | Department.objects.filter(
        id__in=member_depts
    )


def visible_projects(user: User) -> QuerySet[Project]:
    scope = scope_for(user)
    if scope.sees_everything:
        return Project.objects.all()
    return Project.objects.filter(id__in=scope.member_projects) | Project.objects.filter(
        department_id__in=scope.department_ids
    )


def visible_project_ids(user: User) -> list[int] | None:
    """The ids of ``visible_projects``, read once per user object (i.e. once per request), or
    None for a user who sees every project. For filters that name the ids outright: PostgreSQL
    planned the job lists' six-relation join around the projects subquery in 4–7 ms against
    under 1 ms of execution at 100,000 jobs, and in ~1 ms with the ids written out."""
    scope = scope_for(user)
    if scope.sees_everything:
        return None
    ids = getattr(user, _PROJECT_IDS_ATTR, None)
    if ids is None:
        ids = sorted(scope.member_projects) if not scope.department_ids else sorted(
            visible_projects(user).values_list("id", flat=True))
        if user.is_authenticated:
            setattr(user, _PROJECT_IDS_ATTR, ids)
    return ids


def visible_memberships(user: User) -> QuerySet[Membership]:
    scope = scope_for(user)
    if scope.sees_everything:
        return Membership.objects.all()
    return Membership.objects.filter(
        project_id__in=visible_projects(user).values("id")
    ) | Membership.objects.filter(department_id__in=scope.department_ids)


def get_visible(queryset: QuerySet, **lookup):
    """``get`` inside a visibility-filtered queryset; anything else is a 404."""
    try:
        return queryset.get(**lookup)
    except (queryset.model.DoesNotExist, ValueError, TypeError):
        raise Http404 from None


def department_ancestors(department_id: int, parents: dict[int, int | None] | None = None) -> list[int]:
    """The ids from ``department_id`` up to its top-level department, inclusive. ``parents``
    (each department's parent), when the caller has read the tree already."""
    if parents is None:
        parents = dict(Department.objects.values_list("id", "parent_id"))
    path, node = [], department_id
    while node is not None and node not in path:
        path.append(node)
        node = parents.get(node)
    return path


def visible_directory_rules(user: User) -> QuerySet[DirectoryRule]:
    """Directory rules (DESIGN §12) are the platform's: platform admins and auditors read them;
    for everyone else there are none (a rule's id answers 404)."""
    if scope_for(user).sees_everything:
        return DirectoryRule.objects.all()
    return DirectoryRule.objects.none()
