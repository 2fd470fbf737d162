"""Relative throughput measured from history (DESIGN §14): the same job run on two flavors.

A *template* is what makes two runs comparable: the same image, command and shape (workers,
GPUs per worker, milli-GPUs). Jobs do not record the JobTemplate they were submitted from, and
a template can be edited between runs, so the job's own fields are the key — two jobs with the
same key did the same work. Only jobs that succeeded count (a failed or cancelled run did not
finish the work), with their last running stretch (``started_at`` → ``finished_at``).

For each template run on both the reference flavor and a flavor X, PostgreSQL gives the median
runtime on each; the template's ratio is reference runtime ÷ X runtime (X twice as fast: 2.0).
The flavor's measured throughput is the median of its templates' ratios, with the number of
templates and of X's runs behind it — a ratio from one template of one run is shown as such.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import connection

from jobs.states import JobState
from quotas.models import Flavor

PLACES = Decimal("0.001")  # like Flavor.relative_throughput


@dataclass(frozen=True, slots=True)
class Measured:
    ratio: Decimal  # median over templates of (reference runtime ÷ this flavor's runtime)
    templates: int  # templates run on both flavors
    runs: int  # this flavor's runs in those templates


_MEDIANS = """
SELECT md5(json_build_array(j.image, j.command, j.workers, j.gpus_per_worker,
                             coalesce(j.gpu_milli, 1000))::text) AS template,  -- unambiguous
       j.flavor_id,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.finished_at - j.started_at)),
       count(*)
FROM jobs_job j
WHERE j.state = %(done)s AND j.started_at IS NOT NULL AND j.finished_at > j.started_at
  AND j.flavor_id = ANY(%(flavors)s)
GROUP BY 1, 2
"""


def reference_flavor() -> Flavor | None:
    return Flavor.objects.filter(name=settings.GPUPOOL["REFERENCE_FLAVOR"]).first()


def measured_throughput(flavor_ids: Collection[int] | None = None) -> dict[int, Measured]:
    """{flavor id: what history says} for the flavors (all when None) with at least one template
    run on them and on the reference flavor; the reference itself is left out (1.0 by definition)."""
    reference = reference_flavor()
    if reference is None:
        return {}
    wanted = set(flavor_ids) if flavor_ids is not None else set(Flavor.objects.values_list("pk", flat=True))
    wanted.discard(reference.pk)
    if not wanted:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_MEDIANS, {"done": JobState.SUCCEEDED, "flavors": sorted(wanted | {reference.pk})})
        rows = cursor.fetchall()
    return ratios(rows, reference.pk)


def ratios(rows, reference_id: int) -> dict[int, Measured]:
    """(template, flavor, median seconds, runs) rows → the flavors' measured throughput."""
    runtimes: dict[str, dict[int, tuple[float, int]]] = defaultdict(dict)
    for template, flavor_id, median, runs in rows:
        runtimes[template][flavor_id] = (float(median), runs)
    per_flavor: dict[int, list[tuple[float, int]]] = defaultdict(list)
    for by_flavor in runtimes.values():
        base = by_flavor.get(reference_id)
        if base is None:
            continue
        for flavor_id, (median, runs) in by_flavor.items():
            if flavor_id != reference_id and median > 0:
                per_flavor[flavor_id].append((base[0] / median, runs))
    return {
        flavor_id: Measured(
            Decimal(str(statistics.median(r for r, _n in found))).quantize(PLACES, rounding=ROUND_HALF_UP),
            len(found),
            sum(n for _r, n in found),
        )
        for flavor_id, found in per_flavor.items()
    }
