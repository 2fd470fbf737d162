"""Local development and the demo. Never used in production (see production.py)."""

import sys

from portal.env import env_str

from .base import *  # noqa: F403

DEBUG = True
# A fixed key is acceptable only here: dev sessions hold no real data.
SECRET_KEY = env_str("SECRET_KEY", "dev-only-insecure-key-do-not-use-in-production")
# Static files come from the finders (no collectstatic outside production).
STATIC_ROOT = None
WHITENOISE_USE_FINDERS = True
# Mails of the demo go to the console log, not to a mail server.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")


def _process_name() -> str:
    """What this process is, as PostgreSQL's ``application_name``: ``pg_stat_activity`` then shows
    which of the demo's processes holds each connection (web, worker, beat, a command), the
    figures behind its connection bound (``scripts/devenv.py``, docs/operations.md)."""
    argv = " ".join(sys.argv[:5])
    if "gunicorn" in argv:
        return "gpupool-web"
    if "celery" in argv:
        return "gpupool-beat" if " beat" in argv else "gpupool-worker"
    return f"gpupool-{sys.argv[1] if len(sys.argv) > 1 else 'python'}"[:63]


DATABASES["default"]["OPTIONS"].setdefault("application_name", _process_name())  # noqa: F405
