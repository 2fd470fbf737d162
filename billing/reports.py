"""The numbers behind the reports page (DESIGN §7): aggregates computed by PostgreSQL (one
GROUP BY per chart, never a row per job or per sample to Python), each limited by the viewer's
scope from ``portal.selectors.scope_for``.

Scope: platform admins and auditors see everything; department admins and finance their
departments' subtrees; project members and project admins their projects (card-hours,
utilisation, queue waits — never money, as for statements); anyone else nothing. Ledger rows
are scoped by the department they were billed to; job-based figures (utilisation, waits) by
the project's department now.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from django.db import connection

from jobs.models import PriorityClass
from jobs.selectors import quota_usage
from portal.models import User
from portal.selectors import scope_for
from quotas.selectors import site_zone

from .models import MonthClose
from .periods import month_bounds
from .selectors import statement_departments, statement_estimate

TOP_IDLE_JOBS = 10
WAIT_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


@dataclass(frozen=True)
class ReportScope:
    everything: bool
    departments: frozenset[int]  # expanded subtrees (department admin, finance)
    projects: frozenset[int]  # member / project admin

    @classmethod
    def of(cls, user: User) -> ReportScope:
        scope = scope_for(user)
        return cls(scope.sees_everything, scope.department_ids, scope.member_projects)

    @property
    def empty(self) -> bool:
        return not (self.everything or self.departments or self.projects)


@dataclass(frozen=True)
class ReportFilter:
    month: date
    departments: frozenset[int] | None = None  # the chosen department's subtree; None: all
    flavor_id: int | None = None

    def bounds(self) -> tuple[datetime, datetime]:
        return month_bounds(self.month, site_zone())


# The (department, project, flavor) columns a query is scoped and filtered on.
LEDGER = ("u.department_id", "u.project_id", "u.flavor_id")  # the department billed
JOBS = ("p.department_id", "j.project_id", "j.flavor_id")  # the project's department now


def _where(scope: ReportScope, report: ReportFilter, columns: tuple[str, str, str]) -> tuple[str, dict]:
    """The scope and the filters as SQL on ``columns`` (one of the constants above)."""
    dept, project, flavor = columns
    clauses, params = [], {}
    if not scope.everything:
        clauses.append(f"({dept} = ANY(%(scope_depts)s) OR {project} = ANY(%(scope_projects)s))")
        params["scope_depts"] = sorted(scope.departments)
        params["scope_projects"] = sorted(scope.projects)
    if report.departments is not None:
        clauses.append(f"{dept} = ANY(%(filter_depts)s)")
        params["filter_depts"] = sorted(report.departments)
    if report.flavor_id is not None:
        clauses.append(f"{flavor} = %(flavor)s")
        params["flavor"] = report.flavor_id
    return " AND ".join(clauses) or "TRUE", params


def _fetch(sql: str, params: dict) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


# --- (a) card-hours by department and day ----------------------------------------------------

_DAILY = """
SELECT u.department_id, (u.hour_start AT TIME ZONE %(tz)s)::date AS day, sum(u.card_seconds) / 3600
FROM billing_usagerecord u
WHERE u.month = %(month)s AND {where}
GROUP BY u.department_id, day
ORDER BY day, u.department_id
"""


def daily_card_hours(scope: ReportScope, report: ReportFilter) -> list[tuple[int, date, Decimal]]:
    """Metered card-hours per billed department and local day of the month."""
    if scope.empty:
        return []
    where, params = _where(scope, report, LEDGER)
    return _fetch(_DAILY.format(where=where), {**params, "month": report.month, "tz": site_zone().key})


# Portal vs external jobs (DESIGN §11: submitted to a cluster directly, metered like any job).
_SPLIT = """
SELECT u.department_id, sum(u.card_seconds) FILTER (WHERE j.kind <> 'external') / 3600,
       sum(u.card_seconds) FILTER (WHERE j.kind = 'external') / 3600
