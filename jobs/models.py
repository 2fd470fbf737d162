"""Jobs, their append-only event log, and priority classes (DESIGN §4)."""

from datetime import datetime, timedelta
from decimal import Decimal

from django import forms
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Func, Q
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from jobs.states import JobState
from portal.models import Department, Project, User
from quotas.models import Cluster, Flavor

name_validator = RegexValidator(
    r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
    _("Lower-case letters, digits and '-', 1–63 characters, starting and ending with a letter or digit."),
)

# An OCI image reference: [registry[:port]/]path[:tag][@digest] (the distribution project's
# grammar). Checked by the form, the API and job_submit, not on the field: a validator there would
# only add a migration, and the service is the one place every submission passes.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_MAX_LENGTH = 300
COMMAND_MAX_LENGTH = 10000
_image_grammar = RegexValidator(
    rf"\A(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?\Z",
    _("An image reference such as registry.example/team/image:tag (lower-case path, no spaces)."),
)


def image_validator(value: str) -> None:
    # An over-long value is the length check's error; the grammar is not run over a megabyte.
    if len(value) <= IMAGE_MAX_LENGTH:
        _image_grammar(value)


AUTOSCALE_QUERY_MAX_LENGTH = 500
AUTOSCALE_COOLDOWN_DEFAULT = 300
AUTOSCALE_COOLDOWN_MIN = 30
AUTOSCALE_COOLDOWN_MAX = 86400


class JobKind(models.TextChoices):
    TRAINING = "training", _("Training")
    INFERENCE = "inference", _("Inference")
    DEV = "dev", _("Development")
    # Submitted to the backend directly (sbatch, kubectl) and recorded by the portal (DESIGN §11):
    # governed, metered and billed, never submitted, stopped or resized through the portal.
    EXTERNAL = "external", _("External")


# What a user may submit through the portal (forms, API, priority-class rules): every kind but external.
SUBMITTABLE_KINDS = [(value, label) for value, label in JobKind.choices if value != JobKind.EXTERNAL]


class UsageRole(models.TextChoices):
    """Who may use a priority class, lowest first: each role includes the ones above it in this
    list (a department admin may do what a project admin may)."""

    MEMBER = "member", _("Member")
    PROJECT_ADMIN = "project_admin", _("Project admin")
    DEPARTMENT_ADMIN = "department_admin", _("Department admin")
    PLATFORM_ADMIN = "platform_admin", _("Platform admin")


USAGE_ROLE_RANK = {role.value: rank for rank, role in enumerate(UsageRole)}


class KindsField(ArrayField):
    """A set of job kinds, edited as checkboxes (the admin's default for an array is a
    comma-separated text box)."""

    def formfield(self, **kwargs):
        defaults = {
            "form_class": forms.TypedMultipleChoiceField,
            "choices": self.base_field.choices,
            "coerce": str,
            "widget": forms.CheckboxSelectMultiple,
            "required": not self.blank,
        }
        defaults.update(kwargs)
        # ArrayField.formfield would force its own SimpleArrayField; skip to Field.formfield.
        return models.Field.formfield(self, **defaults)


MAX_MIN_RUNTIME_SECONDS = 7 * 86400


