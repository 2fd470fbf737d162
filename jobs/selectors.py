"""Reads of jobs and of quota usage, starting from the tenancy scope."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone

from portal.models import Department, Project, User
from portal.selectors import visible_projects
from quotas.selectors import quota_tree

from .models import Job, JobEvent
from .states import HOLDING

MILLI = Decimal(1000)


def visible_jobs(user: User) -> QuerySet[Job]:
    return Job.objects.filter(project_id__in=visible_projects(user).values("id")).select_related(
        "project", "flavor", "priority_class", "submitted_by"
    )


def job_events(job: Job) -> QuerySet[JobEvent]:
    return job.events.select_related("actor").order_by("at", "id")


def _usage_by_project(flavor_id: int) -> dict[int, tuple[Decimal, Decimal]]:
    """(in-quota, on-loan) usage per project in devices of the flavor, over jobs holding GPUs."""
    usage: dict[int, list[Decimal]] = defaultdict(lambda: [Decimal(0), Decimal(0)])
    rows = Job.objects.filter(flavor_id=flavor_id, state__in=list(HOLDING)).values_list(
        "project_id", "placement", "on_loan"
    )
    for project_id, placement, on_loan in rows:
        milli = sum(m for worker in placement for _node, _gpu, m in worker)
        usage[project_id][1 if on_loan else 0] += Decimal(milli) / MILLI
    return {k: (v[0], v[1]) for k, v in usage.items()}


def _usage_by_node(by_project: dict[int, tuple[Decimal, Decimal]]) -> dict[tuple[str, int], list[Decimal]]:
    """(in-quota, on-loan) usage of every project and of every department's whole subtree —
    independent of which rows the viewer sees, and counting projects with no quota node."""
    parent_of = dict(Department.objects.values_list("id", "parent_id"))
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
    total_on_loan = sum((u[1] for u in by_project.values()), Decimal(0))
    out = []
    for row in quota_tree(user, flavor_id, timezone.now()):
        in_quota, on_loan = usage.get(row.key, (Decimal(0), Decimal(0)))
        quota, lend_limit = row.effective.quota, row.effective.lend_limit
        idle = max(quota - in_quota - on_loan, Decimal(0))
        lendable = idle if lend_limit is None else min(idle, lend_limit)
        out.append({"row": row, "used": in_quota + on_loan, "in_quota": in_quota, "borrowed": on_loan,
                    "lent": min(lendable, max(total_on_loan - on_loan, Decimal(0)))})
    return out
