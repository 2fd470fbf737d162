"""The usage explorer (issue 24, the portal's ``sacct``/``sreport``): card-hours, normalised
card-hours, cost, utilisation and queue waits of any date range, grouped by one or two of
department, project, user, flavor, job kind and priority class.

Every figure is one GROUP BY in PostgreSQL limited by the viewer's scope (``ReportScope``, from
``portal.selectors.scope_for``), as on the reports page:

* core-hours and GiB-hours (DESIGN §15): the CPU and memory those rows' allocations held, from
  the same rows; their cost is in ``cost`` where a core-hour / GiB-hour rate prices the part
  beyond the share (as on the statement).
* card-hours and normalised card-hours (标准卡时, DESIGN §14): the ledger rows whose local hour
  lies in [start, end). The range is whole local days and the ledger is cut at local hours, so
  the cut is exact. Ledger rows are grouped by what they were billed to (department, project,
  user, flavor, priority class); the job kind is the job's.
* cost: the same ledger rows priced as statements price usage lines — per month, department,
  project, user, flavor and tier (and the grouping's own columns), split at rate changes, each
  line rounded once by ``pricing.money`` — and the rounded lines summed per row. Grouped by
  department, project, user or flavor, a whole month's row therefore equals the statement's usage
  lines; reserved-quota fees, lender credits, manual adjustments and adjustments of earlier
  months are not usage of the range and are left out. Money is shown only to those who see
  statements (``selectors.statement_departments``) and covers only those departments' rows.
* utilisation: from the GPU samples (one per job and minute) in the range — sampled card-hours
  and effective card-hours (Σ card-hours × utilisation); jobs without samples count nowhere. The
  range's whole UTC hours are read from each job's hourly sums (``jobs.GpuSampleHour``, kept by a
  trigger on the samples), the parts of hours at its edges from the samples.
* queue wait: jobs admitted in the range, from their latest entry into the queue to admission
  (as the reports page's box plot), mean and 95th percentile in minutes — read from the
  admissions' own rows (``jobs.AdmissionWait``, one per admission, kept by a trigger on the event
  log), not from a window over the events at each request.

Job-based figures (utilisation, waits) group by the job's project's department now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.utils.translation import gettext_lazy as _

from jobs.models import JobKind, PriorityClass
from portal.models import Department, Project, User
from quotas.models import Flavor
from quotas.selectors import site_zone

from . import pricing
from .lines import EARLIEST, prices_normalised, rate_schedules, schedule_of
from .meter import meter_state
from .periods import HOUR, month_of
from .reports import ReportScope
from .selectors import statement_departments

# name → (ledger column, job column, label): the ledger's daily sums (``UsageDay``) carry the kind.
DIMENSIONS = {
    "department": ("u.department_id", "p.department_id", _("Department")),
    "project": ("u.project_id", "j.project_id", _("Project")),
    "user": ("u.user_id", "j.submitted_by_id", _("User")),
    "flavor": ("u.flavor_id", "j.flavor_id", _("Flavor")),
    "kind": ("u.kind", "j.kind", _("Kind")),
    "priority": ("u.priority_class_id", "j.priority_class_id", _("Priority class")),
}
MAX_LEVELS = 2
WAIT_P95 = 0.95


@dataclass(frozen=True)
class UsageQuery:
    start: datetime  # aware, a local midnight
    end: datetime  # exclusive
    group_by: tuple[str, ...]  # one or two of DIMENSIONS

    def __post_init__(self):
        if not 1 <= len(self.group_by) <= MAX_LEVELS or len(set(self.group_by)) != len(self.group_by):
            raise ValueError("group by one or two different dimensions")
        if any(g not in DIMENSIONS for g in self.group_by):
            raise ValueError(f"unknown dimension in {self.group_by!r}")
        if not self.start < self.end:
            raise ValueError("the range is empty")


@dataclass
class UsageRow:
    key: tuple  # the group's values (ids, or the kind)
    labels: tuple[str, ...] = ()
    card_seconds: Decimal = Decimal(0)
    normalised_seconds: Decimal = Decimal(0)
    core_seconds: Decimal = Decimal(0)  # the CPU and memory the allocations held (DESIGN §15)
    mib_seconds: Decimal = Decimal(0)
    cost: Decimal | None = None  # None: no money shown, or nothing priced
    unpriced: bool = False  # some usage of the row has no rate
    sampled_card_hours: Decimal | None = None
    effective_card_hours: Decimal | None = None
    jobs_started: int = 0
    wait_mean_minutes: float | None = None
    wait_p95_minutes: float | None = None

    @property
    def card_hours(self) -> Decimal:
        return pricing.display_hours(self.card_seconds)

    @property
    def normalised_card_hours(self) -> Decimal:
        return pricing.display_hours(self.normalised_seconds)

    @property
    def core_hours(self) -> Decimal:
        return pricing.display_hours(self.core_seconds)

    @property
    def gib_hours(self) -> Decimal:
        return pricing.display_hours(self.mib_seconds / pricing.MIB_PER_GIB)

    @property
    def utilisation_pct(self) -> Decimal | None:
        if not self.sampled_card_hours:
            return None
        return (self.effective_card_hours / self.sampled_card_hours * 100).quantize(Decimal("0.1"))


@dataclass
class UsageReport:
    query: UsageQuery
    rows: list[UsageRow]
    total: UsageRow
    money: bool  # the viewer sees money (cost columns)
    currency: str
    metered_through: datetime | None = None
    notes: list[str] = field(default_factory=list)


def _scope_sql(scope: ReportScope, dept: str, project: str) -> tuple[str, dict]:
    if scope.everything:
        return "TRUE", {}
    return (
        f"({dept} = ANY(%(scope_depts)s) OR {project} = ANY(%(scope_projects)s))",
        {"scope_depts": sorted(scope.departments), "scope_projects": sorted(scope.projects)},
    )


def _fetch(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _keys(group_by: tuple[str, ...], which: int) -> list[str]:
    return [DIMENSIONS[g][which] for g in group_by]


# Per (group, statement line key, month, rate bucket): the statement's own usage-line sums, from
# the daily sums (``UsageDay``) — except days with a rate change inside them, read from the ledger
# (a day's sum cannot be split at the change). Both halves name their columns alike.
_DAYS = """
SELECT {keys}, u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, u.month,
       min(u.first_hour), max(u.last_hour), sum(u.card_seconds), sum(u.normalised_seconds),
       sum(u.core_seconds), sum(u.mib_seconds), sum(u.extra_core_seconds), sum(u.extra_mib_seconds)