class PriorityClass(models.Model):
    name = models.CharField(_("name"), max_length=40, unique=True, validators=[name_validator])
    value = models.IntegerField(_("value"), validators=[MinValueValidator(-1000), MaxValueValidator(100000)])
    preemptible = models.BooleanField(_("preemptible"), default=True)
    grace_seconds = models.PositiveIntegerField(
        _("grace period (s)"), default=30, validators=[MaxValueValidator(86400)]
    )
    # DESIGN §16, like Slurm's PreemptExemptTime: a job of the class is never preempted (reclaim,
    # borrowing within the cohort, priority) before it has run this long. At most a week: longer
    # would let a borrower keep a lender's quota for good.
    min_runtime_seconds = models.PositiveIntegerField(
        _("minimum runtime before preemption (s)"),
        default=0,
        validators=[MaxValueValidator(MAX_MIN_RUNTIME_SECONDS)],
        help_text=_("A job of this class is not preempted before it has run this long. 0: no minimum."),
    )
    description = models.CharField(_("description"), max_length=200, blank=True)
    # Who may use the class (issue 18 item 5). The defaults let everybody use it for every kind,
    # as before these fields existed: no migration guesses rules for an installation's classes.
    allowed_kinds = KindsField(
        models.CharField(max_length=12, choices=SUBMITTABLE_KINDS),
        verbose_name=_("allowed kinds"),
        blank=True,
        default=list,
        help_text=_("Kinds of job that may use this class. None ticked: every kind."),
    )
    min_role = models.CharField(
        _("minimum role"),
        max_length=20,
        choices=UsageRole.choices,
        default=UsageRole.MEMBER,
        help_text=_("The least role in the job's project that may use this class without approval."),
    )
    approval_below_role = models.BooleanField(
        _("below that role: ask for approval"),
        default=False,
        help_text=_(
            "Ticked: a user below the minimum role may still choose the class; the job then waits "
            "for approval. Not ticked: such a submission is refused."
        ),
    )

    class Meta:
        ordering = ["-value", "name"]
        verbose_name = _("priority class")
        verbose_name_plural = _("priority classes")

    def __str__(self):
        return f"{self.name} ({self.value})"

    @property
    def kinds_display(self) -> str:
        labels = dict(JobKind.choices)
        return ", ".join(str(labels.get(k, k)) for k in self.allowed_kinds)


# Labels of the job states, for the admin, the pages (jobs_ui) and the API schema.
STATE_LABELS = {
    JobState.PENDING_APPROVAL: _("Pending approval"),
    JobState.QUEUED: _("Queued"),
    JobState.ADMITTED: _("Admitted"),
    JobState.RUNNING: _("Running"),
    JobState.SUCCEEDED: _("Succeeded"),
    JobState.FAILED: _("Failed"),
    JobState.CANCELLED: _("Cancelled"),
    JobState.REJECTED: _("Rejected"),
    JobState.PREEMPTED: _("Preempted"),
    JobState.EXPIRED: _("Expired"),
    JobState.LOST: _("Lost"),
}
STATE_CHOICES = [(s.value, STATE_LABELS[s]) for s in JobState]


def backend_name(job_id: int) -> str:
    """The job's name in every backend (``gp-<id>``): derived from the id, so a dispatch retried
    after a crash finds the job it already created instead of starting a second one."""
    return f"gp-{job_id}"


