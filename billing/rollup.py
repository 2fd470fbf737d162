"""The ledger's daily sums (``UsageDay``, issue 24): the meter adds the rows it has just written
(ids above the ledger's highest before its batch) in the same transaction, so the sums always
equal the ledger. A reversal adds its negative card-seconds like any row; core- and MiB-seconds
(DESIGN §15) are summed the same way."""

from __future__ import annotations

from django.db import connection

# Sums of ledger rows with id > %(after)s, added to the day's sums (upsert on the key).
_ROLL_UP = """
INSERT INTO billing_usageday (day, month, department_id, project_id, user_id, flavor_id, priority_class_id,
                              kind, tier, card_seconds, normalised_seconds, first_hour, last_hour,
                              core_seconds, mib_seconds, extra_core_seconds, extra_mib_seconds)
SELECT (u.hour_start AT TIME ZONE %(tz)s)::date, u.month, u.department_id, u.project_id, u.user_id,
       u.flavor_id, u.priority_class_id, j.kind, u.tier, sum(u.card_seconds),
       sum(u.card_seconds * u.relative_throughput), min(u.hour_start), max(u.hour_start),
       sum(u.core_seconds), sum(u.mib_seconds), sum(u.extra_core_seconds), sum(u.extra_mib_seconds)
FROM billing_usagerecord u
JOIN jobs_job j ON j.id = u.job_id
WHERE u.id > %(after)s
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
ON CONFLICT (day, department_id, project_id, user_id, flavor_id, priority_class_id, kind, tier)
DO UPDATE SET card_seconds = billing_usageday.card_seconds + EXCLUDED.card_seconds,
              normalised_seconds = billing_usageday.normalised_seconds + EXCLUDED.normalised_seconds,
              core_seconds = billing_usageday.core_seconds + EXCLUDED.core_seconds,
              mib_seconds = billing_usageday.mib_seconds + EXCLUDED.mib_seconds,
              extra_core_seconds = billing_usageday.extra_core_seconds + EXCLUDED.extra_core_seconds,
              extra_mib_seconds = billing_usageday.extra_mib_seconds + EXCLUDED.extra_mib_seconds,
              first_hour = least(billing_usageday.first_hour, EXCLUDED.first_hour),
              last_hour = greatest(billing_usageday.last_hour, EXCLUDED.last_hour)
"""


def ledger_high_water() -> int:
    """The highest ledger id now (0: empty)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM billing_usagerecord")
        return cursor.fetchone()[0]


def roll_up(after: int, tz: str) -> None:
    """Add the ledger rows above ``after`` to the daily sums (call in the transaction that wrote them)."""
    with connection.cursor() as cursor:
        cursor.execute(_ROLL_UP, {"after": after, "tz": tz})


def rebuild(tz: str) -> None:
    """The daily sums from the whole ledger (migration 0009; a repair)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM billing_usageday")
        cursor.execute(_ROLL_UP, {"after": 0, "tz": tz})
