"""Reservations, maintenance windows and queue states (DESIGN §17; docs/reservations.md).

A ``Reservation`` holds GPUs — a count of a flavor, or named nodes — for a project over
``[starts_at, ends_at)``; ``project`` empty: a maintenance window (a reservation for nobody, on
named nodes). A project's reservation is asked for and approved like a loan (the
``reservation`` approval kind, ``jobs.reservations``); a maintenance is a platform admin's own
act. The engine gets the active ones through the snapshot (``jobs.scheduling.snapshot``) and
the Slurm sync writes them to slurmctld (``jobs.native.slurm_reservations``).

A ``QueueSetting`` is the queue state of one project or one department: open, hold (nothing new
is admitted) or drain (hold, and the running jobs are stopped and requeued). Every change is a
``QueueStateEvent`` row (append-only)."""

from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.models import ApprovalRequest, Department, Project, User
from quotas.models import Flavor, Node


class ReservationState(models.TextChoices):
    ACTIVE = "active", _("Approved")
    CANCELLED = "cancelled", _("Cancelled")


class Reservation(models.Model):
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.PROTECT,
                                related_name="reservations", verbose_name=_("project"),
                                help_text=_("Empty: a maintenance window."))
    flavor = models.ForeignKey(Flavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                               verbose_name=_("flavor"))
    gpus = models.PositiveIntegerField(_("GPUs"), null=True, blank=True)
    nodes = models.ManyToManyField(Node, blank=True, related_name="reservations", verbose_name=_("nodes"))
    starts_at = models.DateTimeField(_("starts at"))
    ends_at = models.DateTimeField(_("ends at"))
    state = models.CharField(_("state"), max_length=10, choices=ReservationState.choices,
                             default=ReservationState.ACTIVE)
    reason = models.CharField(_("reason"), max_length=500, blank=True)
    requested_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    request = models.OneToOneField(ApprovalRequest, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["starts_at", "id"]
        verbose_name = _("reservation")
        verbose_name_plural = _("reservations")
        constraints = [
            models.CheckConstraint(condition=Q(ends_at__gt=models.F("starts_at")),
                                   name="reservation_ends_after_start"),
            # A count names its flavor; a maintenance is never a count (it is on named nodes).
            models.CheckConstraint(condition=Q(gpus__isnull=True) | (Q(gpus__gt=0) & Q(flavor__isnull=False)
                                                                     & Q(project__isnull=False)),
                                   name="reservation_count_has_flavor"),
        ]
        indexes = [models.Index(fields=["state", "ends_at"], name="reservation_live")]

    def __str__(self):
        return self.slurm_name

    @property
    def maintenance(self) -> bool:
        return self.project_id is None

    @property
    def slurm_name(self) -> str:
        """Its name in slurmctld (``scontrol show reservation``)."""
        return f"gp_maint_{self.pk}" if self.maintenance else f"gp_resv_{self.pk}"


class QueueState(models.TextChoices):
    OPEN = "open", _("Open")
    HOLD = "hold", _("On hold")
    DRAIN = "drain", _("Draining")


class QueueSetting(models.Model):
    """The queue state of one project or one department (no row: open)."""

    project = models.OneToOneField(Project, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="queue_setting")
    department = models.OneToOneField(Department, null=True, blank=True, on_delete=models.CASCADE,
                                      related_name="queue_setting")
    state = models.CharField(_("queue state"), max_length=8, choices=QueueState.choices,
                             default=QueueState.OPEN)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name = _("queue state")
        verbose_name_plural = _("queue states")
        constraints = [
            models.CheckConstraint(condition=Q(project__isnull=True, department__isnull=False)
                                   | Q(project__isnull=False, department__isnull=True),
                                   name="queue_setting_one_owner"),
        ]

    def __str__(self):
        return f"{self.project or self.department}: {self.state}"


class QueueStateEvent(models.Model):
    """Append-only: who set a queue's state, from what, why, and the jobs a drain requeued."""

    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="+")
    from_state = models.CharField(_("from"), max_length=8, choices=QueueState.choices)
    to_state = models.CharField(_("to"), max_length=8, choices=QueueState.choices)
    reason = models.CharField(_("reason"), max_length=300)
    actor = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+", verbose_name=_("by"))
    at = models.DateTimeField(_("at"), default=timezone.now)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("queue state change")
        verbose_name_plural = _("queue state changes")

    def __str__(self):
        return f"{self.project or self.department}: {self.from_state} → {self.to_state}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("Queue state changes are append-only.")
        super().save(*args, **kwargs)
