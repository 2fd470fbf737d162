"""Resources (DESIGN §2) and the quota tree (DESIGN §3).

Inventory lives here rather than in ``jobs``: quota validation at the pool root needs the
healthy capacity of each flavor, and dependencies only point portal ← quotas ← jobs.
Quantities of a flavor are Decimal in units of that flavor (one card, one MIG slice);
fractions only arise for shareable flavors (``gpu_milli`` requests).
"""

from decimal import Decimal
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Cast
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from portal.models import Department, Project, User

from . import profiles
from .fractions import MAX_DENOMINATOR, label
from .queues import JOBS_NAMESPACE, jobs_namespace_problem

name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$",
    _("Use 1–40 letters, digits, '.', '_' or '-', starting with a letter or digit."),
)
MAX_UNITS = Decimal("1000000")
QUANTITY = {"max_digits": 12, "decimal_places": 3}


class Vendor(models.TextChoices):
    NVIDIA = "nvidia", "NVIDIA"
    HUAWEI = "huawei", _("Huawei Ascend")
    CAMBRICON = "cambricon", _("Cambricon")
    HYGON = "hygon", _("Hygon DCU")
    OTHER = "other", _("Other")


class SharingMode(models.TextChoices):
    """How jobs share one card of the flavor, as the backend enforces it (DESIGN §14)."""

    NONE = "", _("whole cards")
    MIG = "mig", _("MIG slices")
    SHARD = "shard", _("shards / time-slicing")
    VGPU = "vgpu", _("vGPU (memory and core limits)")
    VNPU = "vnpu", _("Ascend vNPU")


class FlavorKind(models.TextChoices):
    GPU = "gpu", _("GPU")
    CPU = "cpu", _("CPU")


