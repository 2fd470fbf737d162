"""Local development and the demo. Never used in production (see production.py)."""

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