class Job(models.Model):
    name = models.CharField(_("name"), max_length=63, validators=[name_validator])
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, related_name="jobs", verbose_name=_("project")
    )
    submitted_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="jobs")
    kind = models.CharField(_("kind"), max_length=12, choices=JobKind.choices)
    flavor = models.ForeignKey(
        Flavor, on_delete=models.PROTECT, related_name="jobs", verbose_name=_("flavor")
    )
    priority_class = models.ForeignKey(PriorityClass, on_delete=models.PROTECT, related_name="jobs")
    workers = models.PositiveIntegerField(_("workers"), default=1)
    min_workers = models.PositiveIntegerField(_("minimum workers"), null=True, blank=True)
    gpus_per_worker = models.PositiveIntegerField(_("GPUs per worker"), default=1)
    gpu_milli = models.PositiveIntegerField(_("GPU milli"), null=True, blank=True)
    # What each worker asks of its node besides its GPUs (DESIGN §15), fixed at submission (the
    # defaults are its GPUs' share of the flavor's nodes). Empty: none asked (jobs from before, or a
    # flavor whose nodes report no CPU or memory); the backend's defaults apply then.
    cpu_millicores = models.PositiveIntegerField(_("CPU per worker (millicores)"), null=True, blank=True)
    memory_mib = models.PositiveBigIntegerField(_("memory per worker (MiB)"), null=True, blank=True)
    local_disk_gib = models.PositiveIntegerField(_("local disk per worker (GiB)"), null=True, blank=True)
    # What one unit of the flavor came with when the job was submitted ({"cpu_millicores": …,
    # "memory_mib": …, "local_disk_gib": …}; the flavor's profile, else its smallest node's share):
    # the defaults above, and the part of the request a card's price includes (billing).
    unit_share = models.JSONField(_("share per unit"), default=dict, blank=True)
    # The lowest CUDA version the job's image needs ("12.2"; empty: any): nodes below are never chosen.
    min_cuda_version = models.CharField(_("minimum CUDA version"), max_length=20, blank=True)
    image = models.CharField(_("image"), max_length=300)
    command = models.TextField(_("command"), max_length=10000, blank=True)
    max_runtime_seconds = models.PositiveIntegerField(_("maximum runtime (s)"), null=True, blank=True)
    checkpointing = models.BooleanField(_("checkpointing"), default=False)
    sim_duration_seconds = models.PositiveIntegerField(null=True, blank=True)
    # The working environment (DESIGN §13), snapshots taken at submission (jobs.environment):
    # the project's storages the job mounts, its env vars (secret values only as references),
    # its checkpoint directory (a function of the job id: a requeued run resumes in it), and a
    # dev job's exposed port.
    mounts = models.JSONField(_("mounts"), default=list, blank=True)
    env = models.JSONField(_("environment variables"), default=list, blank=True)
    checkpoint = models.JSONField(_("checkpoint directory"), null=True, blank=True)
    expose_port = models.PositiveIntegerField(
        _("exposed port"), null=True, blank=True, validators=[MinValueValidator(1), MaxValueValidator(65535)]
    )
    # DESIGN §14: the flavors the job accepts, in the order it prefers them (ids; empty: only
    # ``flavor``) — ``flavor`` is the one it runs (or would run) on — and a framework whose
    # operator coverage a flavor must reach to be chosen.
    flavor_choices = ArrayField(models.PositiveIntegerField(), default=list, blank=True)
    framework = models.CharField(_("framework"), max_length=40, blank=True)
    min_operator_coverage = models.DecimalField(
        _("minimum operator coverage"),
        max_digits=4,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(1))],
    )
    approved = models.BooleanField(default=False)

    state = models.CharField(_("state"), max_length=20, choices=STATE_CHOICES, default=JobState.QUEUED)
    state_changed_at = models.DateTimeField()
    submitted_at = models.DateTimeField(_("submitted"))
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # The current allocation while admitted/running: [[node_id, gpu_index, milli], ...] per worker.
    granted_workers = models.PositiveIntegerField(null=True, blank=True)
    placement = models.JSONField(default=list, blank=True)
    on_loan = models.BooleanField(null=True, blank=True)
    # Set when a preemption is signalled: the job keeps its GPUs until it has exited.
    terminating_since = models.DateTimeField(null=True, blank=True)
    requeue_count = models.PositiveIntegerField(default=0)
    # Retries (DESIGN §17, jobs.retries): how many the submitter allows, how many runs were retried
    # after a failure, how many admissions ran into the start timeout, and the instant before which
    # a job waiting out its backoff is not admitted (None: no backoff).
    # db_default: the external import inserts jobs with SQL of its own (jobs.native.external).
    max_retries = models.PositiveSmallIntegerField(_("maximum retries"), default=0, db_default=0)
    retries = models.PositiveSmallIntegerField(_("retries"), default=0, db_default=0)
    start_timeouts = models.PositiveSmallIntegerField(default=0, db_default=0)
    not_before = models.DateTimeField(_("not before"), null=True, blank=True)
    # Backend bookkeeping. The backend object is named backend_name(id); these fields are claims
    # (set by conditional updates) so a retried task never submits or stops a job twice.
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    dispatch_claimed_at = models.DateTimeField(null=True, blank=True)
    dispatched_at = models.DateTimeField(null=True, blank=True)
    backend_id = models.CharField(max_length=100, blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    expire_requested_at = models.DateTimeField(null=True, blank=True)  # max runtime / dev lifetime
    exit_code = models.IntegerField(null=True, blank=True)
    message = models.CharField(max_length=500, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)  # flagged by the metrics poll
    # The idle policy (jobs.idle_service): when the job was warned (cleared when it is busy again),
    # when the policy acted on it (once: stopped or made preemptible), and since when it is
    # preemptible by the policy's hand whatever its priority class says (the scheduler's snapshot).
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    idle_acted_at = models.DateTimeField(null=True, blank=True)
    idle_preemptible_at = models.DateTimeField(null=True, blank=True)
    # Elastic scaling (docs/scheduling.md): the worker count the grow pass aims for (None: workers),
    # the grow times of the last len(grown_at) workers of placement (ISO strings, oldest first),
    # and the outbox claim of a resize the backend has not confirmed yet.
    target_workers = models.PositiveIntegerField(_("target workers"), null=True, blank=True)
    grown_at = models.JSONField(default=list, blank=True)
    resize_requested_at = models.DateTimeField(null=True, blank=True)
    # An external job's user as the backend names it (Slurm user, pod's namespace/service account):
    # ``submitted_by`` is the portal user of that name, or the "external" placeholder user.
    external_user = models.CharField(_("backend user"), max_length=100, blank=True)
    # Autoscaling from load (docs/scheduling.md "Autoscaling"), inference jobs only: a PromQL query
    # answering one value per replica (``{job}`` / ``{job_id}`` filled in), the value one replica
    # should carry, and the pause after a change. The autoscaler moves ``target_workers`` between
    # ``min_workers`` and ``workers``; ``autoscale_status`` is its last decision (value, desired,
    # reason as a message, when) and ``autoscale_scaled_at`` the last change it made.
    autoscale_query = models.CharField(
        _("autoscale query"), max_length=AUTOSCALE_QUERY_MAX_LENGTH, blank=True
    )
    autoscale_target = models.DecimalField(
        _("target value per replica"), max_digits=14, decimal_places=3, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0.001"))],
    )
    autoscale_cooldown_seconds = models.PositiveIntegerField(
        _("autoscale cool-down (s)"), default=AUTOSCALE_COOLDOWN_DEFAULT,
        validators=[MinValueValidator(AUTOSCALE_COOLDOWN_MIN), MaxValueValidator(AUTOSCALE_COOLDOWN_MAX)],
    )
    autoscale_scaled_at = models.DateTimeField(null=True, blank=True)
    autoscale_status = models.JSONField(default=dict, blank=True)
    # DESIGN §17: a task of an array (one submission, N jobs) and its index, GPUPOOL_ARRAY_INDEX in
    # the job's environment. An imported Slurm array task (123_4) belongs to the array 123.
    array = models.ForeignKey(
        "JobArray", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks",
        verbose_name=_("array"),
    )
    array_index = models.PositiveIntegerField(_("array index"), null=True, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        indexes = [
            models.Index(fields=["state", "flavor"]),
            models.Index(fields=["project", "state"]),
            # The job lists (pages and API) show the newest first, a page at a time: with this
            # index a page of 100 reads 100 rows instead of sorting every visible job (bench/load.py).
            models.Index(fields=["-submitted_at", "-id"], name="job_newest_first"),
            # "My jobs" (dashboard, the lists' "mine" filter): the newest-first index alone makes
            # PostgreSQL walk every newer job of everyone else to find a user's few or old ones.
            models.Index(fields=["submitted_by", "-submitted_at", "-id"], name="job_mine_newest_first"),
            # The approval inbox's requester history (jobs started in the last 90 days, how many
            # flagged idle): counted from the index alone, not from every job of the requesters.
            models.Index(
                fields=["submitted_by", "started_at"], include=["idle_since"], name="job_started_by_user"
            ),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(workers__gte=1), name="job_workers_ge_1"),
            models.CheckConstraint(
                condition=Q(min_workers__isnull=True) | Q(min_workers__lte=models.F("workers")),
                name="job_min_workers_le_workers",
            ),
            models.CheckConstraint(
                condition=Q(gpu_milli__isnull=True) | (Q(gpu_milli__gte=1) & Q(gpu_milli__lt=1000)),
                name="job_gpu_milli_range",
            ),
            models.UniqueConstraint(fields=["array", "array_index"], name="job_array_index_once"),
            # An external job is recorded once per backend job, however often it is seen.
            models.UniqueConstraint(
                fields=["cluster", "backend_id"], condition=Q(kind="external"), name="job_external_once"
            ),
        ]

    def __str__(self):
        return f"{self.name} #{self.pk}"


class JobArray(models.Model):
    """One submission of N tasks (DESIGN §17), each a job with its index; at most
    ``max_running`` of them hold GPUs at once (None: no cap). ``spec`` is what was asked
    ("0-99%10"). A native Slurm array (``backend_id``: its array job id on ``cluster``) groups the
    tasks the importer records (jobs.native)."""

    name = models.CharField(_("name"), max_length=63)
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, related_name="job_arrays", verbose_name=_("project")
    )
    submitted_by = models.ForeignKey(User, on_delete=models.PROTECT, related_name="job_arrays")
    spec = models.CharField(_("array"), max_length=200)
    size = models.PositiveIntegerField(_("tasks"))
    max_running = models.PositiveIntegerField(_("tasks running at once"), null=True, blank=True)
    submitted_at = models.DateTimeField(_("submitted"))
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="job_arrays"
    )
    backend_id = models.CharField(max_length=100, blank=True)

    class Meta:
        ordering = ["-submitted_at", "-id"]
        verbose_name = _("job array")
        verbose_name_plural = _("job arrays")
        constraints = [
            models.CheckConstraint(
                condition=Q(max_running__isnull=True) | Q(max_running__gte=1),
                name="jobarray_max_running_ge_1",
            ),
            models.UniqueConstraint(
                fields=["cluster", "backend_id"], condition=~Q(backend_id=""), name="jobarray_native_once"
            ),
        ]

    def __str__(self):
        return f"{self.name} [{self.spec}] #{self.pk}"