FROM billing_usagerecord u
JOIN jobs_job j ON j.id = u.job_id
WHERE u.month = %(month)s AND {where}
GROUP BY u.department_id
ORDER BY u.department_id
"""


def external_split(scope: ReportScope, report: ReportFilter) -> list[tuple[int, Decimal, Decimal]]:
    """(billed department, portal jobs' card-hours, external jobs' card-hours) of the month;
    empty when no external job was metered in it (the page then shows no split)."""
    if scope.empty:
        return []
    where, params = _where(scope, report, LEDGER)
    rows = _fetch(_SPLIT.format(where=where), {**params, "month": report.month})
    split = [(d, portal or Decimal(0), external or Decimal(0)) for d, portal, external in rows]
    return split if any(external for _d, _p, external in split) else []


# CPU and memory the allocations held (DESIGN §15), per billed department — from the daily sums
# (the same columns as the ledger's, so LEDGER scopes them).
_MACHINE = """
SELECT u.department_id, sum(u.core_seconds) / 3600, sum(u.mib_seconds) / (1024 * 3600),
       sum(u.extra_core_seconds) / 3600, sum(u.extra_mib_seconds) / (1024 * 3600)
FROM billing_usageday u
WHERE u.month = %(month)s AND {where}
GROUP BY u.department_id
HAVING sum(u.core_seconds) <> 0 OR sum(u.mib_seconds) <> 0
ORDER BY u.department_id
"""


@dataclass(frozen=True)
class MachineHours:
    department_id: int
    core_hours: Decimal
    gib_hours: Decimal
    extra_core_hours: Decimal  # beyond the share the cards include: what core-hour rates bill
    extra_gib_hours: Decimal


def machine_hours(scope: ReportScope, report: ReportFilter) -> list[MachineHours]:
    """Core-hours and GiB-hours of the month per billed department (and the part beyond the
    share); empty when no allocation recorded CPU or memory."""
    if scope.empty:
        return []
    where, params = _where(scope, report, LEDGER)
    rows = _fetch(_MACHINE.format(where=where), {**params, "month": report.month})
    return [MachineHours(*row) for row in rows]


# --- (b) quota vs usage per department (now) --------------------------------------------------


@dataclass(frozen=True)
class QuotaBar:
    department_id: int
    name: str
    quota: Decimal  # effective quota now
    used: Decimal
    borrowed: Decimal
    lent: Decimal


def quota_bars(user: User, report: ReportFilter, flavor_id: int) -> list[QuotaBar]:
    """The visible departments' quota nodes of one flavor with their usage, as the quota tree
    page shows them (``jobs.selectors.quota_usage``). Quotas keep no history: this is now."""
    bars = []
    for row in quota_usage(user, flavor_id):
        tree = row["row"]
        if tree.kind != "department":
            continue
        if report.departments is not None and tree.owner_id not in report.departments:
            continue
        bars.append(
            QuotaBar(
                tree.owner_id,
                tree.node.department.name,
                tree.effective.quota,
                row["used"],
                row["borrowed"],
                row["lent"],
            )
        )
    return bars


# --- (c) utilisation by node and day ----------------------------------------------------------

# Samples are stored per job (jobs/clusters/metrics.py: the mean over the job's GPUs each minute), not per
# node. A job's minutes are attributed to the nodes of its placement, weighted by the GPUs it
# holds on each; the figure is the mean utilisation of the allocated GPUs on a node that day.
# The placement is the job's current (or last) one: a job requeued onto other nodes has its
# earlier minutes drawn on the new ones.
_HEATMAP = """
WITH held AS (
    SELECT j.id AS job_id, (slot->>0)::bigint AS node_id, sum((slot->>2)::numeric) / 1000 AS gpus
    FROM jobs_job j
    JOIN portal_project p ON p.id = j.project_id
    CROSS JOIN LATERAL jsonb_array_elements(j.placement) AS w(worker)
    CROSS JOIN LATERAL jsonb_array_elements(w.worker) AS slot
    WHERE jsonb_typeof(j.placement) = 'array'
      AND (j.started_at IS NULL OR j.started_at < %(end)s)
      AND (j.finished_at IS NULL OR j.finished_at >= %(start)s)
      AND {where}
    GROUP BY 1, 2
)
SELECT n.name, (s.minute AT TIME ZONE %(tz)s)::date AS day,
       sum(s.gpu_util_pct * h.gpus) / nullif(sum(h.gpus), 0)