class Flavor(models.Model):
    """资源规格: a GPU model or a slice of one — or, of kind ``cpu``, one core of CPU-only nodes
    (DESIGN §15): its unit is then a core, quota'd, borrowed and billed by the same rules."""

    name = models.CharField(_("name"), max_length=40, unique=True, validators=[name_validator])
    vendor = models.CharField(_("vendor"), max_length=20, choices=Vendor.choices)
    model = models.CharField(_("model"), max_length=80)
    memory_mib = models.PositiveIntegerField(_("memory (MiB)"), validators=[MaxValueValidator(10**7)])
    # The share of one physical card, exactly (quotas.fractions): 1/1 a whole card, 1/7 an A100
    # 1g.10gb MIG slice, 3/7 a 3g.40gb. Stored reduced. Computations use numerator and denominator
    # (numerator first, divide last) so seven 1/7 slices are exactly one card.
    fraction_numerator = models.PositiveSmallIntegerField(
        _("card fraction numerator"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_DENOMINATOR)],
    )
    fraction_denominator = models.PositiveSmallIntegerField(
        _("card fraction denominator"),
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_DENOMINATOR)],
    )
    # Derived by the database from the two above (one source of truth), rounded to 8 places: for
    # display and for API compatibility only — never multiply by it.
    card_fraction = models.GeneratedField(
        expression=Cast(
            Cast("fraction_numerator", models.DecimalField(max_digits=20, decimal_places=10))
            / F("fraction_denominator"),
            models.DecimalField(max_digits=10, decimal_places=8),
        ),
        output_field=models.DecimalField(max_digits=10, decimal_places=8),
        db_persist=True,
        verbose_name=_("card fraction"),
    )
    mig_profile = models.CharField(_("MIG profile"), max_length=20, blank=True)
    shareable = models.BooleanField(
        _("shareable"),
        default=False,
        help_text=_("Jobs may ask for gpu_milli < 1000 of one card (vGPU / HAMi / time-slicing)."),
    )
    premium = models.BooleanField(_("premium"), default=False)
    k8s_resource_name = models.CharField(_("Kubernetes resource"), max_length=80)
    slurm_gres = models.CharField(_("Slurm GRES"), max_length=80, blank=True)
    # Σ top-level departments' quota may reach this × healthy capacity (DESIGN §3).
    pool_overcommit_ratio = models.DecimalField(
        _("pool overcommit ratio"),
        max_digits=5,
        decimal_places=2,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal(1)), MaxValueValidator(Decimal(10))],
    )
    active = models.BooleanField(_("active"), default=True)
    # The flavor's profile (DESIGN §14), edited by platform admins; each value with its source
    # and date. ``relative_throughput`` is against the centre's reference card (GPUPOOL
    # REFERENCE_FLAVOR, 1.0); normalised card-hours (标准卡时) = card-hours × it.
    sharing_mode = models.CharField(
        _("sharing mode"), max_length=10, choices=SharingMode.choices, default=SharingMode.NONE, blank=True
    )
    relative_throughput = models.DecimalField(
        _("relative throughput"),
        max_digits=6,
        decimal_places=3,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal("0.001")), MaxValueValidator(Decimal(100))],
        help_text=_("Throughput against the centre's reference card (1.0)."),
    )
    relative_throughput_source = models.CharField(_("throughput source"), max_length=300, blank=True)
    relative_throughput_date = models.DateField(_("throughput measured on"), null=True, blank=True)
    # {"pytorch": {"coverage": "0.93", "source": "vendor operator list v8.0", "date": "2026-06-01"}}:
    # the share of a framework's mainstream operators the card supports (0..1).
    operator_coverage = models.JSONField(_("operator coverage"), default=dict, blank=True)
    kind = models.CharField(_("kind"), max_length=3, choices=FlavorKind.choices, default=FlavorKind.GPU)
    # What one unit (a card, a slice, a core) comes with (DESIGN §15), when the profile says so;
    # empty: the share of the flavor's smallest node (allocatable ÷ its units), read from the
    # inventory. A job's default request per unit, and the share its price includes.
    cpu_millicores_per_unit = models.PositiveIntegerField(
        _("CPU per unit (millicores)"), null=True, blank=True, validators=[MaxValueValidator(10**7)]
    )
    memory_mib_per_unit = models.PositiveIntegerField(
        _("memory per unit (MiB)"), null=True, blank=True, validators=[MaxValueValidator(10**9)]
    )
    local_disk_gib_per_unit = models.PositiveIntegerField(
        _("local disk per unit (GiB)"), null=True, blank=True, validators=[MaxValueValidator(10**7)]
    )
    # Rack power (DESIGN §18): what one busy card of the flavor draws (its board power, the
    # profile's figure; a slice draws its fraction of it). Empty: not known, its nodes' racks count
    # only their idle draw and measured power for it.
    board_watts = models.PositiveIntegerField(
        _("board power (W per card)"), null=True, blank=True, validators=[MaxValueValidator(100_000)]
    )

    class Meta:
        ordering = ["name"]
        verbose_name = _("flavor")
        verbose_name_plural = _("flavors")
        constraints = [
            models.CheckConstraint(
                condition=Q(fraction_numerator__gte=1) & Q(fraction_numerator__lte=F("fraction_denominator"))
                & Q(fraction_denominator__lte=MAX_DENOMINATOR),
                name="flavor_fraction_range",
            ),
            models.CheckConstraint(condition=Q(pool_overcommit_ratio__gte=1), name="flavor_ratio_ge_1"),
        ]

    def __str__(self):
        return self.name

    def clean(self):
        """The profile's rules (``quotas.profiles``), with translated messages."""
        super().clean()
        found = profiles.profile_problems(
            relative_throughput=self.relative_throughput,
            source=self.relative_throughput_source,
            taken=self.relative_throughput_date,
            operator_coverage=self.operator_coverage,
            today=timezone.localdate(),
        )
        if found:
            errors: dict[str, list] = {}
            for problem in found:
                errors.setdefault(problem.field, []).append(profile_message(problem))
            raise ValidationError(errors)

    @property
    def fraction(self) -> Fraction:
        """The exact share of one card (works on unsaved flavors, unlike ``card_fraction``)."""
        return Fraction(self.fraction_numerator, self.fraction_denominator)

    @property
    def fraction_label(self) -> str:
        return label(self.fraction_numerator, self.fraction_denominator)


