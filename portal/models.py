"""Tenancy: the department tree, projects, users and their role memberships (DESIGN §1)."""

from django.contrib.auth.models import AbstractUser
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

code_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$",
    _("Use 1–40 letters, digits, '.', '_' or '-', starting with a letter or digit."),
)


class User(AbstractUser):
    display_name = models.CharField(_("display name"), max_length=120, blank=True)

    def __str__(self):
        return self.display_name or self.username


class Department(models.Model):
    """A node of the department tree (部门). Sub-departments allowed; the tree is acyclic,
    which ``portal.services.department_update`` checks before every re-parenting."""

    code = models.CharField(_("code"), max_length=40, unique=True, validators=[code_validator])
    name = models.CharField(_("name"), max_length=120)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="children",
        verbose_name=_("parent department"),
    )
    cost_centre = models.CharField(_("cost centre"), max_length=40, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]
        verbose_name = _("department")
        verbose_name_plural = _("departments")
        constraints = [
            models.CheckConstraint(condition=~Q(parent=models.F("id")), name="department_not_own_parent"),
        ]

    def __str__(self):
        return f"{self.name} ({self.code})"


class Project(models.Model):
    code = models.CharField(_("code"), max_length=40, unique=True, validators=[code_validator])
    name = models.CharField(_("name"), max_length=120)
    department = models.ForeignKey(
        Department, on_delete=models.PROTECT, related_name="projects", verbose_name=_("department")
    )
    description = models.TextField(_("description"), blank=True, max_length=2000)
    active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]
        verbose_name = _("project")
        verbose_name_plural = _("projects")

    def __str__(self):
        return f"{self.name} ({self.code})"


class Role(models.TextChoices):
    MEMBER = "member", _("Member")
    PROJECT_ADMIN = "project_admin", _("Project admin")
    DEPARTMENT_ADMIN = "department_admin", _("Department admin")
    FINANCE = "finance", _("Finance")
    PLATFORM_ADMIN = "platform_admin", _("Platform admin")
    AUDITOR = "auditor", _("Auditor")


PROJECT_ROLES = (Role.MEMBER, Role.PROJECT_ADMIN)
DEPARTMENT_ROLES = (Role.DEPARTMENT_ADMIN, Role.FINANCE)
GLOBAL_ROLES = (Role.PLATFORM_ADMIN, Role.AUDITOR)


class Membership(models.Model):
    """One role of one user on one scope. The scope's kind follows from the role, and the
    constraint below makes a mismatched row impossible rather than merely invalid."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(_("role"), max_length=20, choices=Role.choices)
    department = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="memberships"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.CheckConstraint(
                name="membership_scope_matches_role",
                condition=(
                    Q(role__in=PROJECT_ROLES, project__isnull=False, department__isnull=True)
                    | Q(role__in=DEPARTMENT_ROLES, department__isnull=False, project__isnull=True)
                    | Q(role__in=GLOBAL_ROLES, department__isnull=True, project__isnull=True)
                ),
            ),
            models.UniqueConstraint(
                fields=["user", "role", "department", "project"],
                nulls_distinct=False,
                name="membership_unique",
            ),
        ]

    def __str__(self):
        scope = self.project or self.department or _("platform")
        return f"{self.user} · {self.get_role_display()} · {scope}"
