"""Tenancy: the department tree, projects, users and their role memberships (DESIGN §1)."""

from django.contrib.auth.models import AbstractUser
from django.contrib.postgres.fields import ArrayField
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .texts import render

code_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$",
    _("Use 1–40 letters, digits, '.', '_' or '-', starting with a letter or digit."),
)


class Directory(models.TextChoices):
    """Where a user's identity comes from (DESIGN §12). Local accounts are kept for break-glass admins."""

    LOCAL = "local", _("Local account")
    LDAP = "ldap", "LDAP"
    OIDC = "oidc", "OpenID Connect"


class User(AbstractUser):
    display_name = models.CharField(_("display name"), max_length=120, blank=True)
    # The Unix user name (LDAP uid, or an OIDC claim): what Slurm associations and job ownership
    # use. Empty: the portal username.
    unix_username = models.CharField(_("Unix user name"), max_length=32, blank=True)
    directory = models.CharField(
        _("directory"), max_length=10, choices=Directory.choices, default=Directory.LOCAL
    )
    # The directory's stable name for the user (LDAP DN, OIDC "sub"): a renamed user stays one user.
    directory_subject = models.CharField(_("directory subject"), max_length=500, blank=True)
    # When the directory last changed the user (created, adopted, a field or the groups, re-enabled):
    # a sync that finds nothing new writes nothing, so this is not the last sync's time.
    directory_synced_at = models.DateTimeField(_("last changed by the directory"), null=True, blank=True)
    # The groups the directory last listed for the user (normalised as the rules compare them), so
    # a rule added, changed or deleted takes effect at once, not at the next sign-in. None: not
    # known yet (never seen since groups were kept) — such users get rule changes at the next sync.
    directory_groups = ArrayField(
        models.CharField(max_length=500), null=True, blank=True, verbose_name=_("directory groups")
    )
    deactivated_at = models.DateTimeField(_("deactivated"), null=True, blank=True)
    deactivated_reason = models.CharField(_("why deactivated"), max_length=300, blank=True)

    class Meta(AbstractUser.Meta):
        swappable = "AUTH_USER_MODEL"
        constraints = [
            models.UniqueConstraint(
                fields=["directory", "directory_subject"],
                condition=~Q(directory_subject=""),
                name="user_directory_subject_unique",
            ),
        ]

    @property
    def unix_name(self) -> str:
        return self.unix_username or self.username

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


class Queueing(models.TextChoices):
    """How a project's waiting jobs queue among themselves (docs/scheduling.md, "Queueing
    strategies"; the engine's side is jobs/scheduler/engine/fifo.py)."""

    BEST_EFFORT = "best_effort", _("best effort")
    STRICT_FIFO = "strict_fifo", _("strict FIFO")


USER_CAP_MAX = 1_000_000  # beyond any centre: a typo, not a cap
AGING_BOUND_MIN_SECONDS = 60
AGING_BOUND_MAX_SECONDS = 90 * 86400


