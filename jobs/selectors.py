"""Reads of jobs and of quota usage, starting from the tenancy scope."""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.core.cache import cache
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import BooleanField, Case, Count, IntegerField, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL
from django.utils import timezone

from jobs import rules
from jobs.models import Job, JobArray, JobDependency, JobEvent, JobGpuSample, JobKind
from jobs.scheduling.cache_keys import EXPLAIN_KEY, QUEUE_KEY
from jobs.states import HOLDING, TERMINAL, JobState
from portal import permissions as perm
from portal.models import Department, Project, User
from portal.selectors import scope_for, visible_departments, visible_project_ids, visible_projects
from quotas.models import Flavor, Node
from quotas.selectors import (
    effective_limits_map,
    healthy_capacity,
    path_ceilings,
    path_quota_nodes,
    quota_tree,
    visible_quota_nodes,
)

MILLI = Decimal(1000)


def visible_jobs(user: User) -> QuerySet[Job]:
    jobs = Job.objects.select_related("project", "flavor", "priority_class", "submitted_by")
    projects = visible_project_ids(user)
    return jobs if projects is None else jobs.filter(project_id__in=projects)


def visible_arrays(user: User) -> QuerySet[JobArray]:
    """Arrays of the projects ``user`` sees (another tenant's is a 404, as its jobs are)."""
    arrays = JobArray.objects.select_related("project", "submitted_by")
    projects = visible_project_ids(user)
    return arrays if projects is None else arrays.filter(project_id__in=projects)


def array_tasks(array: JobArray) -> QuerySet[Job]:
    return array.tasks.select_related("flavor").order_by("array_index", "id")


def job_dependencies(job: Job) -> QuerySet[JobDependency]:
    return job.dependencies.select_related("depends_on").order_by("depends_on_id")


def job_events(job: Job) -> QuerySet[JobEvent]:
    return job.events.select_related("actor").order_by("occurred_at", "id")


# Milli held per (flavor, project, on_loan), summed over the slots of every holding job's
# placement in SQL: loading and decoding ~10,000 placements in Python cost ~0.15 s a call at
# 100,000 jobs (bench/load.py). One SRF level over ``jsonb_path_query_array`` rather than two
# nested ``jsonb_array_elements``: the planner guesses 100 rows per SRF, and with two levels that
# guess crosses ``jit_above_cost`` and JIT compilation alone cost ~0.4 s. A job with an empty
# placement still yields its (flavor, project) group, with 0, as the Python loop did.
_HELD_MILLI_SQL = """
    SELECT j.flavor_id, j.project_id, j.on_loan, COALESCE(SUM(m.milli::bigint), 0)
    FROM jobs_job j
    LEFT JOIN LATERAL jsonb_array_elements_text(jsonb_path_query_array(j.placement, '$[*][*][2]'))
        AS m(milli) ON true
    WHERE j.state = ANY(%s) {flavor}
    GROUP BY 1, 2, 3
"""


