"""Billing's part in moving a project (``portal.services.project_move`` through ``portal.hooks``).

A move is effective-dated: the meter charges each instant of use to the department that owned
the project then. Usage already metered, or inside a month that is closed, is not re-attributed,
so a move may not take effect before the meter's cursor or inside (or before) a closed month.
"""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.translation import gettext as _

from quotas.selectors import site_zone

from .models import MeterState, MonthClose
from .periods import month_label, month_of


def check_project_move(project, to_department, at: datetime) -> None:
    # Locked so a meter run cannot move its cursor past ``at`` while the move commits.
    state = MeterState.objects.select_for_update().filter(pk=1).first()
    if state is not None and state.metered_through is not None and at < state.metered_through:
        raise ValidationError({"at": _(
            "Usage up to %(t)s is already metered and is not re-attributed: the move can take effect "
            "at %(t)s at the earliest."
        ) % {"t": _local(state.metered_through)}})
    closed = MonthClose.objects.filter(month__gte=month_of(at, site_zone())).order_by("-month").first()
    if closed is not None:
        raise ValidationError({"at": _(
            "%(month)s is closed: a move cannot take effect in or before a closed month."
        ) % {"month": month_label(closed.month)}})


def _local(at: datetime) -> str:
    return timezone.localtime(at, site_zone()).strftime("%Y-%m-%d %H:%M:%S")