class DependencyCondition(models.TextChoices):
    """Slurm's afterok / afterany / afternotok (DESIGN §17)."""

    AFTER_OK = "after_ok", _("after it succeeds")
    AFTER_ANY = "after_any", _("after it ends")
    AFTER_NOT_OK = "after_not_ok", _("after it fails or is cancelled")


class JobDependency(models.Model):
    """``job`` is not admitted before ``depends_on`` has ended as ``condition`` asks; when that
    can no longer happen, ``job`` is cancelled (jobs.workflows)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    depends_on = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="dependents")
    condition = models.CharField(_("condition"), max_length=20, choices=DependencyCondition.choices)

    class Meta:
        ordering = ["depends_on_id"]
        verbose_name = _("job dependency")
        verbose_name_plural = _("job dependencies")
        constraints = [
            models.UniqueConstraint(fields=["job", "depends_on"], name="jobdependency_once"),
            models.CheckConstraint(condition=~Q(job=models.F("depends_on")), name="jobdependency_not_self"),
        ]

    def __str__(self):
        return f"{self.job_id} {self.condition} {self.depends_on_id}"


# Gap between an event's two clocks above which the job page shows the recorded time too.
RECORDED_GAP = timedelta(seconds=5)


class TimeSource(models.TextChoices):
    """Whose clock an event's ``occurred_at`` is."""

    PORTAL = "portal", _("portal clock")
    SIMULATOR = "simulator", _("simulator")
    SLURM = "slurm", _("Slurm (sacct)")
    KUBERNETES = "kubernetes", _("Kubernetes (container status)")