PROFILE_MESSAGES = {
    "not_object": _(
        'Give operator coverage as an object: {"pytorch": {"coverage": "0.93", "source": …, '
        '"date": "YYYY-MM-DD"}}.'
    ),
    "framework": _(
        "“%(framework)s” is not a framework name (lower-case letters, digits, '.', '_', '-', '+')."
    ),
    "keys": _("%(framework)s: give exactly coverage, source and date."),
    "coverage": _("%(framework)s: coverage is a decimal string from 0 to 1 with at most 3 decimals."),
    "source": _("Say where the value comes from (at most 300 characters)."),
    "date": _("Give the date the value was taken (YYYY-MM-DD)."),
    "future": _("The date is in the future."),
}
# The coverage entries' source and date problems name their framework.
FRAMEWORK_MESSAGES = {
    "source": _("%(framework)s: say where the coverage comes from (at most 300 characters)."),
    "date": _("%(framework)s: give the date the coverage was taken (YYYY-MM-DD)."),
    "future": _("%(framework)s: the date is in the future."),
}


def profile_message(problem: profiles.Problem) -> str:
    named = "framework" in problem.params and problem.code in FRAMEWORK_MESSAGES
    table = FRAMEWORK_MESSAGES if named else PROFILE_MESSAGES
    return str(table[problem.code]) % problem.params if problem.params else str(table[problem.code])


class ClusterKind(models.TextChoices):
    SIMULATOR = "simulator", _("Simulated cluster")
    SLURM = "slurm", "Slurm"
    KUBERNETES = "kubernetes", "Kubernetes"


