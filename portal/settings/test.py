"""Settings for the test suite: the real PostgreSQL and Redis, nothing faked."""

from portal.env import env_str

from .base import *  # noqa: F403
from .base import GPUPOOL

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
# Static files come from the finders (no collectstatic outside production).
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True