class JobEvent(models.Model):
    """Append-only: the audit trail, the metering source and the outbox for backends.

    ``kind`` is "transition" for a state change (``from_state`` → ``to_state``) or a
    scheduling note without a state change ("reservation", "preemption_signal", "placement")."""

    job = models.ForeignKey(Job, on_delete=models.PROTECT, related_name="events", verbose_name=_("job"))
    kind = models.CharField(_("kind"), max_length=20, default="transition")
    from_state = models.CharField(_("from"), max_length=20, blank=True)
    to_state = models.CharField(_("to"), max_length=20, blank=True)
    # English, as programs read it; ``reason_message`` holds a reason with parameters as data
    # for the reader's language (jobs/reasons.py). Older rows have only the text.
    reason = models.CharField(_("reason"), max_length=300, blank=True)
    reason_message = models.JSONField(_("reason (message)"), null=True, blank=True, editable=False)
    actor = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    # Two clocks (DESIGN §7 "Facts and corrections"): ``occurred_at`` is when it happened — the
    # backend's time when it reported one (``time_source``), else the portal's; ``recorded_at`` is
    # when the portal wrote the row (the database's clock), the order the meter follows, so a fact
    # that arrives late is still picked up by the next run.
    occurred_at = models.DateTimeField(_("occurred at"))
    recorded_at = models.DateTimeField(_("recorded at"), db_default=Now(), editable=False)
    # The recording transaction's id: the meter's cursor is a transaction snapshot, so a row that
    # commits late — whatever the clocks say — is seen by exactly the next run (billing.meter).
    recorded_xid = models.BigIntegerField(db_default=Func(function="txid_current"), editable=False)
    time_source = models.CharField(
        _("time source"), max_length=12, choices=TimeSource.choices, db_default=TimeSource.PORTAL.value
    )
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["occurred_at", "id"]
        verbose_name = _("job event")
        verbose_name_plural = _("job events")
        indexes = [
            models.Index(fields=["job", "occurred_at"], name="jobs_jobeve_job_id_86b84e_idx"),
            models.Index(fields=["kind", "occurred_at"], name="jobs_jobeve_kind_fe1fff_idx"),
            models.Index(fields=["recorded_xid"], name="jobevent_recorded_xid"),
        ]

    def __str__(self):
        return f"{self.job_id}: {self.from_state}→{self.to_state} ({self.reason})"

    @property
    def reason_text(self) -> str:
        """The reason in the active language."""
        from jobs.reasons import reason_text

        return reason_text(self.reason, self.reason_message)

    @property
    def recorded_late(self) -> bool:
        """The portal wrote this row noticeably after it happened (a poll, a late fact): the job
        page then shows both clocks. False on an unsaved row, whose recorded_at is not known."""
        recorded = self.recorded_at
        if not isinstance(recorded, datetime) or self.occurred_at is None:
            return False
        return abs(recorded - self.occurred_at) > RECORDED_GAP


