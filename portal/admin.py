from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from .admin_site import PlatformModelAdmin
from .models import (
    ApiToken,
    ApprovalAudit,
    ApprovalRequest,
    ApprovalStep,
    Department,
    Membership,
    Notification,
    Project,
    ProjectMove,
    User,
)


@admin.register(User)
class UserAdmin(PlatformModelAdmin):
    list_display = [
        "username", "display_name", "email", "directory", "unix_username", "is_active", "last_login"
    ]
    list_filter = ["directory", "is_active"]
    search_fields = ["username", "display_name", "email", "unix_username"]
    exclude = ["password", "user_permissions", "groups"]
    # What the directory owns is changed in the directory (and the next sync), not here.
    readonly_fields = ["directory", "directory_subject", "directory_groups", "directory_synced_at",
                       "deactivated_at", "deactivated_reason"]


@admin.register(Department)
class DepartmentAdmin(PlatformModelAdmin):
    list_display = ["code", "name", "parent", "cost_centre"]
    search_fields = ["code", "name"]


@admin.register(Project)
class ProjectAdmin(PlatformModelAdmin):
    list_display = ["code", "name", "department", "active", "queueing", "aging_bound_seconds", "user_gpu_cap",
                    "user_running_jobs_cap"]
    list_filter = ["active", "department", "queueing"]
    search_fields = ["code", "name"]

    def get_readonly_fields(self, request, obj=None):
        # A change of department is a move (portal.services.project_move): effective-dated for
        # billing, with the quota nodes carried along. Typed here it would do neither.
        return ["department", "move"] if obj is not None else []

    @admin.display(description=_("move"))
    def move(self, obj):
        return format_html(
            '<a href="{}">{}</a>', reverse("project-move", args=[obj.pk]),
            _("Move the project to another department (effective-dated, quotas carried along)"),
        )


@admin.register(ApiToken)
class ApiTokenAdmin(PlatformModelAdmin):
    """Users' personal API tokens (docs/identity.md "API tokens"): seen and revoked here, made only
    by their owners (the secret is shown to them once); the digest is never shown."""

    list_display = ["name", "user", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["user__username", "name", "prefix"]
    fields = ["user", "name", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at",
              "revoked_reason"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False  # revoked, not deleted: the row says when and by whom

    @admin.action(description=_("Revoke the selected tokens"))
    def revoke(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(
            revoked_at=timezone.now(), revoked_reason=f"revoked by {request.user.username} in the admin"[:120]
        )
        self.message_user(request, ngettext("%(n)d token revoked.", "%(n)d tokens revoked.", revoked)
                          % {"n": revoked})


@admin.register(ProjectMove)
class ProjectMoveAdmin(PlatformModelAdmin):
    """The effective-dated department history: written only by the move service."""

    list_display = ["project", "from_department", "to_department", "at", "actor", "reason"]
    list_filter = ["to_department"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Membership)
class MembershipAdmin(PlatformModelAdmin):
    """Roles given by hand are edited here; a role a directory rule gave is shown, not edited: the
    next sign-in would give it back (rules: the "Directory rules" page)."""

    list_display = ["user", "role", "department", "project", "source"]
    list_filter = ["role"]
    readonly_fields = ["rule"]

    @admin.display(description=_("given"))
    def source(self, obj):
        if obj.rule_id is None:
            return _("by hand")
        return _("from directory group %(group)s") % {"group": obj.rule.group}

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and (obj is None or obj.rule_id is None)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and (obj is None or obj.rule_id is None)

    def delete_queryset(self, request, queryset):
        # "Delete selected" skips the roles rules gave, as the single delete refuses them.
        super().delete_queryset(request, queryset.filter(rule__isnull=True))


class ReadOnlyAdmin(PlatformModelAdmin):
    """Approvals change only through the services (conditional updates + audit rows); the
    audit trail is append-only, so nothing here can add, change or delete."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ApprovalStepInline(admin.TabularInline):
    model = ApprovalStep
    extra = 0
    can_delete = False
    fields = [
        "order", "approver_role", "department", "state", "deadline", "decided_by", "decided_at", "comment"
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(ApprovalRequest)
class ApprovalRequestAdmin(ReadOnlyAdmin):
    list_display = ["id", "kind", "summary_in_language", "requester", "state", "created_at", "decided_at"]
    list_filter = ["kind", "state"]
    search_fields = ["summary"]
    inlines = [ApprovalStepInline]

    @admin.display(description=_("summary"))
    def summary_in_language(self, obj):
        return obj.summary_text


@admin.register(ApprovalAudit)
class ApprovalAuditAdmin(ReadOnlyAdmin):
    list_display = ["request", "action", "actor", "at", "comment"]
    list_filter = ["action"]


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["recipient", "text_in_language", "created_at", "read_at", "mail_state"]
    list_filter = ["mail_state"]

    @admin.display(description=_("text"))
    def text_in_language(self, obj):
        return obj.display_text
