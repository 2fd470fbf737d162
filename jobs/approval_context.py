"""The figures ``jobs`` gives an approver next to a request (``portal.approvals.context``,
issue 24 item 3), for a whole page of requests at once with a fixed number of queries:

* ``usage`` — per quota owner the request concerns (a job: its project; a quota request: the
  project or department whose quota it changes; a loan: the borrower, then the lender), the
  flavor's quota (nominal and effective now) and what its subtree holds now, in quota and
  borrowed;
* ``requester_usage`` — what the requester's own jobs hold of the flavor there now;
* ``capacity`` — the flavor's healthy GPUs, what jobs hold of them, and the difference (free);
* ``cost`` — the estimate at the standard rate (``jobs.estimates``): a job, its card-hours up to
  its maximum runtime; a quota request, a month (``MONTH_HOURS``) of the added quota at full
  use; a loan, the lent amount over its whole period at full use. None without a rate;
* ``history`` — the requester's jobs that started in the last ``HISTORY_DAYS`` days, and how
  many of them the metrics poll flagged idle.

Amounts are devices of the flavor (card equivalents for the cost), Decimals; money by the one
rounding rule, through billing's registered price list."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Q

from jobs.approvals import job_cards
from jobs.estimates import cost_pricers
from jobs.models import Job
from jobs.rules import default_runtime
from jobs.selectors import _usage_by_node
from jobs.states import HOLDING
from portal.approvals import HISTORY_DAYS
from portal.models import ApprovalKind, ApprovalRequest, Department
from quotas.models import Flavor, QuotaNode
from quotas.selectors import capacity_by_flavor, effective_limits_map

MONTH_HOURS = Decimal(720)  # a month of 30 days, the basis of a quota request's monthly cost
MILLI = Decimal(1000)
ZERO = Decimal(0)
SECONDS_PER_HOUR = Decimal(3600)

# Milli held per (flavor, project, submitter, on_loan) over the jobs holding GPUs of the flavors
# asked about: ``jobs.selectors._HELD_MILLI_SQL`` with the submitter as one more group, and the
# project's department (no second query for it).
_HELD_SQL = """
    SELECT j.flavor_id, j.project_id, j.submitted_by_id, j.on_loan, COALESCE(SUM(m.milli::bigint), 0),
           p.department_id
    FROM jobs_job j
    JOIN portal_project p ON p.id = j.project_id
    LEFT JOIN LATERAL jsonb_array_elements_text(jsonb_path_query_array(j.placement, '$[*][*][2]'))
        AS m(milli) ON true
    WHERE j.state = ANY(%s) AND j.flavor_id = ANY(%s)
    GROUP BY 1, 2, 3, 4, 6
