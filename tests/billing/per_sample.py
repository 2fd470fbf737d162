"""The usage explorer's utilisation as it was computed before the roll-up — a GROUP BY over every
GPU sample of the range — kept as the reference that ``billing.usage`` must equal: the roll-up's
tests and ``bench/sample_hours.py`` compare with it."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from django.db import connection

from billing import pricing, usage

PER_SAMPLE = """
SELECT {keys}, (sum(c.cards) / 60)::numeric, (sum(c.cards * c.util) / 6000)::numeric
FROM (SELECT j.project_id, j.submitted_by_id, j.flavor_id, j.kind, j.priority_class_id, p.department_id,
             s.gpu_util_pct AS util,
             s.gpus * f.fraction_numerator * coalesce(j.gpu_milli, 1000)::float8
                 / (f.fraction_denominator * 1000) AS cards
      FROM jobs_jobgpusample s
      JOIN jobs_job j ON j.id = s.job_id
      JOIN portal_project p ON p.id = j.project_id
      JOIN quotas_flavor f ON f.id = j.flavor_id
      WHERE s.minute >= %(start)s AND s.minute < %(end)s) c
GROUP BY GROUPING SETS (({keys}), ())
"""


def per_sample_figures(start: datetime, end: datetime, group_by) -> dict[tuple, tuple[Decimal, Decimal]]:
    """{group key (all None: the total): (sampled card-hours, effective card-hours)} at the
    explorer's rounding, from every sample of [start, end)."""
    keys = ", ".join("c." + usage.DIMENSIONS[g][1].split(".")[1] for g in group_by)
    with connection.cursor() as cursor:
        cursor.execute(PER_SAMPLE.format(keys=keys), {"start": start, "end": end})
        rows = cursor.fetchall()
    levels = len(group_by)
    return {tuple(r[:levels]): (Decimal(r[levels]).quantize(pricing.HOURS_PLACES),
                                Decimal(r[levels + 1]).quantize(pricing.HOURS_PLACES))
            for r in rows if r[levels] is not None}