FROM held h
JOIN jobs_jobgpusample s ON s.job_id = h.job_id AND s.minute >= %(start)s AND s.minute < %(end)s
JOIN quotas_node n ON n.id = h.node_id
GROUP BY n.name, day
ORDER BY n.name, day
"""


def node_utilisation(scope: ReportScope, report: ReportFilter) -> list[tuple[str, date, float]]:
    if scope.empty:
        return []
    where, params = _where(scope, report, JOBS)
    start, end = report.bounds()
    sql = _HEATMAP.format(where=where)
    return _fetch(sql, {**params, "start": start, "end": end, "tz": site_zone().key})


# --- (d) queue waits by priority class --------------------------------------------------------

# A wait is the time from the job's latest entry into "queued" to its admission; admissions in
# the month count. Time pending approval is not queue time (the job is queued once approved).
_WAITS = """
SELECT j.priority_class_id, count(*),
       percentile_cont(%(quantiles)s::float8[]) WITHIN GROUP (ORDER BY w.minutes),
       avg(w.minutes)
FROM jobs_jobevent a
JOIN jobs_job j ON j.id = a.job_id
JOIN portal_project p ON p.id = j.project_id
CROSS JOIN LATERAL (
    SELECT (extract(epoch FROM a.occurred_at - q.occurred_at) / 60)::float8 AS minutes
    FROM jobs_jobevent q
    WHERE q.job_id = a.job_id AND q.kind = 'transition' AND q.to_state = 'queued'
      AND q.occurred_at <= a.occurred_at
    ORDER BY q.occurred_at DESC, q.id DESC
    LIMIT 1
) w
WHERE a.kind = 'transition' AND a.to_state = 'admitted'
  AND a.occurred_at >= %(start)s AND a.occurred_at < %(end)s
  AND {where}
