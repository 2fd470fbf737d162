"""Usage ledger, rates, month closes and statements (DESIGN §7).

The ledger and closed statements are append-only; database triggers (migration 0002) refuse
an UPDATE or DELETE of a ledger row, of a month close, and of a closed statement or its
lines, so no code path — admin, shell, a future bug — can rewrite what was billed.
"""

from decimal import Decimal

from django.conf import settings
from django.contrib.postgres.indexes import BrinIndex
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from jobs.models import Job, PriorityClass
from portal.models import Department, Project, User
from quotas.models import Flavor

CARD_SECONDS = {"max_digits": 22, "decimal_places": 6}
MONEY = {"max_digits": 16, "decimal_places": 2}
PRICE = {"max_digits": 12, "decimal_places": 4}
# Core-seconds and MiB-seconds of an allocation (DESIGN §15 "Metering"): 6 places like card-seconds
# (a millicore for a microsecond rounds away, nothing billable does); MiB-seconds need more digits.
CORE_SECONDS = {"max_digits": 22, "decimal_places": 6}
MIB_SECONDS = {"max_digits": 26, "decimal_places": 6}


def default_currency() -> str:
    return settings.GPUPOOL["CURRENCY"]


class Tier(models.TextChoices):
    STANDARD = "standard", _("In quota")
    ON_LOAN = "on_loan", _("On loan")
    RESERVED = "reserved", _("Reserved quota")


USAGE_TIERS = (Tier.STANDARD, Tier.ON_LOAN)


class Resource(models.TextChoices):
    """What a rate prices (DESIGN §15 "Metering"): card-hours, or the CPU and memory a job asked
    beyond the share its cards include — core-hours and GiB-hours."""

    CARD = "card", _("card-hours")
    CORE = "core", _("core-hours beyond the share")
    GIB = "gib", _("GiB-hours beyond the share")