FROM billing_usageday u
WHERE u.day >= %(first_day)s AND u.day < %(end_day)s AND u.day <> ALL(%(split_days)s::date[]) AND {where}
GROUP BY {keys}, u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, u.month,
         width_bucket(u.first_hour, %(thresholds)s::timestamptz[])
HAVING sum(u.card_seconds) <> 0 OR sum(u.normalised_seconds) <> 0 OR sum(u.core_seconds) <> 0
    OR sum(u.mib_seconds) <> 0
"""
_SPLIT_DAYS = """
SELECT {keys}, u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, u.month,
       min(u.hour_start), max(u.hour_start), sum(u.card_seconds), sum(u.card_seconds * u.relative_throughput),
       sum(u.core_seconds), sum(u.mib_seconds), sum(u.extra_core_seconds), sum(u.extra_mib_seconds)
FROM (SELECT r.*, j.kind FROM billing_usagerecord r JOIN jobs_job j ON j.id = r.job_id
      WHERE r.month >= %(first_month)s AND r.month <= %(last_month)s
        AND (r.hour_start AT TIME ZONE %(tz)s)::date = ANY(%(split_days)s::date[])) u
WHERE u.hour_start >= %(start)s AND u.hour_start < %(end)s AND {where}
GROUP BY {keys}, u.department_id, u.project_id, u.user_id, u.flavor_id, u.tier, u.month,
         width_bucket(u.hour_start, %(thresholds)s::timestamptz[])
