"""The idle policy's settings and its approved exemptions (DESIGN §16; docs/scheduling.md, "Idle
policy"). The decision is ``jobs.idle_policy`` (pure), run by ``jobs.idle_service``."""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.models import ApprovalRequest


class IdleAction(models.TextChoices):
    """``jobs.idle_policy.Action``'s values, as a field's choices."""

    OFF = "off", _("not watched")
    WARN = "warn", _("warn only")
    STOP = "stop", _("warn, then stop")
    PREEMPTIBLE = "preemptible", _("warn, then make preemptible")


IDLE_MINUTES_MAX = 7 * 24 * 60  # a week


class IdlePolicy(models.Model):
    """The centre's idle policy (``priority_class`` and ``project`` empty: one row, made by the
    migration with the defaults), and optional overrides for the jobs of one priority class or of
    one project (a project's replaces both the class's and the centre's for its jobs). Edited by
    platform admins in the admin; a project's also through its API (``jobs.idle_overrides``)."""

    priority_class = models.OneToOneField(
        "jobs.PriorityClass", null=True, blank=True, on_delete=models.CASCADE, related_name="idle_policy",
        verbose_name=_("priority class"),
        help_text=_("Empty (and no project): the centre's policy, for every other job."),
    )
    project = models.OneToOneField(
        "portal.Project", null=True, blank=True, on_delete=models.CASCADE, related_name="idle_policy",
        verbose_name=_("project"),
        help_text=_("The project's jobs follow this row whatever their priority class."),
    )
    threshold_pct = models.PositiveSmallIntegerField(
        _("utilisation threshold (%)"), default=5, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text=_("A minute is idle when the busiest card of the job is below this utilisation."),
    )
    idle_minutes = models.PositiveIntegerField(
        _("idle minutes before the warning"), default=120,
        validators=[MinValueValidator(5), MaxValueValidator(IDLE_MINUTES_MAX)],
    )
    grace_minutes = models.PositiveIntegerField(
        _("grace minutes before the action"), default=60,
        validators=[MinValueValidator(0), MaxValueValidator(IDLE_MINUTES_MAX)],
    )
    dev_action = models.CharField(
        _("development jobs"), max_length=12, choices=IdleAction.choices, default=IdleAction.STOP
    )
    training_action = models.CharField(
        _("training jobs"), max_length=12, choices=IdleAction.choices, default=IdleAction.PREEMPTIBLE
    )
    inference_action = models.CharField(
        _("inference jobs"), max_length=12, choices=IdleAction.choices, default=IdleAction.WARN
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("idle policy")
        verbose_name_plural = _("idle policies")
        constraints = [
            # One centre row (no class, no project), at most one row per class and per project.
            models.UniqueConstraint(
                fields=["priority_class", "project"], nulls_distinct=False, name="idle_policy_one_per_scope"
            ),
            models.CheckConstraint(
                condition=models.Q(priority_class__isnull=True) | models.Q(project__isnull=True),
                name="idle_policy_class_or_project",
            ),
            models.CheckConstraint(condition=models.Q(threshold_pct__gte=1, threshold_pct__lte=100),
                                   name="idle_policy_threshold_pct"),
            models.CheckConstraint(condition=models.Q(idle_minutes__gte=5), name="idle_policy_idle_minutes"),
        ]

    def __str__(self):
        scope = self.priority_class.name if self.priority_class_id else (
            f"project {self.project.code}" if self.project_id else "centre")
        return f"{scope}: <{self.threshold_pct}%"

    def clean(self):
        if self.priority_class_id and self.project_id:
            raise ValidationError(_("An override is for one priority class or one project, not both."))


class IdleExemption(models.Model):
    """An approved exemption of one job from the idle policy (an ``idle_exemption`` approval
    request, ``jobs.idle_exemptions``), until ``ends_at`` (empty: for the job's life)."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="idle_exemptions")
    ends_at = models.DateTimeField(_("until"), null=True, blank=True)
    request = models.ForeignKey(ApprovalRequest, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    created_at = models.DateTimeField(_("granted at"))

    class Meta:
        ordering = ["job_id", "created_at"]
        verbose_name = _("idle-policy exemption")
        verbose_name_plural = _("idle-policy exemptions")

    def __str__(self):
        return f"job {self.job_id} until {self.ends_at or '—'}"