class Cluster(models.Model):
    name = models.CharField(_("name"), max_length=40, unique=True, validators=[name_validator])
    kind = models.CharField(_("kind"), max_length=20, choices=ClusterKind.choices)
    description = models.CharField(_("description"), max_length=200, blank=True)
    # Connection settings (endpoint, namespace, partition map); secrets stay in the env.
    config = models.JSONField(_("configuration"), default=dict, blank=True)
    active = models.BooleanField(_("active"), default=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("cluster")
        verbose_name_plural = _("clusters")

    def __str__(self):
        return self.name

    def clean(self):
        """A Kubernetes cluster's jobs never run in the namespace that holds the portal's own
        secrets (``quotas.queues.jobs_namespace_problem``): refused here, where an admin types it,
        as the backend refuses it where it is used."""
        config = self.config if isinstance(self.config, dict) else {}
        if self.kind != ClusterKind.KUBERNETES or config.get("simulated"):
            return
        namespace = config.get("namespace") or JOBS_NAMESPACE
        if jobs_namespace_problem(namespace):
            raise ValidationError({"config": [_(
                "Jobs never run in %(namespace)s: it holds the portal's own secrets. Give \"namespace\" "
                "another value (the default is %(default)s)."
            ) % {"namespace": namespace, "default": JOBS_NAMESPACE}]})


class NodeState(models.TextChoices):
    READY = "ready", _("Ready")
    CORDONED = "cordoned", _("Cordoned")
    DRAINING = "draining", _("Draining")
    DOWN = "down", _("Down")


class NodeHold(models.TextChoices):
    """A platform admin's hold on a node (jobs.clusters.nodes): it takes no new jobs until returned to
    service. The inventory sync never lifts it; only "down" from the backend shows through."""

    NONE = "", _("none")
    CORDONED = "cordoned", _("Cordoned")
    DRAINING = "draining", _("Draining")


def held_state(reported: str, hold: str) -> str:
    """The state the portal shows and schedules by: down wins (the node does not answer),
    then the admin's hold, then what the backend reports."""
    if reported == NodeState.DOWN or not hold:
        return reported
    return hold


class Rack(models.Model):
    """A rack of nodes with its power cap (DESIGN §18): placement never plans its draw above the
    cap. Created by the inventory sync when a node label or Slurm feature names the rack
    (jobs.clusters.topology); the cap is a platform admin's. Empty cap: not limited."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="racks")
    name = models.CharField(_("name"), max_length=40, validators=[name_validator])
    power_cap_kw = models.DecimalField(
        _("power cap (kW)"), max_digits=8, decimal_places=2, null=True, blank=True,
        validators=[MinValueValidator(Decimal(0)), MaxValueValidator(Decimal(100_000))],
    )

    class Meta:
        ordering = ["cluster_id", "name"]
        verbose_name = _("rack")
        verbose_name_plural = _("racks")
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="rack_unique_name")]

    def __str__(self):
        return f"{self.cluster.name}/{self.name}"


class Node(models.Model):
    """A GPU server. Topology is zone/spine/leaf/node (a leaf may be a multi-node NVLink domain,
    jobs.clusters.topology); it may sit in a power-capped rack."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(_("name"), max_length=63, validators=[name_validator])
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="nodes")
    # Units of its flavor: GPUs, MIG slices, or cores of a CPU flavor's node.
    gpu_count = models.PositiveSmallIntegerField(
        _("GPU count"), validators=[MinValueValidator(1), MaxValueValidator(1024)]
    )
    state = models.CharField(_("state"), max_length=10, choices=NodeState.choices, default=NodeState.READY)
    hold = models.CharField(_("hold"), max_length=10, choices=NodeHold.choices, default="", blank=True)
    zone = models.CharField(_("zone"), max_length=40, validators=[name_validator])
    spine = models.CharField(_("spine"), max_length=40, validators=[name_validator])
    leaf = models.CharField(_("leaf"), max_length=40, validators=[name_validator])
    last_seen_at = models.DateTimeField(_("last seen"), null=True, blank=True)
    # The whole machine (DESIGN §15), read from the backend by the inventory sync, never typed in:
    # capacity, and allocatable = capacity − what the node keeps for itself. Empty: not reported
    # (then only GPUs are placed on it).
    cpu_millicores = models.PositiveIntegerField(_("allocatable CPU (millicores)"), null=True, blank=True)
    memory_mib = models.PositiveBigIntegerField(_("allocatable memory (MiB)"), null=True, blank=True)
    local_disk_gib = models.PositiveIntegerField(_("allocatable local disk (GiB)"), null=True, blank=True)
    cpu_millicores_capacity = models.PositiveIntegerField(_("CPU (millicores)"), null=True, blank=True)
    memory_mib_capacity = models.PositiveBigIntegerField(_("memory (MiB)"), null=True, blank=True)
    local_disk_gib_capacity = models.PositiveIntegerField(_("local disk (GiB)"), null=True, blank=True)
    driver_version = models.CharField(_("driver version"), max_length=40, blank=True)
    cuda_version = models.CharField(_("CUDA version"), max_length=20, blank=True)
    labels = models.JSONField(_("labels"), default=dict, blank=True)
    # Node health (DESIGN §17, jobs.clusters.health): why the health check cordoned the node (an
    # XID error, Slurm's reason, a Kubernetes condition); empty when it did not. ``health_damped``:
    # it went bad too often (FLAP_LIMIT in FLAP_WINDOW), so it stays cordoned until an operator
    # returns it, healthy or not.
    health_reason = models.CharField(_("health"), max_length=300, blank=True)
    health_damped = models.BooleanField(_("held after flapping"), default=False)
    # Rack power (DESIGN §18): its rack, its draw besides its GPU boards (watts, an admin's figure),
    # and its GPUs' DCGM power (DCGM_FI_DEV_POWER_USAGE summed) at the last metrics poll, which
    # replaces the estimate from its busy cards while it is recent (jobs.clusters.power).
    rack = models.ForeignKey(
        Rack, on_delete=models.SET_NULL, null=True, blank=True, related_name="nodes", verbose_name=_("rack")
    )
    idle_watts = models.PositiveIntegerField(
        _("idle draw (W)"), null=True, blank=True, validators=[MaxValueValidator(1_000_000)]
    )
    measured_watts = models.PositiveIntegerField(_("measured GPU power (W)"), null=True, blank=True)
    measured_at = models.DateTimeField(_("power measured at"), null=True, blank=True)

    class Meta:
        ordering = ["cluster_id", "zone", "spine", "leaf", "name"]
        verbose_name = _("node")
        verbose_name_plural = _("nodes")
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name"),
            models.CheckConstraint(condition=Q(gpu_count__gte=1), name="node_has_gpus"),
        ]
        indexes = [models.Index(fields=["flavor", "state"])]

    def __str__(self):
        return self.topology_path

    @property
    def topology_path(self) -> str:
        return f"{self.zone}/{self.spine}/{self.leaf}/{self.name}"