HAVING sum(u.card_seconds) <> 0 OR sum(u.card_seconds * u.relative_throughput) <> 0
    OR sum(u.core_seconds) <> 0 OR sum(u.mib_seconds) <> 0
"""

# Sampled and effective card-hours: each minute's sample holds ``gpus`` devices of the job's
# flavor (a fraction of a card each, as the meter counts them) at the mean utilisation. The
# sources give each job's Σ gpus and Σ gpus × utilisation; the job's card fraction is applied
# here, once per job and source — the sums over every sample, added in another order (equal at
# the six decimals shown; tests/billing/test_usage_sample_hours.py).
_SAMPLES = """
SELECT {keys}, (sum(c.cards) / 60)::numeric, (sum(c.cards_util) / 6000)::numeric
FROM (SELECT j.project_id, j.submitted_by_id, j.flavor_id, j.kind, j.priority_class_id, p.department_id,
             x.gpus * f.fraction_numerator * coalesce(j.gpu_milli, 1000)::float8
                 / (f.fraction_denominator * 1000) AS cards,
             x.gpu_util * f.fraction_numerator * coalesce(j.gpu_milli, 1000)::float8
                 / (f.fraction_denominator * 1000) AS cards_util
      FROM ({sources}) x
      JOIN jobs_job j ON j.id = x.job_id
      JOIN portal_project p ON p.id = j.project_id
      JOIN quotas_flavor f ON f.id = j.flavor_id
      WHERE {where}) c
GROUP BY GROUPING SETS (({keys}), ())
"""
# The range's whole UTC hours, from the jobs' hourly sums (``jobs.GpuSampleHour``, kept by a
# trigger on the samples): a month is millions of samples and 60 times fewer hours (issue 24).
_SAMPLE_HOURS = """
SELECT h.job_id, sum(h.gpus)::float8 AS gpus, sum(h.gpu_util) AS gpu_util
FROM jobs_gpusamplehour h
WHERE h.hour >= %(hours_from)s AND h.hour < %(hours_to)s
GROUP BY h.job_id
"""
# A part of an hour at an edge of the range (a site zone whose midnight is not on a UTC hour: at
# +05:30 it is at half past), from the samples themselves — of the jobs that have samples in that
# hour, found by their hourly sums, so the (job, minute) index reads them, not a scan of the table.
_SAMPLE_MINUTES = """
SELECT s.job_id, s.gpus::float8, s.gpus * s.gpu_util_pct
FROM jobs_gpusamplehour e
JOIN jobs_jobgpusample s
  ON s.job_id = e.job_id AND s.minute >= e.hour AND s.minute < e.hour + interval '1 hour'
WHERE e.hour >= %({edge}_hour)s AND e.hour < %({edge}_to)s
  AND s.minute >= %({edge}_from)s AND s.minute < %({edge}_to)s
