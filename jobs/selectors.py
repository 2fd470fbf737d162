"""Reads of jobs and of quota usage, starting from the tenancy scope."""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal

from django.db.models import QuerySet
from django.utils import timezone

from portal.models import User
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


def quota_usage(user: User, flavor_id: int) -> list[dict]:
    """The visible quota tree of a flavor with usage: in-quota, borrowed (on-loan usage in the
    subtree) and lent (own idle, lendable quota that on-loan jobs elsewhere occupy)."""
    rows = quota_tree(user, flavor_id, timezone.now())
    by_project = _usage_by_project(flavor_id)
    subtree: dict[tuple[str, int], list[Decimal]] = {}
    # Children follow parents in tree order: walk backwards to sum subtrees bottom-up.
    for row in reversed(rows):
        own = by_project.get(row.key[1], (Decimal(0), Decimal(0))) if row.key[0] == "project" else (0, 0)
        sums = subtree.setdefault(row.key, [Decimal(own[0]), Decimal(own[1])])
        if row.parent_key in {r.key for r in rows}:
            parent = subtree.setdefault(row.parent_key, [Decimal(0), Decimal(0)])
            parent[0] += sums[0]
            parent[1] += sums[1]
    total_on_loan = sum((u[1] for u in by_project.values()), Decimal(0))
    out = []
    for row in rows:
        in_quota, on_loan = subtree[row.key]
        quota, lend_limit = row.effective.quota, row.effective.lend_limit
        idle = max(quota - in_quota - on_loan, Decimal(0))
        lendable = idle if lend_limit is None else min(idle, lend_limit)
        out.append(
            {
                "row": row,
                "used": in_quota + on_loan,
                "in_quota": in_quota,
                "borrowed": on_loan,
                "lent": min(lendable, max(total_on_loan - on_loan, Decimal(0))),
            }
        )
    return out
