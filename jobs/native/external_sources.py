"""Reads of external sources (DESIGN §11): the Slurm accounts and Kubernetes namespaces external
jobs come from, which project each maps to, and what an unmapped one was seen running.

Visibility: platform admins and auditors see every source, the unmapped ones included (they
belong to no tenant yet); anyone else sees the sources mapped to projects they can see. Only
platform admins map a source (``jobs.native.external.map_source``)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from django.db import connection
from django.db.models import QuerySet

from jobs.native.external import flavor_index
from jobs.native.models import ExternalSource
from portal.models import User
from portal.selectors import scope_for, visible_project_ids
from quotas.models import Flavor


def visible_external_sources(user: User) -> QuerySet[ExternalSource]:
    sources = ExternalSource.objects.select_related("cluster", "project", "mapped_by")
    if scope_for(user).sees_everything:
        return sources
    projects = visible_project_ids(user)
    return sources.filter(project_id__in=projects or [])


def can_map_sources(user: User) -> bool:
    return scope_for(user).platform_admin


@dataclass(frozen=True)
class Observed:
    """What an unmapped source was seen running: jobs, their card-hours so far (whole cards,
    DESIGN §2; a running job up to now), and jobs whose resource names no flavor (not counted
    in card-hours: mapping records them as unknown too)."""

    jobs: int = 0
    card_hours: Decimal = Decimal(0)
    unknown_resource: int = 0


# Device-seconds per (source, resource) in SQL: a source may hold a month of sacct (100,000 rows).
_OBSERVED_SQL = """
SELECT o.source_id, o.record->>'resource', count(*),
       COALESCE(SUM((o.record->>'devices')::numeric * GREATEST(0, EXTRACT(EPOCH FROM
           COALESCE((o.record->>'finished_at')::timestamptz, now())
           - (o.record->>'started_at')::timestamptz))), 0)
FROM jobs_externalobservation o
WHERE o.source_id = ANY(%s)
GROUP BY 1, 2
"""


def observed(sources: list[ExternalSource]) -> dict[int, Observed]:
    """``Observed`` per source id (one aggregate query, one query for the flavors)."""
    ids = [s.pk for s in sources if s.project_id is None]
    if not ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_OBSERVED_SQL, [ids])
        rows = cursor.fetchall()
    flavors = list(Flavor.objects.all())
    index = {s.pk: flavor_index(s.cluster, flavors) for s in sources}  # the import's rule
    totals: dict[int, list] = {}
    for source_id, resource, jobs, device_seconds in rows:
        flavor = index[source_id].get(resource or "")
        total = totals.setdefault(source_id, [0, Decimal(0), 0])
        total[0] += jobs
        if flavor is None:
            total[2] += jobs
        else:
            cards = Decimal(device_seconds) * flavor.fraction_numerator / flavor.fraction_denominator
            total[1] += cards / 3600
    return {pk: Observed(j, h.quantize(Decimal("0.01")), u) for pk, (j, h, u) in totals.items()}