"""

# Admissions in the range and the wait before each (reports.queue_waits' definition), from the
# admissions' own rows (``jobs.AdmissionWait``, kept by a trigger on the event log): the window over
# the range's events and the join to every job cost most of the page (issue 24).
_WAITS = """
SELECT {keys}, count(*), avg(w.wait_minutes), percentile_cont(%(p95)s) WITHIN GROUP (ORDER BY w.wait_minutes)
FROM jobs_admissionwait w
JOIN portal_project p ON p.id = w.project_id
WHERE w.admitted_at >= %(start)s AND w.admitted_at < %(end)s AND {where}
GROUP BY GROUPING SETS (({keys}), ())
"""
# name → the admission row's column (the department is the project's now).
_WAIT_COLUMNS = {
    "department": "p.department_id",
    "project": "w.project_id",
    "user": "w.user_id",
    "flavor": "w.flavor_id",
    "kind": "w.kind",
    "priority": "w.priority_class_id",
}


def usage_report(user: User, query: UsageQuery, currency: str) -> UsageReport:
    """The rows of ``query`` within ``user``'s scope, ordered by card-hours (largest first),
    and their total. Nothing outside the scope is read."""
    scope = ReportScope.of(user)
    money_departments = statement_departments(user)
    money = money_departments is None or bool(money_departments)
    rows: dict[tuple, UsageRow] = {}
    total = UsageRow(key=())
    if not scope.empty:
        _ledger(scope, query, rows, total, money_departments if money else frozenset())
        _samples(scope, query, rows, total)
        _waits(scope, query, rows, total)
    ordered = sorted(rows.values(), key=lambda r: (-r.card_seconds, str(r.key)))
    _label(query.group_by, ordered)
    return UsageReport(query, ordered, total, money, currency)


def _row(rows: dict, key: tuple) -> UsageRow:
    found = rows.get(key)
    if found is None:
        found = rows[key] = UsageRow(key=key)
    return found


def _split_days(thresholds: list[datetime], first: date, until: date) -> list[date]:
    """The local days in [first, until) with a rate change inside them (not at midnight)."""
    zone = site_zone()
    found = set()
    for at in thresholds[1:]:
        local = at.astimezone(zone)
        if (local.hour, local.minute, local.second, local.microsecond) != (0, 0, 0, 0) and (
            first <= local.date() < until
        ):
            found.add(local.date())
    return sorted(found)


def _ledger(scope, query: UsageQuery, rows: dict, total: UsageRow, money_departments) -> None:
    zone = site_zone()
    levels = len(query.group_by)
    where, params = _scope_sql(scope, "u.department_id", "u.project_id")
    schedules = rate_schedules()
    thresholds = [EARLIEST, *sorted({p.valid_from for ps in schedules.values() for p in ps})]
    keys = ", ".join(_keys(query.group_by, 0))
    first_day, end_day = range_label(query.start, query.end)
    params.update(
        start=query.start,
        end=query.end,
        first_day=first_day,
        end_day=end_day,
        first_month=month_of(query.start, zone),
        last_month=month_of(query.end - HOUR, zone),
        thresholds=thresholds,
        split_days=_split_days(thresholds, first_day, end_day),
        tz=zone.key,
    )
    found = _fetch(_DAYS.format(keys=keys, where=where), params)
    if params["split_days"]:
        found += _fetch(_SPLIT_DAYS.format(keys=keys, where=where), params)
    usages = []
    for record in found:
        key, (dept, project, user, flavor, tier, month, first, last, seconds, normalised, *machine) = (
            tuple(record[:levels]),
            record[levels:],
        )
        cores, mib, extra_cores, extra_mib = machine
        row = _row(rows, key)
        for figures in (row, total):
            figures.card_seconds += seconds
            figures.normalised_seconds += normalised
            figures.core_seconds += cores
            figures.mib_seconds += mib
        if money_departments is None or dept in money_departments:
            line = (key, dept, project, user, flavor, tier, month)
            if seconds or normalised:
                usages.append(pricing.Usage(line, (flavor, tier), first, last + HOUR, seconds, normalised))
            # CPU / memory beyond the share, priced as the statement prices it (billing.lines).
            for resource, extra in ((pricing.CORE, extra_cores), (pricing.GIB, extra_mib)):
                schedule = schedule_of(flavor, tier, resource)
                if extra and schedule in schedules:
                    usages.append(pricing.Usage((*line, resource), schedule, first, last + HOUR, Decimal(0),
                                                None, resource, extra))
    if money_departments is not None and not money_departments:
        return  # no money for this viewer: cost stays None
    total.cost = Decimal("0.00")
    for line in pricing.price(usages, schedules, normalised=prices_normalised()):
        row = rows[line.key[0]]
        if line.amount is None and line.resource != pricing.CARD:
            continue  # CPU / memory in hours no rate of theirs covers: not billed
        if line.amount is None:
            row.unpriced = total.unpriced = True
            continue
        row.cost = (row.cost or Decimal("0.00")) + line.amount
        total.cost += line.amount


def _utc_hour(at: datetime) -> datetime:
    return at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def _whole_hours(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """The whole UTC hours inside [start, end) as [first, last); (end, end) when there is none."""
    first = _utc_hour(start)
    if first < start:
        first += HOUR
    last = _utc_hour(end)
    return (first, last) if first < last else (end, end)


def _sample_sources(start: datetime, end: datetime) -> tuple[str, dict]:
    """The hourly sums of the range's whole UTC hours and the samples of the parts of hours at
    its edges; a source with nothing to read is left out."""
    first, last = _whole_hours(start, end)
    sources, params = [], {}
    if first < last:
        sources.append(_SAMPLE_HOURS)
        params.update(hours_from=first, hours_to=last)
    for edge, (since, until) in (("head", (start, first)), ("tail", (last, end))):
        if since < until:
            sources.append(_SAMPLE_MINUTES.format(edge=edge))
            params.update({f"{edge}_hour": _utc_hour(since), f"{edge}_from": since, f"{edge}_to": until})
    return " UNION ALL ".join(sources), params


def _samples(scope, query: UsageQuery, rows: dict, total: UsageRow) -> None:
    levels = len(query.group_by)
    where, params = _scope_sql(scope, "p.department_id", "j.project_id")
    keys = ", ".join("c." + k.split(".")[1] for k in _keys(query.group_by, 1))
    sources, source_params = _sample_sources(query.start, query.end)
    params.update(source_params)
    for record in _fetch(_SAMPLES.format(keys=keys, sources=sources, where=where), params):
        key, (sampled, effective) = tuple(record[:levels]), record[levels:]
        if sampled is None:
            continue  # no sample at all: the grand total of nothing
        # The grand total is the row whose keys are all NULL (GROUPING SETS' ()); a real key is
        # never NULL (every column is NOT NULL).
        row = total if all(k is None for k in key) else _row(rows, key)
        row.sampled_card_hours = Decimal(sampled).quantize(pricing.HOURS_PLACES)
        row.effective_card_hours = Decimal(effective).quantize(pricing.HOURS_PLACES)


def _waits(scope, query: UsageQuery, rows: dict, total: UsageRow) -> None:
    levels = len(query.group_by)
    where, params = _scope_sql(scope, "p.department_id", "w.project_id")
    keys = ", ".join(_WAIT_COLUMNS[g] for g in query.group_by)
    for record in _fetch(
        _WAITS.format(keys=keys, where=where),
        {**params, "start": query.start, "end": query.end, "p95": WAIT_P95},
    ):
        key, (count, mean, p95) = tuple(record[:levels]), record[levels:]
        if not count:
            continue
        row = total if all(k is None for k in key) else _row(rows, key)
        row.jobs_started, row.wait_mean_minutes, row.wait_p95_minutes = count, float(mean), float(p95)


def _label(group_by: tuple[str, ...], rows: list[UsageRow]) -> None:
    """Each row's readable names, one query per dimension."""
    names = []
    for level, dim in enumerate(group_by):
        ids = {r.key[level] for r in rows}
        names.append(_names(dim, ids))
    for row in rows:
        row.labels = tuple(names[i].get(v, str(v)) for i, v in enumerate(row.key))


