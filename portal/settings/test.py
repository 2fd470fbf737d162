"""Settings for the test suite: the real PostgreSQL and Redis, nothing faked."""

import os

from portal.env import env_str

from .base import *  # noqa: F403
from .base import CACHES, GPUPOOL

# pytest-xdist runs the suite in worker processes (gw0, gw1, ...) that share one Redis database:
# each worker keeps its own cache keys and its own Celery queue, as pytest-django gives each its
# own test database (test_<name>_gw0). The processes a test starts (gunicorn, Celery, the demo)
# inherit PYTEST_XDIST_WORKER, so they use the same keys and queue as the test that started them.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")

DEBUG = False
SECRET_KEY = env_str("SECRET_KEY", "test-only-key")
# Fast hashing keeps persona fixtures cheap; the algorithm is not under test.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
# Every test client and live server signs in from 127.0.0.1, and the per-address count of wrong
# passwords outlives a test (Redis): the suite's own failures must not lock out the browser tests,
# which sign in through the form. The lockout tests set the limit they test (tests/security).
LOGIN_ADDRESS_FAILURE_LIMIT = 1_000_000
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
GPUPOOL = {**GPUPOOL, "DEMO": False}
# Tasks the code under test sends go to a queue no demo worker consumes.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "gpupool-test")
if XDIST_WORKER and os.environ.get("GPUPOOL_XDIST_QUEUE") != XDIST_WORKER:
    # The worker's own queue, written back to the environment once (the marker variable): the
    # processes a test starts inherit it, and one started on a private queue (CELERY_QUEUE=test-…,
    # tests/celery_procs.py) keeps that queue as it is, the name its `celery worker -Q` consumes.
    CELERY_TASK_DEFAULT_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}-{XDIST_WORKER}"
    os.environ["CELERY_QUEUE"] = CELERY_TASK_DEFAULT_QUEUE
    os.environ["GPUPOOL_XDIST_QUEUE"] = XDIST_WORKER
if XDIST_WORKER:
    # The autouse cache clean-up (tests/conftest.py) deletes this prefix's keys only.
    _prefix = f"{CACHES['default']['KEY_PREFIX']}-{XDIST_WORKER}"
    CACHES = {"default": {**CACHES["default"], "KEY_PREFIX": _prefix}}
# Static files come from the finders (no collectstatic outside production).
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True
