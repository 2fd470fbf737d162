"""Job events cannot be changed or removed, whoever asks: the database refuses it."""

import pytest
from django.db import IntegrityError, transaction

from jobs.models import JobEvent
from tests import factories as fx

pytestmark = pytest.mark.django_db


def test_a_job_event_cannot_be_updated_or_deleted(world):
    job = fx.submit(world.pa1, world.F, gpus=1)
    event = JobEvent.objects.get(job=job)
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        JobEvent.objects.filter(pk=event.pk).update(reason="rewritten")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        JobEvent.objects.filter(pk=event.pk).delete()
    event.refresh_from_db()
    assert event.reason == "submitted"
