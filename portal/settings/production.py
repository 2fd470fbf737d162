"""Production: every secret and address must come from the environment; nothing insecure
is defaulted. Importing this module without them raises ImproperlyConfigured at start-up."""

from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list, env_str

from .base import *  # noqa: F403

DEBUG = False
SECRET_KEY = env_str("SECRET_KEY")
if len(SECRET_KEY) < 50 or SECRET_KEY.startswith(("dev-", "test-")):
    raise ImproperlyConfigured("SECRET_KEY must be a random string of at least 50 characters.")
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [])
if not ALLOWED_HOSTS:
    raise ImproperlyConfigured("Set ALLOWED_HOSTS to the portal's host names.")
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# /metrics names departments: it is never open to the world in production.
if not GPUPOOL["METRICS_TOKEN"] and not GPUPOOL["METRICS_ALLOW_NETWORKS"]:  # noqa: F405
    raise ImproperlyConfigured(
        "Set GPUPOOL_METRICS_TOKEN (the scraper sends it as a Bearer token) or "
        "GPUPOOL_METRICS_ALLOW_NETWORKS (e.g. 10.0.0.0/8): /metrics is not served to everyone."
    )
if GPUPOOL["METRICS_TOKEN"] and len(GPUPOOL["METRICS_TOKEN"]) < 16:  # noqa: F405
    raise ImproperlyConfigured("GPUPOOL_METRICS_TOKEN must be at least 16 characters.")

# Behind a TLS-terminating proxy (the default) its X-Forwarded-Proto says whether the request was https.
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("SECURE_BEHIND_PROXY", True) else None
)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