GROUP BY j.priority_class_id
"""


@dataclass(frozen=True)
class WaitBox:
    priority: str
    value: int
    count: int
    quantiles: tuple[float, ...]  # minutes at WAIT_QUANTILES
    mean: float


def queue_waits(scope: ReportScope, report: ReportFilter) -> list[WaitBox]:
    if scope.empty:
        return []
    where, params = _where(scope, report, JOBS)
    start, end = report.bounds()
    rows = _fetch(
        _WAITS.format(where=where), {**params, "start": start, "end": end, "quantiles": list(WAIT_QUANTILES)}
    )
    classes = {pc.pk: pc for pc in PriorityClass.objects.filter(pk__in=[r[0] for r in rows])}
    boxes = [
        WaitBox(classes[pc].name, classes[pc].value, n, tuple(q), float(mean))
        for pc, n, q, mean in rows
        if pc in classes
    ]
    return sorted(boxes, key=lambda b: (-b.value, b.priority))


# --- (e) idle jobs --------------------------------------------------------------------------------

_IDLE = """
WITH used AS (
    SELECT u.job_id, sum(u.card_seconds) / 3600 AS card_hours
    FROM billing_usagerecord u
    WHERE u.month = %(month)s AND {where}
    GROUP BY u.job_id
), util AS (
    SELECT s.job_id, avg(s.gpu_util_pct) AS mean, count(*) AS minutes
    FROM jobs_jobgpusample s
    WHERE s.job_id IN (SELECT job_id FROM used) AND s.minute >= %(start)s AND s.minute < %(end)s
    GROUP BY s.job_id
)
SELECT j.id, j.name, p.code, f.name, used.card_hours, util.mean, util.minutes, j.idle_since
FROM used
JOIN util ON util.job_id = used.job_id
JOIN jobs_job j ON j.id = used.job_id
JOIN portal_project p ON p.id = j.project_id
JOIN quotas_flavor f ON f.id = j.flavor_id
ORDER BY (j.idle_since IS NULL), util.mean, used.card_hours DESC, j.id
LIMIT %(limit)s
"""


@dataclass(frozen=True)
class IdleJob:
    id: int
    name: str
    project: str
    flavor: str
    card_hours: Decimal
    mean_util: float
    minutes: int
    idle_since: datetime | None

    @property
    def idle_card_hours(self) -> Decimal:
        """The card-hours its GPUs sat unused: card-hours × (1 − mean utilisation)."""
        return self.card_hours * (1 - Decimal(str(round(self.mean_util, 3))) / 100)


def idle_jobs(scope: ReportScope, report: ReportFilter) -> list[IdleJob]:
    """Jobs of the month with utilisation samples: those flagged idle first, then by lowest
    mean utilisation, with their metered card-hours."""
    if scope.empty:
        return []
    where, params = _where(scope, report, LEDGER)
    start, end = report.bounds()
    rows = _fetch(
        _IDLE.format(where=where),
        {**params, "month": report.month, "start": start, "end": end, "limit": TOP_IDLE_JOBS},
    )
    return [IdleJob(*row) for row in rows]


# --- (f) cost by project --------------------------------------------------------------------------

_CLOSED_COST = """
SELECT s.department_id, l.project_id, sum(l.amount), s.currency
FROM billing_statementline l
JOIN billing_statement s ON s.id = l.statement_id
WHERE s.month = %(month)s AND {where}
GROUP BY s.department_id, l.project_id, s.currency
"""


@dataclass
class Costs:
    source: str  # "closed" (statements) or "estimate" (the open month so far)
    rows: list[tuple[int, int | None, Decimal]]  # department, project (None: fees, credits), amount
    currency: str
    unpriced: bool = False


def project_costs(user: User, report: ReportFilter, currency: str) -> Costs | None:
    """Money per project: the closed statements of a closed month, else the estimate of the
    open month as metered so far (lines rounded one by one, then summed). None: the viewer sees
    no statements (project members), so no money either."""
    departments = statement_departments(user)
    if departments is not None and not departments:
        return None
    if MonthClose.objects.filter(month=report.month).exists():
        clauses, params = [], {"month": report.month}
        if departments is not None:
            clauses.append("s.department_id = ANY(%(scope_depts)s)")
            params["scope_depts"] = sorted(departments)
        if report.departments is not None:
            clauses.append("s.department_id = ANY(%(filter_depts)s)")
            params["filter_depts"] = sorted(report.departments)
        if report.flavor_id is not None:
            clauses.append("l.flavor_id = %(flavor)s")
            params["flavor"] = report.flavor_id
        rows = _fetch(_CLOSED_COST.format(where=" AND ".join(clauses) or "TRUE"), params)
        found = [(d, p, amount) for d, p, amount, _c in rows]
        return Costs("closed", found, rows[0][3] if rows else currency)
    sums: dict[tuple[int, int | None], Decimal] = defaultdict(Decimal)
    unpriced = False
    for estimate in statement_estimate(user, report.month):
        if report.departments is not None and estimate.department.pk not in report.departments:
            continue
        for line in estimate.lines:
            if report.flavor_id is not None and line.key.flavor_id != report.flavor_id:
                continue
            if line.amount is None:
                unpriced = True
                continue
            sums[(estimate.department.pk, line.key.project_id)] += line.amount
    return Costs("estimate", [(d, p, amount) for (d, p), amount in sums.items()], currency, unpriced)