class AdmissionWait(models.Model):
    """One admission (an ``admitted`` transition event) and the wait before it: from the job's
    latest entry into the queue (``queued``, ordered by occurred_at then id) to the admission, in
    minutes — the usage explorer's queue waits (issue 24), read without a window over the event
    log. Kept by a trigger on jobs_jobevent (``jobs.waits``), whoever inserts the events (the
    scheduler's one statement, transitions, external imports): each statement that adds a queued or
    admitted event recomputes the admissions of those jobs, so a late queue entry corrects the
    wait after it, and the job's grouping columns follow the job (its flavor changes only at an
    admission, in the statement that inserts its event). Admissions with no queue entry before
    them have no row. The department is the project's now, read at query time."""

    event_id = models.BigIntegerField(primary_key=True)
    job_id = models.BigIntegerField()
    admitted_at = models.DateTimeField()
    wait_minutes = models.FloatField()
    project_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    flavor_id = models.BigIntegerField()
    kind = models.CharField(max_length=12)
    priority_class_id = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["admitted_at"], name="admissionwait_admitted_at")]

    def __str__(self):
        return f"{self.job_id} @ {self.admitted_at:%Y-%m-%d %H:%M}: {self.wait_minutes:.1f} min"


class JobGpuSample(models.Model):
    """Per-minute GPU utilisation of a running job, from Prometheus (DCGM). A minute with no
    data has no row: an outage of the metrics pipeline stays a gap, never reads as zero."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="gpu_samples")
    minute = models.DateTimeField()
    gpu_util_pct = models.FloatField()  # the mean of the job's cards
    # The busiest card's minute (the idle policy: every card under the threshold). Empty on rows
    # written before it was polled, or when the exporter gave no per-card figure.
    gpu_util_max_pct = models.FloatField(null=True, blank=True)
    fb_used_mib = models.FloatField()
    gpus = models.PositiveIntegerField()  # GPU series seen (a gap in a series shows as fewer)

    class Meta:
        ordering = ["job_id", "minute"]
        constraints = [models.UniqueConstraint(fields=["job", "minute"], name="gpu_sample_unique_minute")]

    def __str__(self):
        return f"{self.job_id} @ {self.minute:%Y-%m-%d %H:%M}: {self.gpu_util_pct:.0f}%"


class GpuSampleHour(models.Model):
    """One job's GPU samples of one UTC hour, summed — the usage explorer's utilisation (issue 24)
    reads a range's whole hours from these rows, not from every minute's sample. ``gpus``: Σ gpus
    of the hour's samples; ``gpu_util``: Σ gpus × gpu_util_pct. The card fraction (the flavor's
    and gpu_milli) and the grouping columns are the job's, applied at query time, so a row holds
    nothing that its job can change. Kept by triggers on jobs_jobgpusample (``jobs.sample_hours``):
    each statement recomputes the hours it touched from their samples, so the poller's overwrite of
    a minute, a bulk insert and the deletion of a job's samples all leave it exact. UTC hours: a
    site zone's midnight is on a UTC hour or (+05:30) at its half, read from the samples."""

    job_id = models.BigIntegerField()
    hour = models.DateTimeField()
    gpus = models.BigIntegerField()
    gpu_util = models.FloatField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job_id", "hour"], name="gpusamplehour_unique_hour")]
        indexes = [models.Index(fields=["hour"], name="gpusamplehour_hour")]

    def __str__(self):
        return f"{self.job_id} @ {self.hour:%Y-%m-%d %H}h: {self.gpus} GPU-minutes"


