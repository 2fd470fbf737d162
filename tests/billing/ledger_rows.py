"""Ledger rows written straight into ``billing_usagerecord``, as the meter writes them, for the
tests of what statements and exports make of the ledger (issue 19 items 5 and 6): they do not
depend on the meter, which is being rewritten beside them."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from billing.models import UsageRecord
from billing.periods import month_of

from .conftest import ZONE


def ledger(history, project, flavor, hour: datetime, card_seconds, tier="standard", user=None) -> UsageRecord:
    """One charge row of one job in ``[hour, hour + 1 h)``, charged to the project's department."""
    job = history.job(project, flavor, user=user)
    return UsageRecord.objects.create(
        job=job,
        segment_start=hour,
        segment_end=hour + timedelta(hours=1),
        hour_start=hour,
        month=month_of(hour, ZONE),
        flavor=flavor,
        project=project,
        department=project.department,
        user=job.submitted_by,
        priority_class=job.priority_class,
        tier=tier,
        gpu_count=1,
        card_seconds=Decimal(card_seconds),
        revision=0,
        metered_at=hour + timedelta(hours=1),
    )
