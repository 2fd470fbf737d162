"""Settings shared by every environment. Environment-specific modules override a few names.

Everything a deployment varies is read from the environment through ``portal.env``.
"""

from pathlib import Path

from django.utils.translation import gettext_lazy as _

from portal.env import env_bool, env_int, env_list, env_str, parse_database_url, redis_urls

BASE_DIR = Path(__file__).resolve().parent.parent.parent

DEBUG = False
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "portal.admin_config.PortalAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "django_htmx",
    # Order is the dependency order: portal ← quotas ← jobs ← billing.
    "portal",
    "quotas",
    "jobs",
    "billing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"
AUTH_USER_MODEL = "portal.User"
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.template.context_processors.tz",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context.site",
            ],
        },
    },
]

# --- data stores -------------------------------------------------------------------------
DATABASES = {"default": parse_database_url(env_str("DATABASE_URL"))}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DB_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
CELERY_BROKER_URL, REDIS_CLIENT_URL = redis_urls(REDIS_URL)
CELERY_RESULT_BACKEND = CELERY_BROKER_URL
CELERY_TASK_ACKS_LATE = True  # a task killed mid-run is redelivered; tasks are idempotent
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_QUEUE", "gpupool")
CELERY_RESULT_EXPIRES = 3600
CELERY_BEAT_SCHEDULE = {
    # DESIGN §5: a cycle every few seconds, plus one on every submit/finish.
    "scheduling-cycle": {"task": "jobs.schedule_cycle", "schedule": env_int("SCHEDULE_INTERVAL_SECONDS", 5),
                         "options": {"expires": 10}},
    "inventory": {"task": "jobs.sync_inventory", "schedule": env_int("INVENTORY_INTERVAL_SECONDS", 300),
                  "options": {"expires": 250}},
    "expire-jobs": {"task": "jobs.expire_jobs", "schedule": 60.0, "options": {"expires": 50}},
    "gpu-metrics": {"task": "jobs.poll_metrics", "schedule": 60.0, "options": {"expires": 50}},
    "backend-work": {"task": "jobs.backend_work", "schedule": env_int("SYNC_INTERVAL_SECONDS", 10),
                     "options": {"expires": 20}},
}
CELERY_TIMEZONE = "UTC"

CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_CLIENT_URL,
        "KEY_PREFIX": "gpupool",
    }
}

# --- i18n and time -----------------------------------------------------------------------
LANGUAGE_CODE = "zh-hans"
LANGUAGES = [("zh-hans", _("Simplified Chinese")), ("en", _("English"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
USE_TZ = True
# Months and quota windows are in the site zone (DESIGN §7); storage is always UTC.
TIME_ZONE = env_str("TIME_ZONE", "Asia/Shanghai")

# --- static ------------------------------------------------------------------------------
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / ".run" / "staticfiles"

# --- API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "EXCEPTION_HANDLER": "portal.api_base.exception_handler",
    "PAGE_SIZE": 100,
    "COERCE_DECIMAL_TO_STRING": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpupool API",
    "DESCRIPTION": "GPU resource pool: tenancy, resources, quotas, jobs, billing.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "NodeStateEnum": "quotas.models.NodeState",
        "LoanStateEnum": "quotas.models.LoanState",
        "ClusterKindEnum": "quotas.models.ClusterKind",
        "JobKindEnum": "jobs.models.JobKind",
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the cookie-less meta tag; see base.html
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# --- gpupool -----------------------------------------------------------------------------
GPUPOOL = {
    "CURRENCY": env_str("GPUPOOL_CURRENCY", "CNY"),
    "DEMO": env_bool("GPUPOOL_DEMO", False),
    "PROMETHEUS_URL": env_str("PROMETHEUS_URL", "http://127.0.0.1:9090"),
    # The DCGM label naming the job on a GPU series: dcgm-exporter's HPC job mapping writes
    # hpc_job (our simulator too); a Kubernetes setup may relabel pod names into it.
    "METRICS_JOB_LABEL": env_str("GPUPOOL_METRICS_JOB_LABEL", "hpc_job"),
    "IDLE_THRESHOLD_PCT": env_int("GPUPOOL_IDLE_THRESHOLD_PCT", 5),
    "IDLE_WINDOW_MINUTES": env_int("GPUPOOL_IDLE_WINDOW_MINUTES", 120),
    # When set, GET /metrics needs "Authorization: Bearer <token>" (labels name departments).
    "METRICS_TOKEN": env_str("GPUPOOL_METRICS_TOKEN", ""),
    "DEV_LIFETIME_SECONDS": env_int("GPUPOOL_DEV_LIFETIME_SECONDS", 86400),  # DESIGN §4: 24 h
    "DEV_JOBS_PER_USER": env_int("GPUPOOL_DEV_JOBS_PER_USER", 2),
}