class UsageRecord(models.Model):
    """Card-seconds of one job in one [segment_start, segment_end) inside one local hour.

    Append-only, corrected by new rows (DESIGN §7 "Facts and corrections"). A *charge* row has
    ``reverses`` empty and card-seconds ≥ 0; its natural key is (job, segment_start, revision):
    a job's live segments are disjoint, so their starts are unique, and a start fixes the hour,
    the tier and the department. When a late fact changes a metered segment, the meter writes a
    *reversal* — the same key, the negated card-seconds, ``reverses`` naming the charge (once
    only) — and the corrected charge with the next revision. A job's net rows are its usage."""

    # No database-level foreign keys (db_constraint=False): every value is read from the job and
    # its project in the very statement that inserts the row, and the deferred FK checks cost
    # three quarters of the meter's time at a million rows a month. Deletion stays PROTECTed by
    # Django, and a job with events cannot be deleted at all (JobEvent keeps its FK).
    job = models.ForeignKey(
        Job, on_delete=models.PROTECT, related_name="usage", db_constraint=False, verbose_name=_("job")
    )
    segment_start = models.DateTimeField()
    segment_end = models.DateTimeField()
    hour_start = models.DateTimeField(_("hour"))
    month = models.DateField()  # first day of the site-zone month of hour_start
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    project = models.ForeignKey(
        Project, on_delete=models.PROTECT, related_name="+", db_constraint=False, verbose_name=_("project")
    )
    # The department that owned the project at segment_start (its move history, portal.ProjectMove;
    # the meter cuts segments at moves).
    department = models.ForeignKey(
        Department,
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
        verbose_name=_("department"),
    )
    user = models.ForeignKey(User, on_delete=models.PROTECT, related_name="+", db_constraint=False)
    priority_class = models.ForeignKey(
        PriorityClass, on_delete=models.PROTECT, related_name="+", db_constraint=False
    )
    tier = models.CharField(_("tier"), max_length=10, choices=[(t.value, t.label) for t in USAGE_TIERS])
    # Devices (or slices) held: workers × GPUs per worker.
    gpu_count = models.PositiveIntegerField(_("GPUs"))
    card_seconds = models.DecimalField(_("card-seconds"), **CARD_SECONDS)  # whole-card units (DESIGN §2)
    # The flavor's relative throughput when the row was metered (DESIGN §14): normalised
    # card-seconds = card_seconds × this. A snapshot, so a later profile edit never rewrites
    # history; a reversal carries its charge's factor, a corrected charge the factor of its day.
    relative_throughput = models.DecimalField(
        _("relative throughput"), max_digits=6, decimal_places=3, default=Decimal(1), db_default=Decimal(1)
    )
    # The CPU and memory the allocation held (DESIGN §15 "Metering"): every worker's effective request
    # (its own figures, else its units' share) × the row's seconds — cores, not millicores — and the
    # part beyond the share its cards include (``Job.unit_share`` × units per worker), the only part
    # a core-hour or GiB-hour rate bills. Like the relative throughput, a snapshot when metered: a
    # reversal negates its charge's, a corrected charge has its own. Rows from before: 0.
    core_seconds = models.DecimalField(
        _("core-seconds"), **CORE_SECONDS, default=Decimal(0), db_default=Decimal(0)
    )
    mib_seconds = models.DecimalField(
        _("MiB-seconds"), **MIB_SECONDS, default=Decimal(0), db_default=Decimal(0)
    )
    extra_core_seconds = models.DecimalField(
        _("core-seconds beyond the share"), **CORE_SECONDS, default=Decimal(0), db_default=Decimal(0)
    )
    extra_mib_seconds = models.DecimalField(
        _("MiB-seconds beyond the share"), **MIB_SECONDS, default=Decimal(0), db_default=Decimal(0)
    )
    revision = models.PositiveSmallIntegerField(default=0)  # 0, then 1, 2, … for corrected charges
    reverses = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="reversals",
        db_constraint=False,
        db_index=False,  # the partial unique constraint below is its index
    )
    metered_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        verbose_name = _("usage record")
        verbose_name_plural = _("usage records")
        constraints = [
            models.UniqueConstraint(
                fields=["job", "segment_start", "revision"],
                condition=Q(reverses__isnull=True),
                name="usage_natural_key",
            ),
            models.CheckConstraint(
                condition=Q(segment_end__gt=models.F("segment_start")), name="usage_segment_not_empty"
            ),
            # Partial, so that no plan reads "reverses IS NULL" (every charge) through it.
            models.UniqueConstraint(
                fields=["reverses"], condition=Q(reverses__isnull=False), name="usage_reversed_once"
            ),
            models.CheckConstraint(
                condition=Q(reverses__isnull=True, card_seconds__gte=0)
                | Q(reverses__isnull=False, card_seconds__lte=0),
                name="usage_charge_positive_reversal_negative",
            ),
            # The same sign rule for CPU and memory, and the part beyond the share never exceeds
            # the whole.
            models.CheckConstraint(
                condition=Q(
                    reverses__isnull=True,
                    extra_core_seconds__gte=0,
                    extra_mib_seconds__gte=0,
                    core_seconds__gte=models.F("extra_core_seconds"),
                    mib_seconds__gte=models.F("extra_mib_seconds"),
                )
                | Q(
                    reverses__isnull=False,
                    extra_core_seconds__lte=0,
                    extra_mib_seconds__lte=0,
                    core_seconds__lte=models.F("extra_core_seconds"),
                    mib_seconds__lte=models.F("extra_mib_seconds"),
                ),
                name="usage_machine_charge_positive_reversal_negative",
            ),
        ]
        # BRIN: the meter appends hour after hour, so a month's rows sit in a run of blocks; a
        # block-range index finds them at almost no cost per insert (a B-tree costs ~20 %).
        indexes = [BrinIndex(fields=["month"], name="usage_month_brin")]

    def __str__(self):
        return f"{self.job_id} {self.segment_start:%Y-%m-%d %H:%M} {self.card_seconds}"