def _held_milli(flavor_id: int | None = None) -> list[tuple[int, int, bool | None, int]]:
    """(flavor, project, on_loan, milli) over the jobs holding GPUs."""
    params: list = [sorted(s.value for s in HOLDING)]
    if flavor_id is not None:
        params.append(flavor_id)
    sql = _HELD_MILLI_SQL.format(flavor="AND j.flavor_id = %s" if flavor_id is not None else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _holding_usage(flavor_id: int | None = None) -> dict[int, dict[int, tuple[Decimal, Decimal]]]:
    """{flavor: {project: (in-quota, on-loan)}} in devices of the flavor, over jobs holding GPUs."""
    usage: dict[int, dict[int, list[Decimal]]] = defaultdict(
        lambda: defaultdict(lambda: [Decimal(0), Decimal(0)])
    )
    for flavor, project_id, on_loan, milli in _held_milli(flavor_id):
        usage[flavor][project_id][1 if on_loan else 0] += Decimal(milli) / MILLI
    return {f: {k: (v[0], v[1]) for k, v in by_project.items()} for f, by_project in usage.items()}


# The part of it held by external jobs (DESIGN §11), per flavor and project: a second, small
# aggregate rather than a column of the one above, whose plan bench/load.py tuned.
_EXTERNAL_MILLI_SQL = _HELD_MILLI_SQL.replace("{flavor}", "AND j.kind = 'external' {flavor}")


def external_usage(flavor_id: int | None = None) -> dict[int, dict[int, Decimal]]:
    """{flavor: {project: devices}} held by external jobs now."""
    params: list = [sorted(s.value for s in HOLDING)]
    if flavor_id is not None:
        params.append(flavor_id)
    sql = _EXTERNAL_MILLI_SQL.format(flavor="AND j.flavor_id = %s" if flavor_id is not None else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    usage: dict[int, dict[int, Decimal]] = defaultdict(lambda: defaultdict(Decimal))
    for flavor, project_id, _on_loan, milli in rows:
        usage[flavor][project_id] += Decimal(milli) / MILLI
    return usage


def _external_by_node(by_project: dict[int, Decimal], parent_of=None, department_of=None) -> dict:
    """External devices of every project and department subtree (as ``_usage_by_node``)."""
    sums = _usage_by_node({p: (v, Decimal(0)) for p, v in by_project.items()}, parent_of, department_of)
    return {key: value[0] for key, value in sums.items()}


def _usage_by_project(flavor_id: int) -> dict[int, tuple[Decimal, Decimal]]:
    """(in-quota, on-loan) usage per project in devices of the flavor, over jobs holding GPUs."""
    return _holding_usage(flavor_id).get(flavor_id, {})


def _usage_by_node(
    by_project: dict[int, tuple[Decimal, Decimal]],
    parent_of: dict[int, int | None] | None = None,
    department_of: dict[int, int] | None = None,
) -> dict[tuple[str, int], list[Decimal]]:
    """(in-quota, on-loan) usage of every project and of every department's whole subtree —
    independent of which rows the viewer sees, and counting projects with no quota node."""
    if parent_of is None:
        parent_of = dict(Department.objects.values_list("id", "parent_id"))
    if department_of is None:
        department_of = dict(Project.objects.filter(pk__in=by_project).values_list("id", "department_id"))
    totals: dict[tuple[str, int], list[Decimal]] = {}
    for project_id, (in_quota, on_loan) in by_project.items():
        keys = [("project", project_id)]
        node = department_of.get(project_id)
        while node is not None:
            keys.append(("department", node))
            node = parent_of.get(node)
        for key in keys:
            sums = totals.setdefault(key, [Decimal(0), Decimal(0)])
            sums[0] += in_quota
            sums[1] += on_loan
    return totals


def quota_usage(user: User, flavor_id: int) -> list[dict]:
    """The visible quota tree of a flavor with usage: used (in-quota + on-loan in the subtree),
    borrowed (the on-loan part) and lent (own idle, lendable quota that on-loan jobs elsewhere
    occupy)."""
    by_project = _usage_by_project(flavor_id)
    usage = _usage_by_node(by_project)
    external = _external_by_node(external_usage(flavor_id).get(flavor_id, {}))
    total_on_loan = sum((u[1] for u in by_project.values()), Decimal(0))
    out = []
    for row in quota_tree(user, flavor_id, timezone.now()):
        in_quota, on_loan = usage.get(row.key, (Decimal(0), Decimal(0)))
        quota, lend_limit = row.effective.quota, row.effective.lend_limit
        idle = max(quota - in_quota - on_loan, Decimal(0))
        lendable = idle if lend_limit is None else min(idle, lend_limit)
        out.append({"row": row, "used": in_quota + on_loan, "in_quota": in_quota, "borrowed": on_loan,
                    "lent": min(lendable, max(total_on_loan - on_loan, Decimal(0))),
                    "external": external.get(row.key, Decimal(0))})
    return out


def job_request_facts(job: Job, viewer: User) -> dict:
    """The figures an approver weighs a job against, as they are now (issue 18 item 4): the
    flavor's capacity (all nodes of active clusters, the healthy part, the largest cluster and
    node), each quota node on the project's path that the viewer may see (nominal and effective
    quota, borrow limit, the most it may ever hold, current usage of its subtree), the smallest
    of those caps (named only when visible), and why the job could never start, if it could not."""
    flavor, project = job.flavor, job.project
    capacity = rules.flavor_capacity(flavor)
    now = timezone.now()
    nodes = path_quota_nodes(project, flavor.pk)
    in_path = visible_quota_nodes(viewer).filter(pk__in=[n.pk for n in nodes])
    visible = set(in_path.values_list("pk", flat=True))
    shown = [n for n in nodes if n.pk in visible]
    effective = effective_limits_map(shown, now)
    limits = {c.node.pk: c for c in path_ceilings(project, flavor.pk, now)}
    usage = _usage_by_node(_usage_by_project(flavor.pk))
    binding = min(limits.values(), key=lambda c: c.limit, default=None)
    shape = {
        "workers": job.workers,
        "gpus_per_worker": job.gpus_per_worker,
        "gpu_milli": job.gpu_milli,
        "min_workers": job.min_workers,
    }
    errors = rules.never_runs_errors(viewer=viewer, project=project, flavor=flavor, **shape)
    return {
        "flavor": flavor.name,
        "demand": rules.min_demand(**shape),
        "capacity": {
            "total": capacity.total,
            "healthy": healthy_capacity(flavor.pk),
            "largest_cluster": capacity.largest_cluster,
            "largest_node": capacity.largest_node,
            "clusters": len(capacity.sizes),
        },
        "path": [
            {
                "owner": node.owner,
                "quota": node.quota,
                "effective_quota": effective[node.pk].quota,
                "borrow_limit": node.borrow_limit,
                "limit": limits[node.pk].limit if node.pk in limits else None,
                "used": sum(usage.get(_node_key(node), (Decimal(0), Decimal(0))), Decimal(0)),
            }
            for node in shown
        ],
        "limit": binding.limit if binding else None,
        "limit_owner": rules.owner_label(binding, viewer, project) if binding else None,
        "never": [m for messages in errors.values() for m in messages],
    }


def _node_key(node) -> tuple[str, int]:
    return ("project", node.project_id) if node.project_id else ("department", node.department_id)


# --- reads for the browser pages ------------------------------------------------------------

# The queue page's states, in the order it lists them: the waiting ones first.
QUEUE_STATES = (JobState.QUEUED, JobState.PENDING_APPROVAL, JobState.ADMITTED, JobState.RUNNING)
UTILISATION_MAX_SAMPLES = 10080  # a week of minutes


def submittable_projects(user: User) -> QuerySet[Project]:
    """Active projects ``user`` may submit into: the same rule as ``services.job_submit``
    (member or project admin of the project, or admin of its department's subtree)."""
    scope = scope_for(user)
    projects = Project.objects.filter(active=True).select_related("department").order_by("code")
    if scope.platform_admin:
        return projects
    return projects.filter(Q(id__in=scope.member_projects) | Q(department_id__in=scope.admin_departments))


def can_cancel(user: User, job: Job) -> bool:
    """Whether the page offers a cancel button: ``job_cancel``'s permission and a live job."""
    if job.state in TERMINAL or job.cancel_requested_at is not None or job.kind == JobKind.EXTERNAL:
        return False  # an external job is stopped on its cluster (``services.job_cancel``)
    return job.submitted_by_id == user.pk or perm.can_edit_project(scope_for(user), job.project)


def can_cancel_array(user: User, array: JobArray, tasks: list[Job]) -> bool:
    """Whether the array page offers "cancel all": ``array_cancel``'s permission and a task left
    to cancel (a native array is cancelled on its cluster)."""
    if array.backend_id or all(t.state in TERMINAL or t.cancel_requested_at is not None for t in tasks):
        return False
    return array.submitted_by_id == user.pk or perm.can_edit_project(scope_for(user), array.project)


def job_devices(workers: int, gpus_per_worker: int, gpu_milli: int | None) -> Decimal:
    """Devices of the flavor a request asks for (a shared request is a fraction of one)."""
    devices = Decimal(workers * gpus_per_worker)
    return devices * gpu_milli / MILLI if gpu_milli else devices


def card_hours_estimate(
    *, flavor: Flavor, workers: int, gpus_per_worker: int, gpu_milli: int | None, runtime_seconds: int
) -> Decimal:
    """Whole-card hours if the job runs for ``runtime_seconds`` (DESIGN §2: devices ×
    card_fraction × hours), exact until the one rounding: numerator first, divided last."""
    devices = job_devices(workers, gpus_per_worker, gpu_milli)
    top = devices * flavor.fraction_numerator * Decimal(runtime_seconds)
    return (top / (3600 * flavor.fraction_denominator)).quantize(Decimal("0.01"))


def filter_jobs(jobs: QuerySet[Job], user: User, filters: dict) -> QuerySet[Job]:
    """Apply the page filters (already validated by a form) to a visible-jobs queryset."""
    lookups = {"flavor": "flavor", "project": "project", "state": "state", "kind": "kind"}
    for key, lookup in lookups.items():
        if filters.get(key):
            jobs = jobs.filter(**{lookup: filters[key]})
    if filters.get("mine"):
        jobs = jobs.filter(submitted_by=user)
    if filters.get("q"):
        jobs = jobs.filter(name__icontains=filters["q"])
    return jobs


@dataclass(frozen=True)
class QueueRanking:
    """The last cycle's order of the waiting jobs (``ranked``: ids, first = position 1) and
    when that cycle ran; empty before the first cycle."""

    ranked: Sequence[int]
    at: datetime | None


def queue_ranking() -> QueueRanking:
    """One cache read, written by the cycle for all waiting jobs at once."""
    cached = cache.get(QUEUE_KEY) or {}
    ranked = array("q")
    ranked.frombytes(cached.get("ranked", b""))
    at = cached.get("at")
    return QueueRanking(ranked, datetime.fromisoformat(at) if at else None)


def cached_explanations(job_ids: list[int]) -> dict[int, dict]:
    """The explanations the last cycle cached (the head of the queue), in one cache round trip.
    Jobs further back have none here; their page computes one with ``explain_job``."""
    found = cache.get_many([EXPLAIN_KEY.format(pk) for pk in job_ids])
    return {pk: found[key] for pk in job_ids if (key := EXPLAIN_KEY.format(pk)) in found}


BY_PRIORITY = ("-priority_class__value", "submitted_at", "id")  # the order without a cycle's ranks
FEW_NEW = 1000  # up to this many unranked queued jobs are ordered by their ids alone
FIRST_WALK = 200  # ranked ids checked first (or 4 per row wanted); each further batch doubles


def queue_order(jobs: QuerySet[Job], ranked: Sequence[int]) -> QueueOrder:
    """Ids of ``jobs`` in queue order: queued jobs by their place in the last cycle's order
    (``ranked``; jobs that arrived since after them by priority and submit time), then pending
    approval, admitted and running, each by priority and submit time. A sequence the paginator
    slices: only what the page needs is read (see ``QueueOrder``)."""
    return QueueOrder(jobs, ranked)


class QueueOrder(Sequence[int]):
    """The queue order of a visible (and filtered) job set, read lazily.

    Queued jobs: counted by PostgreSQL, and found for a page by walking the cycle's order from
    its start in growing batches — "which of these ids are in the set and still queued" —
    until the page is full, so the first pages cost one or two small queries whatever the
    queue's length. Only a page past every ranked job reads all the set's queued ids, to order
    the ones that arrived since the cycle (by priority and submit time, as the cycle will rank
    them). The others (pending approval, admitted, running) are counted, and read only for a
    page that reaches them, with LIMIT/OFFSET. Reading and sorting every waiting id cost
    80–100 ms a queue page at 30,000 waiting on a slow machine (bench/load.py); the queue's
    order stays the engine's rule, not restated in SQL."""

    def __init__(self, jobs: QuerySet[Job], ranked: Sequence[int]) -> None:
        self._queued_jobs = jobs.filter(state=JobState.QUEUED)
        others = QUEUE_STATES[1:]
        group = Case(
            *(When(state=s.value, then=Value(k)) for k, s in enumerate(others)), output_field=IntegerField()
        )
        self._others = jobs.filter(state__in=[s.value for s in others]).order_by(group, *BY_PRIORITY)
        self._ranked = ranked
        self._walked: list[tuple[int, int]] = []  # (id, position) of the set's ranked jobs found so far
        self._cursor = 0  # how far into ``ranked`` the walk has checked
        self._unranked_ids: list[int] | None = None
        self._queued_count: int | None = None
        self._others_count: int | None = None

    def positions(self) -> dict[int, int]:
        """The cycle positions of the ranked jobs read so far (those of the pages sliced)."""
        return dict(self._walked)

    def _count_queued(self) -> int:
        if self._queued_count is None:
            self._queued_count = self._queued_jobs.order_by().count()
        return self._queued_count

    def _count_others(self) -> int:
        if self._others_count is None:
            self._others_count = self._others.count()
        return self._others_count

    def _walk(self, wanted: int) -> None:
        """Extend the walk until ``wanted`` ranked jobs of the set are found, every queued job
        of the set is, or the ranked list ends."""
        batch = max(FIRST_WALK, 4 * (wanted - len(self._walked)))
        while (len(self._walked) < wanted and len(self._walked) < self._count_queued()
               and self._cursor < len(self._ranked)):
            chunk = list(self._ranked[self._cursor : self._cursor + batch])
            # One array parameter (``id = ANY``): a thousand ``IN`` placeholders cost Django more
            # to compile than PostgreSQL to run.
            among = RawSQL('"jobs_job"."id" = ANY(%s::bigint[])', [chunk], output_field=BooleanField())
            found = _id_set(self._queued_jobs.order_by().filter(among).values("id"))
            self._walked += [(pk, self._cursor + k) for k, pk in enumerate(chunk, 1) if pk in found]
            self._cursor += len(chunk)
            batch *= 2

    def _unranked(self) -> list[int]:
        """The set's queued jobs the cycle has not ranked, by priority and submit time."""
        if self._unranked_ids is None:
            self._walk(len(self._ranked) + 1)  # the whole ranked list
            new = _id_set(self._queued_jobs.order_by().values("id")).difference(pk for pk, _ in self._walked)
            ordered = self._queued_jobs.order_by(*BY_PRIORITY).values_list("id", flat=True)
            if not new:
                self._unranked_ids = []
            elif len(new) <= FEW_NEW:
                self._unranked_ids = list(ordered.filter(pk__in=new))
            else:  # no cycle yet: (nearly) all of them
                self._unranked_ids = [pk for pk in ordered if pk in new]
        return self._unranked_ids

    def _queued_slice(self, start: int, stop: int) -> list[int]:
        self._walk(stop)
        page = [pk for pk, _ in self._walked[start:stop]]
        if len(self._walked) < stop and len(self._walked) < self._count_queued():
            ranked = len(self._walked)
            page += self._unranked()[max(start - ranked, 0) : stop - ranked]
        return page

    def __len__(self) -> int:
        return self._count_queued() + self._count_others()

    def __getitem__(self, index):
        if not isinstance(index, slice):
            return self[index : index + 1][0] if index >= 0 else list(self)[index]
        start, stop, step = index.indices(len(self))
        if step != 1:
            return list(self)[index]
        queued = self._count_queued()
        page = self._queued_slice(start, min(stop, queued)) if start < queued else []
        lo, hi = max(start - queued, 0), stop - queued
        if hi > lo:
            page += list(self._others.values_list("id", flat=True)[lo:hi])
        return page

    def __iter__(self):
        yield from self[0 : len(self)]


def _id_set(ids: QuerySet) -> set[int]:
    """The ids a one-column queryset selects, through the cursor: Django's row iteration costs
    ~1 µs a row, ~30 ms for the 30,000 waiting jobs of bench/load.py."""
    try:
        sql, params = ids.query.sql_with_params()
    except EmptyResultSet:  # a filter that can match nothing (a user who sees no project)
        return set()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def jobs_by_ids(jobs: QuerySet[Job], ids: list[int]) -> list[Job]:
    """Load ``ids`` from ``jobs`` (one query) in the given order."""
    found = {job.pk: job for job in jobs.filter(pk__in=ids)}
    return [found[pk] for pk in ids if pk in found]


def job_state_counts(user: User) -> dict[str, int]:
    rows = (
        visible_jobs(user)
        .filter(state__in=[s.value for s in QUEUE_STATES])
        .order_by()
        .values("state")
        .annotate(n=Count("id"))
    )
    return {row["state"]: row["n"] for row in rows}


def holding_usage() -> dict[int, dict[int, tuple[Decimal, Decimal]]]:
    """{flavor: {project: (in-quota, on-loan)}} devices held pool-wide, for a page that shows
    both the pool and the quota rows to read it once (one aggregate query)."""
    return _holding_usage()


def gpus_in_use_by_flavor(
    usage: dict[int, dict[int, tuple[Decimal, Decimal]]] | None = None,
) -> dict[int, Decimal]:
    """Devices held by admitted or running jobs, per flavor (pool-wide: the pool is shared);
    ``usage`` is ``holding_usage()`` when the caller has read it already."""
    if usage is None:
        usage = _holding_usage()
    return {
        flavor_id: sum((in_quota + on_loan for in_quota, on_loan in by_project.values()), Decimal(0))
        for flavor_id, by_project in usage.items()
    }


def quota_usage_rows(
    user: User, usage: dict[int, dict[int, tuple[Decimal, Decimal]]] | None = None
) -> list[dict]:
    """Every visible quota node of every flavor with its effective quota, used and borrowed —
    the all-flavors counterpart of ``quota_usage``, in a fixed number of queries; ``usage`` is
    ``holding_usage()`` when the caller has read it already."""
    nodes = list(visible_quota_nodes(user).order_by("flavor__name"))
    limits = effective_limits_map(nodes, timezone.now())
    by_flavor = _holding_usage() if usage is None else usage
    parent_of = dict(Department.objects.values_list("id", "parent_id"))
    department_of = dict(Project.objects.values_list("id", "department_id"))
    usage = {
        flavor_id: _usage_by_node(by_project, parent_of, department_of)
        for flavor_id, by_project in by_flavor.items()
    }
    external = {
        flavor_id: _external_by_node(by_project, parent_of, department_of)
        for flavor_id, by_project in external_usage().items()
    }
    out = []
    for node in nodes:
        key = ("project", node.project_id) if node.project_id else ("department", node.department_id)
        in_quota, on_loan = usage.get(node.flavor_id, {}).get(key, (Decimal(0), Decimal(0)))
        out.append({
            "node": node, "effective": limits[node.pk], "used": in_quota + on_loan, "borrowed": on_loan,
            "external": external.get(node.flavor_id, {}).get(key, Decimal(0)),
        })
    out.sort(key=lambda r: (r["node"].flavor.name, r["node"].project_id is not None, str(r["node"].owner)))
    return out


def job_gpu_samples(job: Job) -> QuerySet[JobGpuSample]:
    """Per-minute utilisation samples of a job, oldest first, at most a week of them."""
    return job.gpu_samples.order_by("minute")[:UTILISATION_MAX_SAMPLES]


def job_placement(job: Job) -> list[dict]:
    """The job's allocation per worker: node name and the GPU indexes (with shares) it holds."""
    node_ids = {slot[0] for worker in job.placement or [] for slot in worker}
    names = dict(Node.objects.filter(pk__in=node_ids).values_list("id", "name")) if node_ids else {}
    workers = []
    for index, worker in enumerate(job.placement or []):
        by_node: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for node_id, gpu, milli in worker:
            by_node[node_id].append((gpu, milli))
        for node_id, gpus in by_node.items():
            workers.append({"worker": index, "node": names.get(node_id, f"#{node_id}"), "gpus": sorted(gpus)})
    return workers


def tree_node_names(user: User, node_ids: list[str]) -> dict[str, str]:
    """Names of engine tree ids (``d<id>`` / ``p<id>``) the user may see; others are left out."""
    departments = [int(n[1:]) for n in node_ids if n and n[0] == "d" and n[1:].isdigit()]
    projects = [int(n[1:]) for n in node_ids if n and n[0] == "p" and n[1:].isdigit()]
    names = {}
    if departments:
        for pk, name in visible_departments(user).filter(pk__in=departments).values_list("id", "name"):
            names[f"d{pk}"] = name
    if projects:
        for pk, name in visible_projects(user).filter(pk__in=projects).values_list("id", "name"):
            names[f"p{pk}"] = name
    return names