class SoftwareBaseline(models.Model):
    """The driver and CUDA versions the nodes of a flavor are expected to run (DESIGN §15), for
    all clusters (``cluster`` empty) or one; the node map and the drift report flag nodes off it."""

    flavor = models.ForeignKey(
        Flavor, on_delete=models.CASCADE, related_name="baselines", verbose_name=_("flavor")
    )
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.CASCADE, related_name="baselines",
        verbose_name=_("cluster"),
    )
    driver_version = models.CharField(_("driver version"), max_length=40, blank=True)
    cuda_version = models.CharField(_("CUDA version"), max_length=20, blank=True)

    class Meta:
        ordering = ["flavor", "cluster"]
        verbose_name = _("software baseline")
        verbose_name_plural = _("software baselines")
        constraints = [
            models.UniqueConstraint(fields=["flavor", "cluster"], name="baseline_once_per_cluster"),
            models.UniqueConstraint(
                fields=["flavor"], condition=Q(cluster__isnull=True), name="baseline_once_for_all_clusters"
            ),
        ]

    def __str__(self):
        where = self.cluster or _("every cluster")
        driver, cuda = self.driver_version or "—", self.cuda_version or "—"
        return f"{self.flavor} @ {where}: driver {driver}, CUDA {cuda}"


class NodeAction(models.TextChoices):
    CORDON = "cordon", _("Cordon")
    DRAIN = "drain", _("Drain")
    RETURN = "return", _("Return to service")
    # The portal's own, by the health check (no actor): cordoned on a health signal, and returned
    # when every signal has cleared (unless it flapped: then only an operator returns it).
    HEALTH = "health", _("Cordoned by the health check")
    RECOVERED = "recovered", _("Healthy again")


class NodeEvent(models.Model):
    """Append-only: what a platform admin did to a node (cordon, drain, return to service), or the
    health check (cordoned, healthy again: no actor), why, and the jobs it touched (``data``:
    ``jobs`` on the node then, ``requeued`` the ones sent back to the queue)."""

    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="events", verbose_name=_("node"))
    action = models.CharField(_("action"), max_length=10, choices=NodeAction.choices)
    from_state = models.CharField(_("from"), max_length=10, choices=NodeState.choices)
    to_state = models.CharField(_("to"), max_length=10, choices=NodeState.choices)
    reason = models.CharField(_("reason"), max_length=300)
    actor = models.ForeignKey(
        User, on_delete=models.PROTECT, related_name="+", verbose_name=_("by"), null=True, blank=True
    )
    at = models.DateTimeField(_("at"), default=timezone.now)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name = _("node event")
        verbose_name_plural = _("node events")
        indexes = [models.Index(fields=["node", "-at"], name="nodeevent_node_newest")]

    def __str__(self):
        return f"{self.node_id}: {self.action} {self.from_state}→{self.to_state} ({self.reason})"


