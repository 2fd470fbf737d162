"""The span of dates the portal accepts from a user: 2000-01-01 up to the end of 2100.

Python's dates end at 9999-12-31, and arithmetic near either end (a month's end, the site zone's
offset, an hour added) raises instead of answering; nothing the portal meters, lends or bills is
from outside this span. Months are bounded to the same span (``billing.periods``: 2000-01 to
2100-12). Out of range is a field error, a 400 or a ``CommandError`` — never clamped.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

FIRST = datetime(2000, 1, 1, tzinfo=UTC)
END = datetime(2101, 1, 1, tzinfo=UTC)  # exclusive
OUT_OF_RANGE = _("Give a date from 2000-01-01 to 2100-12-31.")


def in_range(at: datetime) -> bool:
    """Whether an aware date-time is inside the span (a naive one is compared as UTC)."""
    return FIRST <= (at if at.tzinfo else at.replace(tzinfo=UTC)) < END


def validate_in_range(at: datetime) -> None:
    """A validator for Django form fields and DRF serializer fields alike."""
    if at is not None and not in_range(at):
        raise ValidationError(OUT_OF_RANGE, code="date_out_of_range")