class ApprovalPolicy(models.Model):
    """When a job of a department's subtree needs approval (DESIGN §6). The nearest department
    up the tree that has a policy decides for a project; no policy on the way up: no approval.

    GPU figures are whole-card equivalents (count × card_fraction × gpu_milli/1000), the unit
    of card-hours, so seven MIG slices count as one card."""

    department = models.OneToOneField(
        Department, on_delete=models.CASCADE, related_name="approval_policy", verbose_name=_("department")
    )
    max_gpus = models.PositiveIntegerField(
        _("GPUs without approval"),
        null=True,
        blank=True,
        validators=[MaxValueValidator(1_000_000)],
        help_text=_("A job using more cards than this needs approval. Empty: no limit."),
    )
    max_runtime_hours = models.PositiveIntegerField(
        _("runtime without approval (h)"),
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(90 * 24)],
        help_text=_(
            "A job that may run longer (or without a maximum runtime) needs approval. Empty: no limit."
        ),
    )
    premium_flavors = models.BooleanField(_("premium flavors need approval"), default=True)
    flavors = models.ManyToManyField(
        Flavor, blank=True, related_name="+", verbose_name=_("flavors that need approval")
    )
    platform_gpus = models.PositiveIntegerField(
        _("GPUs needing a platform admin too"),
        null=True,
        blank=True,
        validators=[MaxValueValidator(1_000_000)],
        help_text=_("Above this many cards a platform admin approves after the department admin."),
    )
    # Budgets arrive with billing; the check is the hook jobs.approvals.budget_checks.
    over_budget = models.BooleanField(_("over budget needs approval"), default=True)
    # DESIGN §15: a job asking more CPU, memory or disk per GPU than this many times its cards'
    # share needs approval (empty: never).
    max_request_ratio = models.DecimalField(
        _("CPU/memory per card without approval (× the card's share)"),
        max_digits=5,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(1)), MaxValueValidator(Decimal(100))],
        help_text=_(
            "A job asking more CPU, memory or disk per card than this many times a card's share "
            "needs approval."
        ),
    )
    step_timeout_hours = models.PositiveIntegerField(
        _("hours to decide"),
        default=48,
        validators=[MinValueValidator(1), MaxValueValidator(30 * 24)],
        help_text=_("After this long an undecided step goes to the next level up."),
    )
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["department__code"]
        verbose_name = _("approval policy")
        verbose_name_plural = _("approval policies")
        constraints = [
            models.CheckConstraint(
                condition=Q(platform_gpus__isnull=True)
                | Q(max_gpus__isnull=True)
                | Q(platform_gpus__gte=models.F("max_gpus")),
                name="approval_policy_platform_above_department",
            ),
        ]

    def __str__(self):
        return str(self.department)


# ---- the job's working environment (DESIGN §13) ----------------------------------------------


class StorageKind(models.TextChoices):
    NFS = "nfs", _("NFS export")
    HOSTPATH = "hostpath", _("host path on the shared file system")
    PVC = "pvc", _("Kubernetes persistent volume claim")