class UsageDay(models.Model):
    """The ledger summed per local day and per (department, project, user, flavor, priority
    class, job kind, tier): what the usage explorer reads (issue 24), so a month of a million
    ledger rows is a few thousand sums. Written by the meter in the same transaction as the
    ledger rows it sums (``billing.rollup``), so it always equals the ledger; rebuilt from the
    ledger by migration 0009. ``first_hour`` / ``last_hour``: the first and last local hour of
    the rows summed (a day with a rate change inside it is priced from the ledger instead)."""

    day = models.DateField()
    month = models.DateField()
    department_id = models.BigIntegerField()
    project_id = models.BigIntegerField()
    user_id = models.BigIntegerField()
    flavor_id = models.BigIntegerField()
    priority_class_id = models.BigIntegerField()
    kind = models.CharField(max_length=12)
    tier = models.CharField(max_length=10)
    card_seconds = models.DecimalField(**CARD_SECONDS)
    normalised_seconds = models.DecimalField(max_digits=26, decimal_places=9)
    core_seconds = models.DecimalField(**CORE_SECONDS, default=Decimal(0), db_default=Decimal(0))
    mib_seconds = models.DecimalField(**MIB_SECONDS, default=Decimal(0), db_default=Decimal(0))
    extra_core_seconds = models.DecimalField(**CORE_SECONDS, default=Decimal(0), db_default=Decimal(0))
    extra_mib_seconds = models.DecimalField(**MIB_SECONDS, default=Decimal(0), db_default=Decimal(0))
    first_hour = models.DateTimeField()
    last_hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["day", "department_id", "project_id", "user_id", "flavor_id", "priority_class_id",
                        "kind", "tier"],
                name="usageday_key",
            )
        ]

    def __str__(self):
        return f"{self.day} {self.project_id} {self.card_seconds}"


class MeterState(models.Model):
    """The meter's cursor (one row): everything before ``metered_through`` is in the ledger.
    ``open_jobs`` held GPUs at that instant and are continued by the next run."""

    metered_through = models.DateTimeField(null=True, blank=True)
    open_jobs = models.JSONField(default=list, blank=True)
    # The recorded-order cursor: the transaction snapshot (``txid_current_snapshot()``) the last
    # complete run started from. Events whose transaction it does not see are new to the next run,
    # whatever their ``occurred_at``.
    events_seen = models.TextField(blank=True)
    events_seen_id = models.BigIntegerField(default=0)  # and the highest event id that snapshot saw
    # The snapshot's own transaction, if it had one: its events are visible to it, not in progress.
    events_seen_xid = models.BigIntegerField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_rows = models.PositiveIntegerField(default=0)

    def __str__(self):
        return f"metered through {self.metered_through}"


class Rate(models.Model):
    """单价: price per card-hour of a flavor and tier from ``valid_from`` until the next rate
    of the same flavor, tier and resource. Rates start on a site-zone hour and are never edited: a
    new price is a new row. ``resource`` core / gib: a price per core-hour / GiB-hour of what a
    job asked beyond the share its cards include (DESIGN §15); without such a rate that part is
    not billed (the card price includes the share, and nothing more is priced)."""

    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="rates")
    tier = models.CharField(_("tier"), max_length=10, choices=Tier.choices)
    resource = models.CharField(
        _("priced per"), max_length=4, choices=Resource.choices, default=Resource.CARD,
        db_default=Resource.CARD,
    )
    price = models.DecimalField(_("price per unit-hour"), **PRICE, validators=[MinValueValidator(0)])
    currency = models.CharField(_("currency"), max_length=3, default=default_currency)
    valid_from = models.DateTimeField(_("valid from"))
    note = models.CharField(_("note"), max_length=200, blank=True)
    created_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["flavor_id", "tier", "resource", "valid_from"]
        verbose_name = _("rate")
        verbose_name_plural = _("rates")
        constraints = [
            models.UniqueConstraint(
                fields=["flavor", "tier", "resource", "valid_from"], name="rate_unique_start"
            ),
            models.CheckConstraint(condition=Q(price__gte=0), name="rate_price_ge_0"),
        ]

    def __str__(self):
        per = "" if self.resource == Resource.CARD else f"/{self.resource}"
        since = f"{self.valid_from:%Y-%m-%d %H:%M}"
        return f"{self.flavor} {self.tier}{per} {self.price} {self.currency} from {since}"


