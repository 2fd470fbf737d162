import pytest
import redis
from django.conf import settings

from portal import enqueue as enqueue_module
from portal.celery import app
from tests.celery_procs import private_queue


@pytest.fixture
def queue(monkeypatch):
    """A private queue: what the test's code enqueues goes there — where its worker listens, or
    nowhere — and is deleted afterwards (sent as ``portal.enqueue.send`` sends: no result kept)."""
    name = private_queue()
    monkeypatch.setattr(enqueue_module, "send", lambda task, *args, expires=None: app.send_task(
        task, args=args, queue=name, expires=expires, ignore_result=True))
    yield name
    redis.Redis.from_url(settings.REDIS_CLIENT_URL).delete(name)