class ProjectStorage(models.Model):
    """A storage a project's jobs may mount, defined by platform admins. ``mount_path`` is where a
    container sees it; ``host_path`` where the nodes (Slurm jobs, host-path volumes) see it on the
    shared file system. One storage per project holds its jobs' checkpoint directories."""

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="storages", verbose_name=_("project")
    )
    name = models.CharField(_("name"), max_length=40, validators=[name_validator])
    kind = models.CharField(_("kind"), max_length=10, choices=StorageKind.choices)
    nfs_server = models.CharField(_("NFS server"), max_length=253, blank=True)
    nfs_path = models.CharField(_("NFS export path"), max_length=1000, blank=True)
    host_path = models.CharField(
        _("path on the nodes"),
        max_length=1000,
        blank=True,
        help_text=_("Where the nodes see this storage on the shared file system (Slurm jobs use it)."),
    )
    claim_name = models.CharField(_("claim name"), max_length=253, blank=True)
    mount_path = models.CharField(
        _("mount path"), max_length=1000, help_text=_("Where the job's containers see it, e.g. /data.")
    )
    read_only = models.BooleanField(_("read-only"), default=False)
    checkpoints = models.BooleanField(
        _("holds checkpoints"),
        default=False,
        help_text=_("The project's jobs get their checkpoint directories here."),
    )
    quota_note = models.CharField(_("quota note"), max_length=200, blank=True)
    active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "name"]
        verbose_name = _("project storage")
        verbose_name_plural = _("project storages")
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="storage_name_once_per_project"),
            models.UniqueConstraint(
                fields=["project"], condition=Q(checkpoints=True), name="storage_one_checkpoint_root"
            ),
            models.CheckConstraint(
                condition=~(Q(checkpoints=True) & Q(read_only=True)), name="storage_checkpoints_writable"
            ),
        ]

    def __str__(self):
        return f"{self.name} ({self.mount_path})"

    def clean(self):
        from jobs.environment import storage_errors  # the one place paths are checked

        errors = storage_errors(self)
        if errors:
            raise ValidationError(errors)


class ProjectSecret(models.Model):
    """A Kubernetes Secret a project's jobs may read environment variables from (DESIGN §13;
    issue 32 item 17), declared by platform admins like a storage: by name only — the portal
    never holds a secret's value. On Kubernetes it is a Secret of the jobs' namespace (never the
    portal's own, which holds gpupool-secrets); on Slurm the directory
    ``<secrets_dir>/<project>/<name>/`` on the nodes. A job's ``{"secret", "key"}`` must name an
    active declaration of its own project; any key of that Secret may be read."""

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="secrets", verbose_name=_("project")
    )
    name = models.CharField(
        _("Secret name"),
        max_length=253,
        help_text=_(
            "The Kubernetes Secret's name in the jobs' namespace (lower-case letters, digits, '-', '.')."
        ),
    )
    note = models.CharField(
        _("note"), max_length=200, blank=True, help_text=_("What it holds, for the project's users.")
    )
    active = models.BooleanField(_("active"), default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "name"]
        verbose_name = _("project secret")
        verbose_name_plural = _("project secrets")
        constraints = [
            models.UniqueConstraint(fields=["project", "name"], name="secret_name_once_per_project"),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        from jobs.environment import DNS_SUBDOMAIN  # the one place Secret names are checked

        if not DNS_SUBDOMAIN.match(self.name or ""):
            raise ValidationError(
                {"name": [_("A Kubernetes Secret name: lower-case letters, digits, '-' and '.'.")]}
            )


class JobTemplate(models.Model):
    """A saved submission: the API's submission body (``values``) under a name, the owner's
    own or shared with the project's members. Submitting from it checks everything again."""

    name = models.CharField(_("name"), max_length=80)
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="job_templates", verbose_name=_("project")
    )
    owner = models.ForeignKey(User, on_delete=models.CASCADE, related_name="job_templates")
    shared = models.BooleanField(
        _("shared with the project"), default=False, help_text=_("Every member of the project may use it.")
    )
    values = models.JSONField(_("values"), default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["project", "name"]
        verbose_name = _("job template")
        verbose_name_plural = _("job templates")
        constraints = [
            models.UniqueConstraint(fields=["project", "owner", "name"], name="template_name_once"),
        ]

    def __str__(self):
        return self.name


from jobs.idle_models import IdleAction, IdleExemption, IdlePolicy  # noqa: E402,F401  (issue 34)
from jobs.reservation_models import (  # noqa: E402,F401  (issue 35)
    QueueSetting,
    QueueState,
    QueueStateEvent,
    Reservation,
    ReservationState,
)
from jobs.retry_models import RetryPolicy  # noqa: E402,F401  (issue 35)
from jobs.rule_models import Packing, RuleChangeEvent, SchedulerSettings  # noqa: E402,F401  (issue 25)
