"""A real Celery worker delivers a notification to a webhook (issue 24 item 7): ``notify`` in a
committed transaction → the delivery task on the broker → the worker's claim, signed POST and
log row, checked by the local receiver."""

from __future__ import annotations

import pytest
from django.db import transaction

from portal import enqueue as enqueue_module
from portal.celery import app
from portal.models import WebhookDelivery
from portal.notifications import notify
from portal.webhooks import webhook_create
from tests.celery_procs import private_queue, start_worker
from tests.waiting import wait_until
from tests.webhook_receiver import start_receiver

pytestmark = [pytest.mark.celery_worker, pytest.mark.django_db(transaction=True)]


def test_a_real_worker_delivers_a_notification_to_a_signed_json_hook(world, settings, monkeypatch):
    settings.GPUPOOL = {**settings.GPUPOOL, "WEBHOOK_ALLOW_HOSTS": ["127.0.0.1"]}
    receiver, server = start_receiver(secrets={"json": "worker-secret"})
    queue = private_queue()
    # The tasks this test's code enqueues go to the private queue its worker consumes.
    monkeypatch.setattr(enqueue_module, "send", lambda name, *args, expires=None: app.send_task(
        name, args=args, queue=queue, expires=expires))
    member = world.users["pa1_member"]
    hook = webhook_create(actor=member, kind="json", name="ci", url=f"{receiver.url}/json/in",
                          secret="worker-secret", language="en")
    worker = start_worker(queue, GPUPOOL_WEBHOOK_ALLOW_HOSTS="127.0.0.1",
                          GPUPOOL_SITE_URL="https://gpupool.example")
    try:
        with transaction.atomic():
            (note,) = notify(recipients=[member], text="Your job train-1 finished.", link="/jobs/1/",
                             project=world.pa1, topic="job")
        ended = WebhookDelivery.objects.filter(webhook=hook).exclude(status__in=["pending", "sending"])
        row = wait_until(ended.first, "the worker to make the attempt")
    finally:
        worker.terminate()
        print(worker.communicate(timeout=60)[0].decode(errors="replace"))
        server.shutdown()
        server.server_close()
    assert (row.status, row.http_status, row.attempt, row.notification_id) == ("delivered", 204, 1, note.pk)
    (received,) = receiver.received
    assert received.verified
    assert received.body["text"] == "Your job train-1 finished."
    assert received.body["link"] == "https://gpupool.example/jobs/1/"