def _names(dim: str, ids: set) -> dict:
    if dim == "department":
        return {pk: f"{name} ({code})" for pk, code, name in
                Department.objects.filter(pk__in=ids).values_list("pk", "code", "name")}
    if dim == "project":
        return dict(Project.objects.filter(pk__in=ids).values_list("pk", "code"))
    if dim == "user":
        return dict(User.objects.filter(pk__in=ids).values_list("pk", "username"))
    if dim == "flavor":
        return dict(Flavor.objects.filter(pk__in=ids).values_list("pk", "name"))
    if dim == "priority":
        return dict(PriorityClass.objects.filter(pk__in=ids).values_list("pk", "name"))
    return {k: str(JobKind(k).label) if k in JobKind.values else k for k in ids}


def range_label(start: datetime, end: datetime) -> tuple[date, date]:
    """The local dates of [start, end): the first day and the day after the last."""
    zone = site_zone()
    return start.astimezone(zone).date(), end.astimezone(zone).date()


def range_days(start: datetime, end: datetime) -> tuple[date, date]:
    """The local dates of [start, end) as people say them: the first day and the last, included."""
    first, until = range_label(start, end)
    return first, until - timedelta(days=1)


# --- one job's cost so far (registered in jobs.estimates.job_cost_providers) ---------------------