class MonthClose(models.Model):
    """A closed month. Ledger rows with ``id ≤ through_record`` were billed by the time it
    closed; a row of a closed month metered later is late and becomes an adjustment line in the
    next month that closes (the "invoiced through" cursor)."""

    month = models.DateField(_("month"), unique=True)
    through_record = models.BigIntegerField(_("billed through ledger row"))
    closed_at = models.DateTimeField(_("closed"))
    closed_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", verbose_name=_("closed by")
    )

    class Meta:
        ordering = ["month"]
        verbose_name = _("month close")
        verbose_name_plural = _("month closes")

    def __str__(self):
        return f"{self.month:%Y-%m} closed through #{self.through_record}"


class StatementState(models.TextChoices):
    DRAFT = "draft", _("Draft")
    CLOSED = "closed", _("Closed")


class Statement(models.Model):
    """账单: one department, one month. Draft statements may be rebuilt; closed ones never change."""

    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="statements")
    month = models.DateField(_("month"))
    state = models.CharField(
        _("state"), max_length=10, choices=StatementState.choices, default=StatementState.DRAFT
    )
    currency = models.CharField(_("currency"), max_length=3, default=default_currency)
    total = models.DecimalField(_("total"), **MONEY, default=Decimal("0.00"))
    # GPUPOOL["PRICE_NORMALISED_CARD_HOURS"] when the statement was built: its usage lines' rates
    # are then per normalised card-hour (DESIGN §14). Kept, so a closed statement reads the same
    # after the centre changes the setting.
    priced_normalised = models.BooleanField(
        _("priced per normalised card-hour"), default=False, db_default=False
    )
    created_at = models.DateTimeField(auto_now_add=True)
    closed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-month", "department__code"]
        verbose_name = _("statement")
        verbose_name_plural = _("statements")
        constraints = [
            models.UniqueConstraint(
                fields=["department", "month"], name="statement_one_per_department_month"
            ),
            models.CheckConstraint(
                condition=Q(state=StatementState.DRAFT) | Q(closed_at__isnull=False),
                name="statement_closed_has_time",
            ),
        ]

    def __str__(self):
        return f"{self.department.code} {self.month:%Y-%m} ({self.state})"


class LineKind(models.TextChoices):
    USAGE = "usage", _("Usage")
    ADJUSTMENT = "adjustment", _("Correction of a closed month")
    LENDER_CREDIT = "lender_credit", _("Credit for lent capacity")
    RESERVED = "reserved", _("Reserved quota fee")
    MANUAL = "manual", _("Manual adjustment")


class StatementLine(models.Model):
    statement = models.ForeignKey(Statement, on_delete=models.CASCADE, related_name="lines")
    kind = models.CharField(max_length=14, choices=LineKind.choices)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    user = models.ForeignKey(User, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    flavor = models.ForeignKey(Flavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    tier = models.CharField(max_length=10, choices=Tier.choices, blank=True)  # "" on a manual line
    original_month = models.DateField(null=True, blank=True)  # adjustments: the month the usage is from
    rate = models.ForeignKey(Rate, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    unit_price = models.DecimalField(**PRICE, null=True, blank=True)
    period_start = models.DateTimeField()  # first and last hour of usage on the line
    period_end = models.DateTimeField()
    card_seconds = models.DecimalField(**CARD_SECONDS)  # exact; negative on a credit
    card_hours = models.DecimalField(max_digits=20, decimal_places=6)  # for reading; amount uses seconds
    # Σ card-seconds × the rows' relative throughput (标准卡时, DESIGN §14); empty on lines not
    # drawn from the ledger (reserved fees, lender credits, manual lines).
    normalised_card_seconds = models.DecimalField(max_digits=26, decimal_places=9, null=True, blank=True)
    normalised_card_hours = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    # What the line bills (DESIGN §15): card-hours, or CPU / memory beyond the share. A core line
    # carries its core-seconds (and 0 card-seconds), a GiB line its MiB-seconds; the others, none.
    resource = models.CharField(max_length=4, choices=Resource.choices, default=Resource.CARD,
                                db_default=Resource.CARD)
    core_seconds = models.DecimalField(**CORE_SECONDS, null=True, blank=True)  # exact; amount uses it
    core_hours = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    mib_seconds = models.DecimalField(**MIB_SECONDS, null=True, blank=True)  # exact; amount uses it
    gib_hours = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    amount = models.DecimalField(**MONEY, null=True, blank=True)  # None only on an unpriced draft line
    # Manual lines: the approved adjustment they bill (its reason and attachment name are read
    # from it); such a line has a fixed amount and no flavor, tier, rate or card-hours.
    manual = models.ForeignKey(
        "ManualAdjustment", null=True, blank=True, on_delete=models.PROTECT, related_name="lines"
    )

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind=LineKind.ADJUSTMENT, original_month__isnull=False)
                | (~Q(kind=LineKind.ADJUSTMENT) & Q(original_month__isnull=True)),
                name="line_adjustment_has_original_month",
            ),
            models.CheckConstraint(
                condition=Q(kind=LineKind.MANUAL, manual__isnull=False, amount__isnull=False)
                | (~Q(kind=LineKind.MANUAL) & Q(manual__isnull=True, flavor__isnull=False)),
                name="line_manual_has_adjustment",
            ),
        ]

    def __str__(self):
        return f"{self.statement_id}: {self.kind} {self.flavor_id} {self.tier} {self.amount}"


