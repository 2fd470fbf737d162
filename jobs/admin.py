from django.contrib import admin
from django.utils.translation import gettext_lazy as _

from jobs.models import (
    ApprovalPolicy,
    IdleExemption,
    IdlePolicy,
    Job,
    JobEvent,
    JobTemplate,
    PriorityClass,
    ProjectSecret,
    ProjectStorage,
    RetryPolicy,
    RuleChangeEvent,
    SchedulerSettings,
)
from portal.admin_site import PlatformModelAdmin


@admin.register(PriorityClass)
class PriorityClassAdmin(PlatformModelAdmin):
    list_display = [
        "name",
        "value",
        "preemptible",
        "grace_seconds",
        "min_runtime_seconds",
        "allowed_kinds",
        "min_role",
        "approval_below_role",
    ]


class ReadOnlyAdmin(PlatformModelAdmin):
    """Jobs change state only through services (conditional updates + events)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ["id", "name", "project", "kind", "flavor", "state", "submitted_at"]
    list_filter = ["state", "kind", "flavor"]


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ["job", "kind", "from_state", "to_state", "reason_in_language"]
    list_display += ["occurred_at", "time_source", "recorded_at"]

    @admin.display(description=_("reason"))
    def reason_in_language(self, obj):
        return obj.reason_text


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(PlatformModelAdmin):
    list_display = ["department", "max_gpus", "max_runtime_hours", "premium_flavors", "platform_gpus"]
    filter_horizontal = ["flavors"]
    readonly_fields = ["updated_by"]


@admin.register(ProjectStorage)
class ProjectStorageAdmin(PlatformModelAdmin):
    """The storages a project's jobs may mount (DESIGN §13, docs/environment.md). A change reaches
    jobs submitted afterwards: a submitted job keeps the snapshot it was submitted with."""

    list_display = [
        "project",
        "name",
        "kind",
        "mount_path",
        "host_path",
        "read_only",
        "checkpoints",
        "active",
    ]
    list_filter = ["kind", "read_only", "checkpoints", "active"]
    search_fields = ["project__code", "name", "mount_path", "host_path"]
    autocomplete_fields = ["project"]


@admin.register(ProjectSecret)
class ProjectSecretAdmin(PlatformModelAdmin):
    """The Kubernetes Secrets a project's jobs may read environment variables from (DESIGN §13,
    docs/environment.md): names only, never values. Create the Secret itself in the jobs'
    namespace (gpupool-jobs), never in the portal's. Removing one (or switching it off) refuses it
    to new submissions and to queued jobs when they are dispatched."""

    list_display = ["project", "name", "note", "active"]
    list_filter = ["active"]
    search_fields = ["project__code", "name", "note"]
    autocomplete_fields = ["project"]


@admin.register(JobTemplate)
class JobTemplateAdmin(PlatformModelAdmin):
    list_display = ["name", "project", "owner", "shared", "updated_at"]
    list_filter = ["shared"]
    search_fields = ["name", "project__code", "owner__username"]


@admin.register(SchedulerSettings)
class SchedulerSettingsAdmin(ReadOnlyAdmin):
    """Changed only by an approved rule-change request (docs/scheduling.md, "Engine settings")."""

    list_display = ["backfill", "packing", "updated_at"]


@admin.register(RetryPolicy)
class RetryPolicyAdmin(PlatformModelAdmin):
    """The centre's retry policy (DESIGN §17; docs/operator-guide.md "Retries and start timeout"): one
    row, changed and never deleted; the model's validators make a bad value a form error."""

    list_display = ["max_retries_limit", "final_exit_codes", "start_timeout_seconds", "max_start_timeouts",
                    "updated_at"]

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not RetryPolicy.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(RuleChangeEvent)
class RuleChangeEventAdmin(ReadOnlyAdmin):
    list_display = ["at", "type", "target", "old", "new", "actor", "request"]
    list_filter = ["type"]


@admin.register(IdlePolicy)
class IdlePolicyAdmin(PlatformModelAdmin):
    """The idle policy (docs/scheduling.md, "Idle policy"): the centre's row (no priority class, no
    project), and overrides for one class or one project. The model's validators and ``clean`` make
    a bad value a form error."""

    list_display = ["priority_class", "project", "threshold_pct", "idle_minutes", "grace_minutes",
                    "dev_action", "training_action", "inference_action", "updated_at"]
    list_select_related = ["priority_class", "project"]

    def has_delete_permission(self, request, obj=None):
        # The centre's row is the default every job falls back on: change it, never delete it.
        if obj is not None and obj.priority_class_id is None and obj.project_id is None:
            return False
        return super().has_delete_permission(request, obj)


@admin.register(IdleExemption)
class IdleExemptionAdmin(ReadOnlyAdmin):
    """Granted only by an approved ``idle_exemption`` request."""

    list_display = ["job", "ends_at", "request", "created_at"]