_JOB_LEDGER = """
SELECT u.flavor_id, u.tier, min(u.hour_start), max(u.hour_start), sum(u.card_seconds),
       sum(u.card_seconds * u.relative_throughput), sum(u.extra_core_seconds), sum(u.extra_mib_seconds)
FROM billing_usagerecord u
WHERE u.job_id = %(job)s
GROUP BY u.flavor_id, u.tier, u.month, width_bucket(u.hour_start, %(thresholds)s::timestamptz[])
HAVING sum(u.card_seconds) <> 0 OR sum(u.card_seconds * u.relative_throughput) <> 0
    OR sum(u.extra_core_seconds) <> 0 OR sum(u.extra_mib_seconds) <> 0
"""


@dataclass(frozen=True)
class JobCost:
    metered: Decimal  # the job's ledger rows priced (per flavor, tier, month, rate period; rounded)
    tail: Decimal  # the running job's unmetered time since the meter's cursor, at today's rate
    currency: str
    metered_through: datetime | None
    unpriced: bool

    @property
    def amount(self) -> Decimal:
        return self.metered + self.tail


def job_cost_so_far(job, now: datetime) -> JobCost | None:
    """The job's cost so far: its ledger rows priced as statement lines are (CPU and memory beyond
    the share included, DESIGN §15), plus — while it
    runs — the time since the meter's cursor (or its start, if later) at the rate of its tier in
    force now, rounded by the one rule. None when nothing is priced (no rate, no usage)."""
    schedules = rate_schedules()
    thresholds = [EARLIEST, *sorted({p.valid_from for ps in schedules.values() for p in ps})]
    usages = []
    for flavor, tier, first, last, seconds, normalised, cores, mib in _fetch(
        _JOB_LEDGER, {"job": job.pk, "thresholds": thresholds}
    ):
        usages.append(pricing.Usage((flavor, tier), (flavor, tier), first, last + HOUR, seconds, normalised))
        # CPU / memory beyond the share where a rate prices it, as the statement does (billing.lines).
        for resource, extra in ((pricing.CORE, cores), (pricing.GIB, mib)):
            schedule = schedule_of(flavor, tier, resource)
            if extra and schedule in schedules:
                usages.append(pricing.Usage((flavor, tier, resource), schedule, first, last + HOUR,
                                            Decimal(0), None, resource, extra))
    lines = [line for line in pricing.price(usages, schedules, normalised=prices_normalised())
             if line.resource == pricing.CARD or line.period is not None]
    unpriced = any(line.amount is None for line in lines)
    metered = pricing.total(lines)
    through = meter_state().metered_through
    tail = Decimal("0.00")
    if job.state == "running" and job.started_at is not None:
        since = max(through, job.started_at) if through else job.started_at
        if now > since:
            tier = "on_loan" if job.on_loan else "standard"
            period = pricing.period_at(schedules.get((job.flavor_id, tier), ()), now)
            flavor = job.flavor
            devices = (job.granted_workers or job.workers) * job.gpus_per_worker
            cards = (
                Decimal(devices * flavor.fraction_numerator)
                * Decimal(job.gpu_milli or 1000)
                / Decimal(flavor.fraction_denominator * 1000)
            )
            hours = cards * Decimal((now - since).total_seconds()) / pricing.SECONDS_PER_HOUR
            if prices_normalised():
                hours *= flavor.relative_throughput
            if period is None:
                unpriced = True
            else:
                tail = pricing.cost(hours, period.price)
    if not lines and not tail:
        return None
    return JobCost(metered, tail, settings.GPUPOOL["CURRENCY"], through, unpriced)
