"""The engine settings an operator can change (scheduler backfill and packing) and the record
of every rule change made through a rule-change request (issue 25; docs/scheduling.md, "Engine
settings", and docs/approvals.md, "Rule changes")."""

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils.translation import gettext_lazy as _

from portal.models import ApprovalRequest, User


class Packing(models.TextChoices):
    FRAGMENTATION_AWARE = "fragmentation_aware", _("fragmentation-aware")
    BEST_FIT = "best_fit", _("best fit")


# Fair share (DESIGN §16): the half-life of decayed usage (Slurm's PriorityDecayHalfLife, 7 days by
# default), between an hour and a year — shorter forgets a day's work within the day, longer never
# forgets; and how long a tenant's new usage counts before it is compared (entry time).
FAIR_HALF_LIFE_DEFAULT_SECONDS = 7 * 86400
FAIR_HALF_LIFE_MIN_SECONDS = 3600
FAIR_HALF_LIFE_MAX_SECONDS = 365 * 86400
FAIR_ENTRY_DEFAULT_SECONDS = 3600
FAIR_ENTRY_MAX_SECONDS = 7 * 86400


class SchedulerSettings(models.Model):
    """One row (pk 1): what the production engine is run with. Created by the migration with the
    engine's defaults; changed only through a rule-change request (``jobs.rule_changes``)."""

    backfill = models.BooleanField(_("EASY backfill"), default=True)
    packing = models.CharField(_("packing"), max_length=24, choices=Packing.choices,
                               default=Packing.FRAGMENTATION_AWARE)
    fair_share_half_life_seconds = models.PositiveIntegerField(
        _("fair-share half-life (s)"), default=FAIR_HALF_LIFE_DEFAULT_SECONDS,
        db_default=FAIR_HALF_LIFE_DEFAULT_SECONDS,
        validators=[MinValueValidator(FAIR_HALF_LIFE_MIN_SECONDS),
                    MaxValueValidator(FAIR_HALF_LIFE_MAX_SECONDS)])
    fair_share_entry_seconds = models.PositiveIntegerField(
        _("fair-share entry time (s)"), default=FAIR_ENTRY_DEFAULT_SECONDS,
        db_default=FAIR_ENTRY_DEFAULT_SECONDS,
        validators=[MaxValueValidator(FAIR_ENTRY_MAX_SECONDS)])
    # Consolidation (issue 36, docs/scheduling.md): at most this many jobs moved out of a
    # fragmented gang's way in any hour; 0: consolidation is off.
    consolidation_moves_per_hour = models.PositiveIntegerField(
        _("consolidation moves per hour"), default=0, db_default=0,
        help_text=_("Checkpointing jobs moved to make room for a gang, at most this many per hour; 0: off."))
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("scheduler settings")
        verbose_name_plural = _("scheduler settings")
        constraints = [
            models.CheckConstraint(condition=models.Q(pk=1), name="scheduler_settings_one_row"),
            models.CheckConstraint(
                condition=models.Q(fair_share_half_life_seconds__gte=FAIR_HALF_LIFE_MIN_SECONDS,
                                   fair_share_half_life_seconds__lte=FAIR_HALF_LIFE_MAX_SECONDS),
                name="scheduler_settings_half_life_range"),
            models.CheckConstraint(condition=models.Q(fair_share_entry_seconds__lte=FAIR_ENTRY_MAX_SECONDS),
                                   name="scheduler_settings_entry_range"),
        ]

    def __str__(self):
        return f"backfill={self.backfill} packing={self.packing}"


class RuleChangeEvent(models.Model):
    """One rule changed (old → new), by whom, when, and the approval request that caused it
    (null for a change made outside one). Append-only by convention: nothing updates it."""

    at = models.DateTimeField(_("at"))
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    request = models.ForeignKey(ApprovalRequest, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="rule_change_events")
    type = models.CharField(_("type"), max_length=32)  # a change type of jobs.rule_changes.TYPES
    target = models.CharField(_("target"), max_length=200, blank=True)  # "p04 / A100", "normal", ""
    old = models.JSONField(_("old"), null=True)
    new = models.JSONField(_("new"), null=True)

    class Meta:
        ordering = ["at", "id"]
        verbose_name = _("rule change")
        verbose_name_plural = _("rule changes")

    def __str__(self):
        return f"{self.type} {self.target}: {self.old} → {self.new}"