class Project(models.Model):
    code = models.CharField(_("code"), max_length=40, unique=True, validators=[code_validator])
    name = models.CharField(_("name"), max_length=120)
    department = models.ForeignKey(
        Department, on_delete=models.PROTECT, related_name="projects", verbose_name=_("department")
    )
    description = models.TextField(_("description"), blank=True, max_length=2000)
    active = models.BooleanField(_("active"), default=True)
    # DESIGN §13: the Kubernetes Secret the project's pods pull images with (imagePullSecrets).
    image_pull_secret = models.CharField(
        _("image pull secret"),
        max_length=253,
        blank=True,
        validators=[
            RegexValidator(
                r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                _("A Kubernetes Secret name: lower-case letters, digits, '-' and '.'."),
            )
        ],
        help_text=_("The Kubernetes Secret in the project's namespace that pulls its images."),
    )
    queueing = models.CharField(
        _("queueing strategy"),
        max_length=16,
        choices=Queueing.choices,
        default=Queueing.BEST_EFFORT,
        help_text=_(
            "Best effort: a later job of the project that fits starts before an earlier one that waits. "
            "Strict FIFO: a job that cannot start blocks the project's later jobs of its priority."
        ),
    )
    # Null: the centre's default (GPUPOOL["AGING_BOUND_SECONDS"], 0 = none).
    aging_bound_seconds = models.PositiveIntegerField(
        _("aging bound (seconds)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(AGING_BOUND_MIN_SECONDS), MaxValueValidator(AGING_BOUND_MAX_SECONDS)],
        help_text=_(
            "A job that has waited longer than this blocks the project's later jobs and gets a "
            "reservation, as under strict FIFO. Empty: the centre's default."
        ),
    )
    # Per-user caps (DESIGN §16): what one user's running jobs of the project may hold. Null: none.
    user_gpu_cap = models.PositiveIntegerField(
        _("GPUs per user"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(USER_CAP_MAX)],
        help_text=_("The most GPUs one user's running jobs of the project may hold. Empty: no cap."),
    )
    user_running_jobs_cap = models.PositiveIntegerField(
        _("running jobs per user"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(USER_CAP_MAX)],
        help_text=_("The most jobs one user may run in the project at once. Empty: no cap."),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["code"]
        verbose_name = _("project")
        verbose_name_plural = _("projects")

    def __str__(self):
        return f"{self.name} ({self.code})"


class ProjectMove(models.Model):
    """A project changed department at ``at`` (DESIGN §7: usage is charged to the department that
    owned the project at the time of use). The moves of a project are its effective-dated
    department history: before its first move it belonged to that move's ``from_department``,
    after its last to ``to_department`` (= ``Project.department``). Append-only; written only by
    ``portal.services.project_move``."""

    project = models.ForeignKey(Project, on_delete=models.PROTECT, related_name="moves")
    from_department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="+")
    to_department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField(_("moved at"))
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    reason = models.CharField(_("reason"), max_length=300, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project_id", "at", "id"]
        verbose_name = _("project move")
        verbose_name_plural = _("project moves")
        constraints = [
            models.UniqueConstraint(fields=["project", "at"], name="project_move_one_per_instant"),
            models.CheckConstraint(
                condition=~Q(from_department=models.F("to_department")),
                name="project_move_changes_department",
            ),
        ]

    def __str__(self):
        moved = f"{self.from_department_id} → {self.to_department_id}"
        return f"{self.project_id}: {moved} at {self.at:%Y-%m-%d %H:%M}"


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
# A role's scope follows from the role (memberships and directory rules alike).
SCOPE_MATCHES_ROLE = (
    Q(role__in=PROJECT_ROLES, project__isnull=False, department__isnull=True)
    | Q(role__in=DEPARTMENT_ROLES, department__isnull=False, project__isnull=True)
    | Q(role__in=GLOBAL_ROLES, department__isnull=True, project__isnull=True)
)


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
    # Given by hand (stays until someone removes it) or by a directory rule (re-applied at every
    # login and sync, removed when the user leaves the group). DESIGN §12.
    rule = models.ForeignKey(
        "DirectoryRule",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memberships",
        verbose_name=_("from rule"),
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.CheckConstraint(
                name="membership_scope_matches_role",
                condition=SCOPE_MATCHES_ROLE,
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


class DirectoryRule(models.Model):
    """A directory group → a role on a scope (DESIGN §12). ``group`` is an LDAP group DN or an
    OIDC claim value (the claim's name is a setting). Deleting a rule removes the roles it gave."""

    directory = models.CharField(
        _("directory"),
        max_length=10,
        choices=[(Directory.LDAP.value, Directory.LDAP.label), (Directory.OIDC.value, Directory.OIDC.label)],
    )
    group = models.CharField(_("group"), max_length=500)
    role = models.CharField(_("role"), max_length=20, choices=Role.choices)
    department = models.ForeignKey(
        Department,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        verbose_name=_("department"),
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="+", verbose_name=_("project")
    )
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["directory", "group", "id"]
        verbose_name = _("directory rule")
        verbose_name_plural = _("directory rules")
        constraints = [
            models.CheckConstraint(
                name="directory_rule_scope_matches_role",
                condition=SCOPE_MATCHES_ROLE,
            ),
            models.UniqueConstraint(
                fields=["directory", "group", "role", "department", "project"],
                nulls_distinct=False,
                name="directory_rule_unique",
            ),
        ]

    def __str__(self):
        scope = self.project or self.department or _("platform")
        return f"{self.group} → {self.get_role_display()} · {scope}"


# --- approvals (DESIGN §6) -----------------------------------------------------------------
# The engine is generic: apps above ``portal`` register their kinds (``portal.approvals``);
# here a request only records which kind and which subject id it is about.


class ApprovalKind(models.TextChoices):
    JOB = "job", _("Job")
    QUOTA = "quota", _("Quota request")
    LOAN = "loan", _("Loan request")
    POLICY = "policy", _("Rule change")
    IDLE_EXEMPTION = "idle_exemption", _("Idle-policy exemption")
    RESERVATION = "reservation", _("Reservation request")


class ApprovalState(models.TextChoices):
    PENDING = "pending", _("Pending")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    EXPIRED = "expired", _("Expired")
    CANCELLED = "cancelled", _("Cancelled")


class StepState(models.TextChoices):
    WAITING = "waiting", _("Waiting for earlier steps")
    PENDING = "pending", _("Pending")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    ESCALATED = "escalated", _("Escalated")
    EXPIRED = "expired", _("Expired")
    SKIPPED = "skipped", _("Skipped")


class OnDeadline(models.TextChoices):
    ESCALATE = "escalate", _("Escalate to the next level")
    EXPIRE = "expire", _("Expire the request")


APPROVER_ROLES = (Role.DEPARTMENT_ADMIN, Role.PLATFORM_ADMIN)


class ApprovalRequest(models.Model):
    """One request for approval: a job over policy, a quota change, a loan. ``department`` and
    ``project`` are what it concerns (they decide who sees it); ``counterparty`` is a second
    department involved, e.g. the lender asked for a loan."""

    kind = models.CharField(_("kind"), max_length=20, choices=ApprovalKind.choices)
    subject_id = models.BigIntegerField(_("subject"), null=True, blank=True)
    payload = models.JSONField(_("details"), default=dict, blank=True)
    # The text in the site language at creation; ``summary_message`` holds it as data (see
    # portal/texts.py) so every reader gets it in their language. Older rows have only the text.
    summary = models.CharField(_("summary"), max_length=300)
    summary_message = models.JSONField(_("summary (message)"), null=True, blank=True, editable=False)
    reason = models.TextField(_("reason"), max_length=2000, blank=True)
    requester = models.ForeignKey(
        User, on_delete=models.PROTECT, related_name="approval_requests", verbose_name=_("requester")
    )
    department = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.SET_NULL, related_name="approval_requests"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="approval_requests"
    )
    counterparty = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(
        _("state"), max_length=12, choices=ApprovalState.choices, default=ApprovalState.PENDING
    )
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    decided_at = models.DateTimeField(_("decided"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("approval request")
        verbose_name_plural = _("approval requests")
        indexes = [
            models.Index(fields=["state", "kind"]),
            models.Index(fields=["kind", "subject_id"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "subject_id"],
                condition=Q(state="pending", subject_id__isnull=False),
                name="approval_one_pending_per_subject",
            ),
        ]

    def __str__(self):
        return f"#{self.pk} {self.summary_text}"

    @property
    def summary_text(self) -> str:
        """The summary in the active language (the stored text for rows without a message)."""
        return render(self.summary_message, fallback=self.summary)


class ApprovalStep(models.Model):
    """One level of a request's chain. Exactly one step of a pending request is ``pending``
    (open); later ones wait. An escalated step is followed by a new step at the same ``order``
    addressed one level up."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="steps")
    order = models.PositiveSmallIntegerField(_("order"))
    approver_role = models.CharField(
        _("approver role"), max_length=20, choices=[(r.value, r.label) for r in APPROVER_ROLES]
    )
    department = models.ForeignKey(
        Department,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        verbose_name=_("department"),
    )
    state = models.CharField(_("state"), max_length=12, choices=StepState.choices, default=StepState.WAITING)
    timeout_seconds = models.PositiveIntegerField(_("time to decide (s)"))
    on_deadline = models.CharField(_("on deadline"), max_length=10, choices=OnDeadline.choices)
    opened_at = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(_("deadline"), null=True, blank=True)
    decided_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(_("comment"), max_length=2000, blank=True)
    escalated_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["request_id", "order", "id"]
        verbose_name = _("approval step")
        verbose_name_plural = _("approval steps")
        indexes = [models.Index(fields=["state", "deadline"])]
        constraints = [
            models.UniqueConstraint(
                fields=["request"], condition=Q(state="pending"), name="approval_one_open_step"
            ),
            models.CheckConstraint(
                name="approval_step_scope_matches_role",
                condition=Q(approver_role=Role.PLATFORM_ADMIN, department__isnull=True)
                | Q(approver_role=Role.DEPARTMENT_ADMIN),
            ),
        ]

    def __str__(self):
        return f"#{self.request_id}.{self.order} {self.approver_role} {self.department_id or ''}"


class AuditAction(models.TextChoices):
    CREATED = "created", _("Created")
    OPENED = "opened", _("Step opened")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")
    ESCALATED = "escalated", _("Escalated")
    EXPIRED = "expired", _("Expired")
    CANCELLED = "cancelled", _("Cancelled")
    APPLIED = "applied", _("Applied")
    COMMENT = "comment", _("Comment")


class ImmutableQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError("The approval audit trail is append-only.")

    def delete(self):
        raise TypeError("The approval audit trail is append-only.")


class ApprovalAudit(models.Model):
    """Append-only audit trail of a request. Rows are never changed or removed: ``save`` of an
    existing row, ``delete`` and queryset ``update``/``delete`` raise, and a database trigger
    (migration 0003) refuses UPDATE and DELETE from any client."""

    request = models.ForeignKey(ApprovalRequest, on_delete=models.PROTECT, related_name="audit")
    step = models.ForeignKey(ApprovalStep, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    action = models.CharField(_("action"), max_length=12, choices=AuditAction.choices)
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField(_("at"))
    comment = models.TextField(_("comment"), max_length=2000, blank=True)
    data = models.JSONField(default=dict, blank=True)

    objects = ImmutableQuerySet.as_manager()

    class Meta:
        ordering = ["at", "id"]
        verbose_name = _("approval audit entry")
        verbose_name_plural = _("approval audit trail")

    def __str__(self):
        return f"#{self.request_id} {self.action} {self.at:%Y-%m-%d %H:%M}"

    def save(self, *args, **kwargs):
        if not self._state.adding:
            raise TypeError("The approval audit trail is append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("The approval audit trail is append-only.")


class MailState(models.TextChoices):
    NONE = "none", _("No e-mail")
    PENDING = "pending", _("To send")
    SENT = "sent", _("Sent")
    FAILED = "failed", _("Failed")


class Notification(models.Model):
    """An in-app message, and the outbox of its e-mail: the row is written in the business
    transaction, the mail is sent after commit (and retried by beat until sent)."""

    recipient = models.ForeignKey(User, on_delete=models.CASCADE, related_name="notifications")
    request = models.ForeignKey(
        ApprovalRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="notifications"
    )
    # As an approval's summary: the text in the site language, and the message to render for
    # each reader (portal/texts.py); older rows have only the text.
    text = models.CharField(_("text"), max_length=500)
    message = models.JSONField(_("message"), null=True, blank=True, editable=False)
    link = models.CharField(_("link"), max_length=300, blank=True)
    # What it is about (NotificationTopic) and the project it concerns: the webhooks it goes to.
    topic = models.CharField(_("topic"), max_length=10, default="other")
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", verbose_name=_("project")
    )
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)
    mail_state = models.CharField(max_length=8, choices=MailState.choices, default=MailState.NONE)
    mail_attempts = models.PositiveSmallIntegerField(default=0)
    mail_claimed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("notification")
        verbose_name_plural = _("notifications")
        indexes = [
            models.Index(fields=["recipient", "read_at"]),
            models.Index(fields=["mail_state"]),
        ]

    def __str__(self):
        return f"{self.recipient}: {self.display_text[:60]}"

    @property
    def display_text(self) -> str:
        """The notification in the active language (the stored text for older rows)."""
        return render(self.message, fallback=self.text)

    @property
    def read(self) -> bool:
        return self.read_at is not None


# --- webhooks (issue 24 item 7, docs/notifications.md) -------------------------------------


class NotificationTopic(models.TextChoices):
    """What a notification is about; a webhook names the topics it wants (none: all)."""

    JOB = "job", _("Job approvals")
    QUOTA = "quota", _("Quota requests")
    LOAN = "loan", _("Loan requests")
    BUDGET = "budget", _("Budget alerts")
    OTHER = "other", _("Other")


class WebhookKind(models.TextChoices):
    WECOM = "wecom", _("WeCom group robot")
    DINGTALK = "dingtalk", _("DingTalk custom robot")
    FEISHU = "feishu", _("Feishu custom bot")
    JSON = "json", _("Generic JSON (signed)")


class Webhook(models.Model):
    """A chat robot or endpoint that gets notifications: a user's own (``user``), for the
    notifications addressed to them, or a project's (``project``, managed by its admins), for
    every notification about the project — one delivery per event, not one per recipient."""

    user = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks", verbose_name=_("user")
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="webhooks",
        verbose_name=_("project"),
    )
    name = models.CharField(_("name"), max_length=80)
    kind = models.CharField(_("kind"), max_length=10, choices=WebhookKind.choices)
    url = models.URLField(_("URL"), max_length=500)
    # DingTalk "加签", Feishu signature verification, the JSON HMAC. Write-only: never shown back.
    secret = models.CharField(_("secret"), max_length=200, blank=True)
    topics = ArrayField(
        models.CharField(max_length=10, choices=NotificationTopic.choices), default=list, blank=True,
        verbose_name=_("topics"),
    )
    # Users have no language of their own (the switch lives in the browser session): the hook has.
    language = models.CharField(_("language"), max_length=10, default="zh-hans")
    active = models.BooleanField(_("active"), default=True)
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(_("created"), default=timezone.now)

    class Meta:
        ordering = ["name", "id"]
        verbose_name = _("webhook")
        verbose_name_plural = _("webhooks")
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, project__isnull=True)
                | Q(user__isnull=True, project__isnull=False),
                name="webhook_one_owner",
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.kind})"

    def wants(self, topic: str) -> bool:
        return not self.topics or topic in self.topics

    @property
    def topic_labels(self) -> list[str]:
        return [NotificationTopic(t).label for t in self.topics if t in NotificationTopic.values]


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", _("Waiting")
    SENDING = "sending", _("Sending")
    DELIVERED = "delivered", _("Delivered")
    FAILED = "failed", _("Failed, will retry")
    GAVE_UP = "gave_up", _("Failed, gave up")


class WebhookDelivery(models.Model):
    """One attempt to deliver one event to one webhook: the log, and the outbox. An attempt is
    written ``pending`` (due at ``next_attempt_at``), claimed ``sending`` with a conditional
    update, and ends ``delivered``, ``failed`` (the next attempt is a new row) or ``gave_up``;
    an ended row never changes again. ``notification`` null: a test message."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    notification = models.ForeignKey(
        Notification, null=True, blank=True, on_delete=models.SET_NULL, related_name="webhook_deliveries"
    )
    attempt = models.PositiveSmallIntegerField(_("attempt"), default=1)
    status = models.CharField(
        _("status"), max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING
    )
    http_status = models.PositiveSmallIntegerField(_("HTTP status"), null=True, blank=True)
    error = models.CharField(_("error"), max_length=300, blank=True)
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    next_attempt_at = models.DateTimeField(_("due"), default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    at = models.DateTimeField(_("attempted"), null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("webhook delivery")
        verbose_name_plural = _("webhook deliveries")
        indexes = [
            models.Index(fields=["status", "next_attempt_at"]),
            models.Index(fields=["webhook", "-id"]),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["webhook", "notification", "attempt"], condition=Q(notification__isnull=False),
                name="webhook_delivery_one_per_attempt",
            ),
        ]

    def __str__(self):
        return f"{self.webhook_id} #{self.attempt} {self.status}"


class ApiToken(models.Model):
    """A personal API token (docs/identity.md "API tokens"): many per user, named, expiring. The
    secret is shown once, when it is made; only its SHA-256 is kept (``digest``), so a copy of the
    database gives no working token. ``prefix``, the secret's first characters, lets its owner
    tell tokens apart. Revoked tokens keep their row (when, by whom) and never work again."""

    user = models.ForeignKey(
        User, on_delete=models.CASCADE, related_name="api_tokens", verbose_name=_("user")
    )
    name = models.CharField(_("name"), max_length=80)
    prefix = models.CharField(_("prefix"), max_length=16)
    # SHA-256 of the whole token (hex): the secret has 256 random bits, so a fast hash is enough
    # (a slow one protects guessable passwords, not random keys). Looked up by this unique index.
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(_("created"), default=timezone.now)
    expires_at = models.DateTimeField(_("expires"))
    last_used_at = models.DateTimeField(_("last used"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked"), null=True, blank=True)
    revoked_reason = models.CharField(_("why revoked"), max_length=120, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")
        indexes = [models.Index(fields=["user", "-created_at"])]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    def usable(self, now) -> bool:
        return self.revoked_at is None and self.expires_at > now


class OidcSession(models.Model):
    """A portal session that began at the OpenID Connect provider, with the provider's session id
    (the ID token's ``sid``): a back-channel logout names that ``sid``, and these rows say which
    portal sessions to end (docs/identity.md "Back-channel logout")."""

    user = models.ForeignKey(User, on_delete=models.CASCADE, related_name="oidc_sessions")
    sid = models.CharField(max_length=255, blank=True, db_index=True)
    session_key = models.CharField(max_length=40, unique=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return f"{self.user_id} {self.sid or '-'}"


class OidcGrant(models.Model):
    """The provider's refresh token from a user's latest sign-in (``offline_access``), with which
    the portal asks the provider now and then whether the user is still there (``portal.oidc_check``).
    Kept as given: a refresh token of a confidential client works only with the client secret,
    which lives in the environment, not in the database. ``lease_until``: a check holding the row
    (refresh tokens may rotate: two checks at once would spend the same one twice)."""

    user = models.OneToOneField(User, on_delete=models.CASCADE, related_name="oidc_grant")
    refresh_token = models.TextField()
    stored_at = models.DateTimeField(default=timezone.now)
    checked_at = models.DateTimeField(null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.user_id} checked {self.checked_at}"