class QuotaNode(models.Model):
    """Quota of one department or project for one flavor (DESIGN §3)."""

    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quota_nodes")
    department = models.ForeignKey(
        Department, null=True, blank=True, on_delete=models.CASCADE, related_name="quota_nodes"
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.CASCADE, related_name="quota_nodes"
    )
    quota = models.DecimalField(_("quota"), **QUANTITY, validators=[MinValueValidator(0)])
    borrow_limit = models.DecimalField(
        _("borrow limit"),
        **QUANTITY,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Empty: may borrow any idle capacity. 0: never borrows."),
    )
    lend_limit = models.DecimalField(
        _("lend limit"),
        **QUANTITY,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text=_("Empty: all idle quota may be lent. 0: lends nothing."),
    )
    overcommit_ratio = models.DecimalField(
        _("overcommit ratio"),
        max_digits=5,
        decimal_places=2,
        default=Decimal(1),
        validators=[MinValueValidator(Decimal(1)), MaxValueValidator(Decimal(10))],
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("quota node")
        verbose_name_plural = _("quota nodes")
        constraints = [
            models.CheckConstraint(
                name="quota_node_one_owner",
                condition=(
                    Q(department__isnull=False, project__isnull=True)
                    | Q(department__isnull=True, project__isnull=False)
                ),
            ),
            models.UniqueConstraint(fields=["flavor", "department"], name="quota_node_unique_department"),
            models.UniqueConstraint(fields=["flavor", "project"], name="quota_node_unique_project"),
            models.CheckConstraint(condition=Q(quota__gte=0), name="quota_node_quota_ge_0"),
            models.CheckConstraint(condition=Q(overcommit_ratio__gte=1), name="quota_node_ratio_ge_1"),
        ]

    def __str__(self):
        return f"{self.owner} · {self.flavor}"

    @property
    def owner(self):
        return self.project or self.department


class LoanState(models.TextChoices):
    PENDING = "pending", _("Pending approval")
    ACTIVE = "active", _("Active")
    REJECTED = "rejected", _("Rejected")
    RETURNED = "returned", _("Returned")
    CANCELLED = "cancelled", _("Cancelled")


class Loan(models.Model):
    """借用: a time-boxed transfer of ``amount`` of one flavor from lender to borrower.

    It moves effective quota only while ``state`` is active and ``starts_at ≤ t < ends_at``;
    at ``ends_at`` it returns by itself (the effective-quota computation simply stops
    counting it), so no job is killed by a missed timer.
    """

    lender = models.ForeignKey(QuotaNode, on_delete=models.PROTECT, related_name="loans_out")
    borrower = models.ForeignKey(QuotaNode, on_delete=models.PROTECT, related_name="loans_in")
    amount = models.DecimalField(_("amount"), **QUANTITY, validators=[MinValueValidator(0)])
    starts_at = models.DateTimeField(_("starts at"))
    ends_at = models.DateTimeField(_("ends at"))
    state = models.CharField(_("state"), max_length=10, choices=LoanState.choices, default=LoanState.PENDING)
    reason = models.CharField(_("reason"), max_length=500, blank=True)
    requested_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-starts_at", "id"]
        verbose_name = _("loan")
        verbose_name_plural = _("loans")
        constraints = [
            models.CheckConstraint(
                condition=Q(ends_at__gt=models.F("starts_at")), name="loan_ends_after_start"
            ),
            models.CheckConstraint(condition=Q(amount__gt=0), name="loan_amount_positive"),
            models.CheckConstraint(condition=~Q(lender=models.F("borrower")), name="loan_not_to_self"),
        ]

    def __str__(self):
        return f"{self.lender} → {self.borrower}: {self.amount}"


class QuotaWindow(models.Model):
    """A recurring override of a node's quota and/or lend limit, in the site time zone
    (e.g. lend 80 % of inference quota 20:00–08:00). ``end_time`` < ``start_time`` wraps
    past midnight; the window then belongs to the weekday on which it starts."""

    quota_node = models.ForeignKey(QuotaNode, on_delete=models.CASCADE, related_name="windows")
    name = models.CharField(_("name"), max_length=80)
    weekdays = models.CharField(
        _("weekdays"),
        max_length=7,
        default="0123456",
        validators=[RegexValidator(r"^(?!.*(.).*\1)[0-6]{1,7}$", _("Digits 0 (Monday) to 6, each once."))],
    )
    start_time = models.TimeField(_("start time"))
    end_time = models.TimeField(_("end time"))
    quota = models.DecimalField(
        _("quota"), **QUANTITY, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    lend_limit = models.DecimalField(
        _("lend limit"), **QUANTITY, null=True, blank=True, validators=[MinValueValidator(0)]
    )
    active = models.BooleanField(_("active"), default=True)

    class Meta:
        ordering = ["quota_node_id", "start_time", "id"]
        verbose_name = _("quota window")
        verbose_name_plural = _("quota windows")
        constraints = [
            models.CheckConstraint(
                condition=Q(quota__isnull=False) | Q(lend_limit__isnull=False),
                name="window_overrides_something",
            ),
            models.CheckConstraint(condition=~Q(start_time=models.F("end_time")), name="window_not_empty"),
        ]

    def __str__(self):
        return f"{self.quota_node}: {self.name}"


class SlurmSyncRun(models.Model):
    """One run of the Slurm accounts sync on one cluster (docs/backends.md, "Native Slurm users"):
    the ``sacctmgr`` commands it ran (or would run, ``dry_run``), the differences it found between
    the portal and Slurm with their values before and after (``drift``), what it could not express
    in Slurm (``notes``) and what failed (``error``)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="slurm_sync_runs")
    started_at = models.DateTimeField(_("started at"))
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    dry_run = models.BooleanField(_("dry run"), default=False)
    commands = models.JSONField(_("commands"), default=list, blank=True)
    drift = models.JSONField(_("drift"), default=list, blank=True)
    notes = models.JSONField(_("notes"), default=list, blank=True)
    error = models.TextField(_("error"), blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]
        verbose_name = _("Slurm accounts sync")
        verbose_name_plural = _("Slurm accounts syncs")
        indexes = [models.Index(fields=["cluster", "started_at"])]

    def __str__(self):
        return f"{self.cluster} {self.started_at:%Y-%m-%d %H:%M:%S}"


FAIR_WEIGHT_MAX = Decimal("1000000")


class FairShareWeight(models.Model):
    """An admin's fair-share weight for one node of the tree (DESIGN §16): the node's ``shares``
    instead of its default (its quota in normalised cards, summed over flavors). No row: the
    default. One row per department or project; deleting it returns the node to the default."""

    department = models.OneToOneField(Department, null=True, blank=True, on_delete=models.CASCADE,
                                      related_name="fair_share_weight")
    project = models.OneToOneField(Project, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="fair_share_weight")
    weight = models.DecimalField(_("fair-share weight"), **QUANTITY)
    set_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    set_at = models.DateTimeField(_("set at"))

    class Meta:
        verbose_name = _("fair-share weight")
        verbose_name_plural = _("fair-share weights")
        constraints = [
            models.CheckConstraint(condition=Q(department__isnull=True) ^ Q(project__isnull=True),
                                   name="fairshareweight_one_owner"),
            models.CheckConstraint(condition=Q(weight__gt=0, weight__lte=FAIR_WEIGHT_MAX),
                                   name="fairshareweight_positive"),
        ]

    def __str__(self):
        return f"{self.department or self.project}: {self.weight}"