"""


def _held(flavor_ids: list[int]) -> list[tuple[int, int, int, bool | None, int, int]]:
    with connection.cursor() as cursor:
        cursor.execute(_HELD_SQL, [sorted(s.value for s in HOLDING), flavor_ids])
        return cursor.fetchall()


def _decimal(value, default: Decimal = ZERO) -> Decimal:
    try:
        return Decimal(str(value))
    except (ArithmeticError, ValueError, TypeError):
        return default


def _when(value) -> datetime | None:
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return None


class _Page:
    """The rows a page of requests needs, each read once."""

    def __init__(self, requests: list[ApprovalRequest], now: datetime):
        job_ids = [r.subject_id for r in requests if r.kind == ApprovalKind.JOB and r.subject_id]
        self.jobs = {j.pk: j for j in Job.objects.filter(pk__in=job_ids).select_related("flavor")}
        payload_flavors = {
            r.payload.get("flavor")
            for r in requests
            if r.kind != ApprovalKind.JOB and isinstance((r.payload or {}).get("flavor"), int)
        }
        self.flavors = {j.flavor_id: j.flavor for j in self.jobs.values()}
        missing = payload_flavors - set(self.flavors)
        self.flavors.update(Flavor.objects.in_bulk(missing) if missing else {})
        node_ids = {
            (r.payload or {}).get(k)
            for r in requests
            if r.kind == ApprovalKind.LOAN
            for k in ("borrower", "lender")
        }
        keys = [k for r in requests for k in self.owner_keys(r)]
        projects = {pk for kind, pk in keys if kind == "project"}
        departments = {pk for kind, pk in keys if kind == "department"}
        node_filter = Q(pk__in=[n for n in node_ids if isinstance(n, int)])
        if self.flavors:
            node_filter |= Q(flavor_id__in=list(self.flavors)) & (
                Q(project_id__in=projects) | Q(department_id__in=departments)
            )
        nodes = list(QuotaNode.objects.filter(node_filter).select_related("project", "department"))
        self.node_by_id = {n.pk: n for n in nodes}
        self.node_by_key = {(n.flavor_id, _key(n)): n for n in nodes}
        self.limits = effective_limits_map(nodes, now) if nodes else {}

    def flavor_of(self, request: ApprovalRequest) -> Flavor | None:
        if request.kind == ApprovalKind.JOB:
            job = self.jobs.get(request.subject_id)
            return job.flavor if job is not None else None
        return self.flavors.get((request.payload or {}).get("flavor"))

    def owner_keys(self, request: ApprovalRequest) -> list[tuple[str, int]]:
        payload = request.payload or {}
        if request.kind == ApprovalKind.QUOTA and payload.get("owner") in ("project", "department"):
            return [(payload["owner"], payload.get("owner_id"))]
        if request.kind == ApprovalKind.LOAN:
            return []  # the loan's own nodes (``loan_nodes``)
        if request.project_id is not None:
            return [("project", request.project_id)]
        return [("department", request.department_id)] if request.department_id else []


def _key(node: QuotaNode) -> tuple[str, int]:
    return ("project", node.project_id) if node.project_id else ("department", node.department_id)


def approval_context(requests: list[ApprovalRequest], now: datetime) -> dict[int, dict]:
    """Registered in ``portal.approvals.context_providers`` (``JobsConfig.ready``)."""
    page = _Page(requests, now)
    flavor_ids = sorted(page.flavors)
    held = _held(flavor_ids) if flavor_ids else []
    by_project: dict[int, dict[int, list[Decimal]]] = defaultdict(lambda: defaultdict(lambda: [ZERO, ZERO]))
    by_user: dict[tuple[int, int], dict[int, list[Decimal]]] = defaultdict(
        lambda: defaultdict(lambda: [ZERO, ZERO])
    )
    held_total: dict[int, Decimal] = defaultdict(Decimal)
    department_of: dict[int, int] = {}
    for flavor_id, project_id, user_id, on_loan, milli, department_id in held:
        department_of[project_id] = department_id
        devices = Decimal(milli) / MILLI
        by_project[flavor_id][project_id][1 if on_loan else 0] += devices
        by_user[(flavor_id, user_id)][project_id][1 if on_loan else 0] += devices
        held_total[flavor_id] += devices
    parent_of = dict(Department.objects.values_list("id", "parent_id"))
    subtree = {
        f: _usage_by_node({p: tuple(v) for p, v in rows.items()}, parent_of, department_of)
        for f, rows in by_project.items()
    }
    user_subtree = {
        key: _usage_by_node({p: tuple(v) for p, v in rows.items()}, parent_of, department_of)
        for key, rows in by_user.items()
    }
    healthy = capacity_by_flavor() if flavor_ids else {}
    history = _job_history({r.requester_id for r in requests}, now)
    prices = cost_pricers(list(page.flavors.values()), now)

    out = {}
    for request in requests:
        flavor = page.flavor_of(request)
        part: dict = {"history": history.get(request.requester_id, {"jobs_run": 0, "jobs_idle": 0})}
        if flavor is None:
            out[request.pk] = part
            continue
        rows = _usage_rows(page, request, flavor, subtree.get(flavor.pk, {}))
        mine = user_subtree.get((flavor.pk, request.requester_id), {})
        first = rows[0].pop("key") if rows else None
        for row in rows[1:]:
            del row["key"]
        in_quota, borrowed = mine.get(first, (ZERO, ZERO)) if first else (ZERO, ZERO)
        free = max(healthy.get(flavor.pk, ZERO) - held_total.get(flavor.pk, ZERO), ZERO)
        part.update(
            {
                "flavor": flavor.name,
                "usage": rows,
                "requester_usage": {
                    "owner": rows[0]["owner"] if rows else "",
                    "in_quota": in_quota,
                    "borrowed": borrowed,
                },
                "capacity": {
                    "healthy": healthy.get(flavor.pk, ZERO),
                    "held": held_total.get(flavor.pk, ZERO),
                    "free": free,
                },
                "cost": _cost(page, request, flavor, prices.get(flavor.pk)),
            }
        )
        out[request.pk] = part
    return out


def _usage_rows(page: _Page, request: ApprovalRequest, flavor: Flavor, usage: dict) -> list[dict]:
    payload = request.payload or {}
    if request.kind == ApprovalKind.LOAN:
        found = [(role, page.node_by_id.get(payload.get(role))) for role in ("borrower", "lender")]
        targets = [(role, _key(node), node) for role, node in found if node is not None]
    else:
        targets = [("owner", key, page.node_by_key.get((flavor.pk, key))) for key in page.owner_keys(request)]
    rows = []
    for role, key, node in targets:
        in_quota, borrowed = usage.get(key, (ZERO, ZERO))
        limits = page.limits.get(node.pk) if node is not None else None
        rows.append(
            {
                "role": role,
                "key": key,
                "owner": str(node.owner) if node is not None else _owner_name(request, key),
                "quota": node.quota if node is not None else ZERO,
                "effective_quota": limits.quota if limits is not None else ZERO,
                "in_quota": in_quota,
                "borrowed": borrowed,
            }
        )
    return rows


def _owner_name(request: ApprovalRequest, key: tuple[str, int]) -> str:
    if key[0] == "project" and request.project is not None and request.project.pk == key[1]:
        return str(request.project)
    if request.department is not None and request.department.pk == key[1]:
        return str(request.department)
    return str((request.payload or {}).get("owner_name", ""))


def _cost(page: _Page, request: ApprovalRequest, flavor: Flavor, price) -> dict | None:
    payload = request.payload or {}
    if request.kind == ApprovalKind.JOB:
        job = page.jobs.get(request.subject_id)
        cards = job_cards(flavor, job.workers, job.gpus_per_worker, job.gpu_milli)
        runtime = job.max_runtime_seconds or default_runtime(job.kind)
        if runtime is None:  # unbounded: no total to estimate
            return {
                "basis": "job",
                "cards": cards,
                "hours": None,
                "card_hours": None,
                "amount": None,
                "currency": None,
            }
        hours = Decimal(runtime) / SECONDS_PER_HOUR
        basis = "job"
    elif request.kind == ApprovalKind.QUOTA:
        cards = _cards(flavor, _decimal(payload.get("quota")) - _decimal(payload.get("previous")))
        hours = MONTH_HOURS
        basis = "quota_month"
    elif request.kind == ApprovalKind.LOAN:
        cards = _cards(flavor, _decimal(payload.get("amount")))
        starts, ends = _when(payload.get("starts_at")), _when(payload.get("ends_at"))
        if starts is None or ends is None:
            return None
        hours = Decimal(int((ends - starts).total_seconds())) / SECONDS_PER_HOUR
        basis = "loan"
    else:
        return None
    card_hours = (cards * hours).quantize(Decimal("0.001"))
    amount, currency = price(card_hours) if price is not None else (None, None)
    return {
        "basis": basis,
        "cards": cards.quantize(Decimal("0.001")),
        "hours": hours.quantize(Decimal("0.01")),
        "card_hours": card_hours,
        "amount": amount,
        "currency": currency,
    }


def _cards(flavor: Flavor, devices: Decimal) -> Decimal:
    """Whole-card equivalents of ``devices`` of the flavor (seven 1/7 slices are one card)."""
    return devices * flavor.fraction_numerator / flavor.fraction_denominator


def _job_history(user_ids: set[int], now: datetime) -> dict[int, dict]:
    """Jobs of each user that started in the last ``HISTORY_DAYS`` days, and how many of them
    were flagged idle (``Job.idle_since``, set by the metrics poll). One query."""
    since = now - timedelta(days=HISTORY_DAYS)
    rows = (
        Job.objects.filter(submitted_by_id__in=user_ids, started_at__gte=since, started_at__lte=now)
        .values("submitted_by_id")
        # Columns of the index ``job_started_by_user`` only (not id), so it answers without the
        # table; count(idle_since) counts the flagged jobs.
        .annotate(run=Count("submitted_by"), idle=Count("idle_since"))
        .order_by()
    )
    return {r["submitted_by_id"]: {"jobs_run": r["run"], "jobs_idle": r["idle"]} for r in rows}
