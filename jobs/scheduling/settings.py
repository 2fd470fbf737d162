"""The engine settings an operator changes (``SchedulerSettings``: EASY backfill, packing), as
the keyword flags of the pure engine (``jobs.scheduler.scheduler.schedule`` / ``Engine`` /
``jobs.scheduler.forecast``).

Read once per start-estimates refresh and once per snapshot of the submission form's estimate —
never per job; the scheduling cycle reads the row with the rest of its configuration
(``jobs.scheduling.config``: a change rebuilds the warm engine). A missing row (a database before
the migration) means the defaults, there too."""

from __future__ import annotations

from jobs.rule_models import (
    FAIR_ENTRY_DEFAULT_SECONDS,
    FAIR_HALF_LIFE_DEFAULT_SECONDS,
    Packing,
    SchedulerSettings,
)

DEFAULT_FLAGS = {"fragmentation_aware": True, "backfill": True}


def engine_flags() -> dict[str, bool]:
    """``{"fragmentation_aware": bool, "backfill": bool}`` from the settings row."""
    row = SchedulerSettings.objects.filter(pk=1).values_list("backfill", "packing").first()
    if row is None:
        return dict(DEFAULT_FLAGS)
    backfill, packing = row
    return {"fragmentation_aware": packing == Packing.FRAGMENTATION_AWARE, "backfill": backfill}


def fair_share_settings() -> tuple[int, int]:
    """(half-life, entry time) in seconds, from the settings row (the defaults without one)."""
    row = SchedulerSettings.objects.filter(pk=1).values_list(
        "fair_share_half_life_seconds", "fair_share_entry_seconds").first()
    return row or (FAIR_HALF_LIFE_DEFAULT_SECONDS, FAIR_ENTRY_DEFAULT_SECONDS)