# --- manual adjustments (DESIGN §7 "Facts and corrections"; docs/manual-adjustments.md) ----------

MANUAL_AMOUNT_MAX = Decimal("100000000.00")  # 1e8 CNY a line: far above any real one, far below MONEY


class ManualKind(models.TextChoices):
    CREDIT = "credit", _("Credit")
    DEBIT = "debit", _("Debit")


class ManualState(models.TextChoices):
    PROPOSED = "proposed", _("Waiting for approval")
    APPROVED = "approved", _("Approved")
    REJECTED = "rejected", _("Rejected")


class ManualAdjustment(models.Model):
    """A credit or debit finance adds by hand, billed once approved by a second person.

    ``amount`` is the magnitude (> 0); ``kind`` gives the sign on the statement (a credit is
    negative). Never edited: the only change a row sees is its one decision (a database trigger,
    migration 0007, refuses anything else and any DELETE); a mistake is corrected by another
    adjustment. ``month`` is the first open month at approval; the line goes on the first statement
    of its department built for that month or a later one (``billing.manual.manual_lines``)."""

    department = models.ForeignKey(
        Department, on_delete=models.PROTECT, related_name="+", verbose_name=_("department")
    )
    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.PROTECT, related_name="+", verbose_name=_("project")
    )
    kind = models.CharField(_("credit or debit"), max_length=6, choices=ManualKind.choices)
    amount = models.DecimalField(_("amount"), **MONEY)
    currency = models.CharField(_("currency"), max_length=3, default=default_currency)
    reason = models.CharField(_("reason"), max_length=500)
    attachment = models.CharField(_("attachment"), max_length=200, blank=True)
    state = models.CharField(
        _("state"), max_length=10, choices=ManualState.choices, default=ManualState.PROPOSED
    )
    proposed_by = models.ForeignKey(
        User, on_delete=models.PROTECT, related_name="+", verbose_name=_("proposed by")
    )
    proposed_at = models.DateTimeField(_("proposed"))
    decided_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.PROTECT, related_name="+", verbose_name=_("decided by")
    )
    decided_at = models.DateTimeField(_("decided"), null=True, blank=True)
    decision_note = models.CharField(_("note"), max_length=500, blank=True)
    month = models.DateField(_("billed from month"), null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("manual adjustment")
        verbose_name_plural = _("manual adjustments")
        constraints = [
            models.CheckConstraint(
                condition=Q(amount__gt=0, amount__lte=MANUAL_AMOUNT_MAX), name="manual_amount_positive"
            ),
            models.CheckConstraint(condition=~Q(reason=""), name="manual_reason_given"),
            # Segregation of duties, also below every code path.
            models.CheckConstraint(
                condition=~Q(decided_by=models.F("proposed_by")), name="manual_not_decided_by_proposer"
            ),
            models.CheckConstraint(
                condition=Q(state=ManualState.PROPOSED, decided_by__isnull=True, decided_at__isnull=True,
                            month__isnull=True)
                | Q(state=ManualState.APPROVED, decided_by__isnull=False, decided_at__isnull=False,
                    month__isnull=False)
                | Q(state=ManualState.REJECTED, decided_by__isnull=False, decided_at__isnull=False,
                    month__isnull=True),
                name="manual_decision_complete",
            ),
        ]

    def __str__(self):
        return f"{self.department_id} {self.kind} {self.amount} ({self.state})"

    @property
    def signed_amount(self) -> Decimal:
        return -self.amount if self.kind == ManualKind.CREDIT else self.amount


# --- budgets (DESIGN §3.9, docs/billing.md "Budgets") ---------------------------------------

BUDGET_HOURS = {"max_digits": 14, "decimal_places": 2}


BUDGET_AMOUNT_MAX = Decimal("1000000000.00")  # 1e9 in the site currency a month: above any real budget


class Budget(models.Model):
    """预算: a monthly budget of a department (its whole subtree) or of one project, in
    card-hours, in money (``amount`` in ``currency``, the site currency), or both — over budget
    when either is spent. The same amounts apply every calendar month of the site zone; usage
    is the ledger plus the not yet metered tail of the month (``billing.budgets``)."""

    department = models.ForeignKey(
        Department,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="budgets",
        verbose_name=_("department"),
    )
    project = models.ForeignKey(
        Project,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="budgets",
        verbose_name=_("project"),
    )
    card_hours = models.DecimalField(
        _("card-hours per month"),
        **BUDGET_HOURS,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.01"))],
    )
    amount = models.DecimalField(
        _("amount per month"), **MONEY, null=True, blank=True, validators=[MinValueValidator(Decimal("0.01"))]
    )
    currency = models.CharField(_("currency"), max_length=3, default=default_currency)
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["id"]
        verbose_name = _("budget")
        verbose_name_plural = _("budgets")
        constraints = [
            models.CheckConstraint(
                condition=Q(department__isnull=False, project__isnull=True)
                | Q(department__isnull=True, project__isnull=False),
                name="budget_one_owner",
            ),
            models.CheckConstraint(
                condition=Q(card_hours__isnull=True) | Q(card_hours__gt=0), name="budget_card_hours_gt_0"
            ),
            models.CheckConstraint(
                condition=Q(amount__isnull=True) | Q(amount__gt=0, amount__lte=BUDGET_AMOUNT_MAX),
                name="budget_amount_in_range",
            ),
            models.CheckConstraint(
                condition=Q(card_hours__isnull=False) | Q(amount__isnull=False), name="budget_has_a_limit"
            ),
            models.UniqueConstraint(
                fields=["department"], condition=Q(department__isnull=False), name="budget_one_per_department"
            ),
            models.UniqueConstraint(
                fields=["project"], condition=Q(project__isnull=False), name="budget_one_per_project"
            ),
        ]

    def __str__(self):
        limits = [f"{self.card_hours} card-hours"] if self.card_hours is not None else []
        limits += [f"{self.amount} {self.currency}"] if self.amount is not None else []
        return f"{self.owner}: {' + '.join(limits)}/month"

    @property
    def owner(self):
        return self.project if self.project_id else self.department

    @property
    def key(self) -> tuple[str, int]:
        return ("project", self.project_id) if self.project_id else ("department", self.department_id)


class AlertUnit(models.TextChoices):
    CARD_HOURS = "card_hours", _("card-hours")
    MONEY = "money", _("money")
    FORECAST = "forecast", _("forecast")  # "at this rate the budget runs out on D" (threshold 100)


class BudgetAlert(models.Model):
    """A budget threshold crossed in a month, per unit (card-hours, money) — or the forecast
    alert, once a month. The natural key (budget, month, unit, threshold) makes the alert task
    idempotent: the notification is written with the row that wins the insert, so a re-run, or
    two workers at once, never notify twice."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    month = models.DateField()
    unit = models.CharField(max_length=10, choices=AlertUnit.choices, default=AlertUnit.CARD_HOURS)
    threshold = models.PositiveSmallIntegerField()  # percent: 80 or 100
    used_card_hours = models.DecimalField(max_digits=16, decimal_places=2, null=True, blank=True)
    budget_card_hours = models.DecimalField(**BUDGET_HOURS, null=True, blank=True)
    used_amount = models.DecimalField(**MONEY, null=True, blank=True)
    budget_amount = models.DecimalField(**MONEY, null=True, blank=True)
    runs_out_on = models.DateField(null=True, blank=True)  # forecast alerts: the site-zone date
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["budget", "month", "unit", "threshold"], name="budget_alert_natural_key"
            ),
        ]

    def __str__(self):
        return f"{self.budget_id} {self.month:%Y-%m} {self.unit} ≥ {self.threshold} %"


class WhatIfState(models.TextChoices):
    QUEUED = "queued", _("Queued")
    RUNNING = "running", _("Running")
    DONE = "done", _("Done")
    FAILED = "failed", _("Failed")


class WhatIfChange(models.TextChoices):
    LEND = "lend", _("Lend quota during some hours")
    OVERCOMMIT = "overcommit", _("Raise an overcommit ratio")
    NO_BACKFILL = "no_backfill", _("Backfill off")
    NO_BORROWING = "no_borrowing", _("Borrowing off")


class WhatIfRun(models.Model):
    """策略推演: one what-if — a past month's jobs replayed twice (current configuration, then
    with ``change``) by ``billing.whatif``; the page polls ``progress`` until ``state`` is done."""

    created_by = models.ForeignKey(User, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    month = models.DateField()  # first day of the replayed site-zone month
    change = models.CharField(max_length=20, choices=WhatIfChange.choices)
    params = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=10, choices=WhatIfState.choices, default=WhatIfState.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    step = models.CharField(max_length=200, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("what-if run")
        verbose_name_plural = _("what-if runs")

    def __str__(self):
        return f"what-if #{self.pk} {self.month:%Y-%m} {self.change} ({self.state})"


class MonthCloseRun(models.Model):
    """A month close asked for on the Statements page (issue 32 item 9): the Celery task
    ``billing.close_month`` runs ``statement_close_month`` for it in the background, and the
    page that asked polls ``state`` / ``step`` and shows the report or why it failed.

    At most one run per month is queued or running (the partial unique constraint): a second
    click, a second finance user, a retry in a second tab find the one already under way. The
    close itself is idempotent (one ``MonthClose`` per month, one statement per department and
    month): a run of a month that closed meanwhile reports the existing close."""

    month = models.DateField(_("month"))  # first day of the site-zone month
    requested_by = models.ForeignKey(
        User, null=True, on_delete=models.SET_NULL, related_name="+", verbose_name=_("requested by")
    )
    requested_at = models.DateTimeField(_("requested"), auto_now_add=True)
    state = models.CharField(
        _("state"), max_length=10, choices=WhatIfState.choices, default=WhatIfState.QUEUED
    )
    step = models.CharField(max_length=200, blank=True)  # an English source text, shown translated
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    report = models.JSONField(null=True, blank=True)  # billing.services.CloseReport as a dict
    # The asker's language: the close runs in it, so its refusals ("No rate covers: …") reach the
    # page that asked in the words it was asked in.
    language = models.CharField(max_length=10, blank=True)
    error = models.TextField(blank=True)  # why it failed, for the person who asked
    details = models.TextField(blank=True)  # a traceback, for the operators (unexpected failures)

    class Meta:
        ordering = ["-id"]
        verbose_name = _("month close run")
        verbose_name_plural = _("month close runs")
        constraints = [
            models.UniqueConstraint(
                fields=["month"],
                condition=Q(state__in=["queued", "running"]),
                name="billing_one_live_close_run_per_month",
            )
        ]

    def __str__(self):
        return f"close {self.month:%Y-%m} ({self.state})"
