"""Settings shared by every environment. Environment-specific modules override a few names.

Everything a deployment varies is read from the environment through ``portal.env``.
"""

import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from portal.env import env_bool, env_int, env_list, env_str, parse_database_url, parse_networks, redis_urls

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
    "django.forms",  # its widget templates, which templates/django/forms/ overrides in part
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by WhiteNoise like ours
    "django_htmx",
    # Order is the dependency order (docs/architecture.md): portal ← quotas ← jobs ← clusters ←
    # native ← whatif ← billing; the pure engine (jobs.scheduler) is not an app.
    "portal",
    "quotas",
    "jobs",
    "jobs.clusters",
    "jobs.native",
    "jobs.whatif",
    "billing",
]

MIDDLEWARE = [
    # First, so every response (redirects, errors) carries X-Request-ID and every log line its id.
    "portal.logs.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "portal.security.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "portal.security.RejectNulMiddleware",  # after LocaleMiddleware: its message is translated
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
# Sign-in lockout (portal/signin.py; the form, the API token endpoint and the admin share it): an
# account is refused to one address after LOGIN_FAILURE_LIMIT wrong passwords from there, and an
# address is refused altogether after LOGIN_ADDRESS_FAILURE_LIMIT for any accounts, for
# LOGIN_LOCKOUT_SECONDS from the first failure.
LOGIN_FAILURE_LIMIT = env_int("LOGIN_FAILURE_LIMIT", 5)
LOGIN_ADDRESS_FAILURE_LIMIT = env_int("LOGIN_ADDRESS_FAILURE_LIMIT", 50)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 900)
# Proxies in front of gunicorn that append to X-Forwarded-For (the ingress: 1). 0: clients connect
# directly and X-Forwarded-For is ignored. portal.security.client_address; DRF's NUM_PROXIES.
TRUSTED_PROXIES = env_int("GPUPOOL_TRUSTED_PROXIES", 0)
if TRUSTED_PROXIES < 0:
    raise ImproperlyConfigured("GPUPOOL_TRUSTED_PROXIES must be 0 or more.")
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

# --- sign-in backends: GPUPOOL_AUTH_BACKENDS (local, ldap, oidc), docs/identity.md ---------
# ``local`` (Django's ModelBackend) stays first: break-glass admins sign in while the directory is down.
AUTH_BACKENDS_ON = env_list("GPUPOOL_AUTH_BACKENDS", ["local"])
AUTH_BACKEND_CLASSES = {
    "local": "django.contrib.auth.backends.ModelBackend",
    "ldap": "portal.ldap_auth.DirectoryLDAPBackend",
}
if unknown := set(AUTH_BACKENDS_ON) - {"local", "ldap", "oidc"}:
    raise ImproperlyConfigured(f"GPUPOOL_AUTH_BACKENDS: unknown {sorted(unknown)} (local, ldap, oidc).")
AUTHENTICATION_BACKENDS = [path for name, path in AUTH_BACKEND_CLASSES.items() if name in AUTH_BACKENDS_ON]
# The OIDC backend answers only on its own callback and only when OIDC["ENABLED"] ("oidc" above):
# always listed, so turning OIDC on or off is one setting.
AUTHENTICATION_BACKENDS.append("portal.oidc.OIDCBackend")
from portal.settings.ldap import *  # noqa: E402, F403  (AUTH_LDAP_*, LDAP_SYNC: the LDAP directory)

LDAP_SYNC_INTERVAL = env_int("GPUPOOL_LDAP_SYNC_INTERVAL_SECONDS", 900, min_value=60)

# Widgets render through the project's templates, so templates/django/forms/widgets/attrs.html
# (no `maxlength`: a browser would cut what is typed without a word, issue 32 item 2) applies to
# every form, the admin's included.
FORM_RENDERER = "django.forms.renderers.TemplatesSetting"

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
    # Issue 24: when will each waiting job start — the engine run forward over the running jobs' limits.
    "start-estimates": {"task": "jobs.estimate_starts",
                        "schedule": env_int("START_ESTIMATE_INTERVAL_SECONDS", 60),
                        "options": {"expires": 50}},
    "inventory": {"task": "jobs.sync_inventory", "schedule": env_int("INVENTORY_INTERVAL_SECONDS", 300),
                  "options": {"expires": 250}},
    "expire-jobs": {"task": "jobs.expire_jobs", "schedule": 60.0, "options": {"expires": 50}},
    # DESIGN §17: dispatched jobs their backend has not started within the start timeout are requeued.
    "start-timeouts": {"task": "jobs.start_timeouts", "schedule": 60.0, "options": {"expires": 50}},
    "gpu-metrics": {"task": "jobs.poll_metrics", "schedule": 60.0, "options": {"expires": 50}},
    # DESIGN §16: idle jobs are warned, then stopped or made preemptible (docs/scheduling.md "Idle policy").
    "idle-policy": {"task": "jobs.idle_policy",
                    "schedule": env_int("IDLE_POLICY_INTERVAL_SECONDS", 60, min_value=10),
                    "options": {"expires": 50}},
    # Inference jobs with an autoscale query follow their load (docs/scheduling.md "Autoscaling").
    "autoscale": {"task": "jobs.autoscale", "schedule": env_int("AUTOSCALE_INTERVAL_SECONDS", 30),
                  "options": {"expires": 25}},
    "backend-work": {"task": "jobs.backend_work", "schedule": env_int("SYNC_INTERVAL_SECONDS", 10),
                     "options": {"expires": 20}},
    # DESIGN §6: overdue approval steps escalate or expire; unsent notification mails retry.
    "approval-deadlines": {"task": "portal.approvals_tick", "schedule": 60.0, "options": {"expires": 50}},
    # Webhook deliveries that are due (a retry's backoff has passed, a lost message, a crashed send).
    "webhooks": {"task": "portal.webhooks_tick", "schedule": 60.0, "options": {"expires": 50}},
    # DESIGN §3.7: loans past their end are marked returned (effective quota already ignores them).
    "return-loans": {"task": "quotas.return_loans", "schedule": 60.0, "options": {"expires": 50}},
    # Kueue / Volcano queues follow the effective quota, which windows and loans change on the clock.
    "scheduler-queues": {"task": "jobs.sync_scheduler_queues", "schedule": 60.0, "options": {"expires": 50}},
    # Issue 25: policy-advisor candidates whose worker died are replayed again (docs/advisor.md).
    "advisor": {"task": "jobs.advisor_tick", "schedule": env_int("ADVISOR_TICK_SECONDS", 30, min_value=1),
                "options": {"expires": 25}},
    # DESIGN §11: Slurm accounts, associations and QOS follow the quota tree (also on every write).
    "slurm-accounts": {"task": "jobs.sync_slurm_accounts",
                       "schedule": env_int("SLURM_ACCOUNTS_INTERVAL_SECONDS", 300, min_value=10),
                       "options": {"expires": env_int("SLURM_ACCOUNTS_INTERVAL_SECONDS", 300, min_value=10)}},
    # DESIGN §17: reservations and maintenance windows as Slurm reservations (also on every change).
    "slurm-reservations": {"task": "jobs.sync_slurm_reservations",
                           "schedule": env_int("SLURM_ACCOUNTS_INTERVAL_SECONDS", 300, min_value=10),
                           "options": {"expires": env_int("SLURM_ACCOUNTS_INTERVAL_SECONDS", 300,
                                                          min_value=10)}},
    # DESIGN §11: jobs submitted to the clusters directly (sbatch: jobs.native.native_slurm; Kubernetes
    # pods: jobs.native.native_k8s), and the ResourceQuotas that cap pods, which windows and loans
    # change on the clock.
    "native-import": {"task": "jobs.native_import", "schedule": env_int("NATIVE_IMPORT_INTERVAL_SECONDS", 60),
                      "options": {"expires": 50}},
    # DESIGN §7: the meter brings the usage ledger up to the last full hour (idempotent).
    "meter": {"task": "billing.meter", "schedule": env_int("METER_INTERVAL_SECONDS", 600),
              "options": {"expires": 500}},
    # DESIGN §3.9: budgets at 80 % / 100 % notify their owners, once per threshold and month.
    "budget-alerts": {"task": "billing.budget_alerts",
                      "schedule": env_int("BUDGET_ALERT_INTERVAL_SECONDS", 300), "options": {"expires": 250}},
    # DESIGN §12: users and groups from the LDAP directory (only when the ldap backend is on).
    **({"ldap-sync": {"task": "portal.sync_ldap", "schedule": LDAP_SYNC_INTERVAL,
                      "options": {"expires": LDAP_SYNC_INTERVAL}}} if "ldap" in AUTH_BACKENDS_ON else {}),
    # Personal API tokens revoked or expired long ago are deleted (portal/tokens.py).
    "api-tokens-prune": {"task": "portal.api_tokens_prune", "schedule": 86400.0,
                         "options": {"expires": 3600}},
}
CELERY_TIMEZONE = "UTC"
# A running advisor candidate whose heartbeat is older than this is taken for lost (its worker
# died) and queued again; its heartbeat is stamped every quarter of it.
ADVISOR_STALE_SECONDS = env_int("ADVISOR_STALE_SECONDS", 120, min_value=4)

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
        # Personal API tokens (portal/tokens.py): hashed at rest, named, expiring, revocable.
        "portal.authentication.ApiTokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "portal.pagination.Pagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    # DRF's parsers with JSON nesting bounded (portal/parsers.py): a deep body is a 400, not a 500.
    "DEFAULT_PARSER_CLASSES": [
        "portal.parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "EXCEPTION_HANDLER": "portal.api_base.exception_handler",
    "NUM_PROXIES": TRUSTED_PROXIES,
    "PAGE_SIZE": 100,
    "COERCE_DECIMAL_TO_STRING": True,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "gpupool API",
    "DESCRIPTION": "GPU resource pool: tenancy, resources, quotas, jobs, billing.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # /api/docs/ loads Swagger UI from our own static files (the pinned drf-spectacular-sidecar),
    # not a CDN's @latest: it works without internet and under the site's CSP unchanged. No
    # validator badge: it would send the schema's URL to validator.swagger.io.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "NodeStateEnum": "quotas.models.NodeState",
        "LoanStateEnum": "quotas.models.LoanState",
        "ClusterKindEnum": "quotas.models.ClusterKind",
        "JobKindEnum": "jobs.models.JobKind",
        "IdleActionEnum": "jobs.idle_models.IdleAction",
        "SubmittableKindEnum": "jobs.models.SUBMITTABLE_KINDS",
        "ApprovalKindEnum": "portal.models.ApprovalKind",
        "ApprovalStateEnum": "portal.models.ApprovalState",
        "ApprovalStepStateEnum": "portal.models.StepState",
        "StatementStateEnum": "billing.models.StatementState",
        "BillingTierEnum": "billing.models.Tier",
        "StatementLineKindEnum": "billing.models.LineKind",
        "ManualAdjustmentKindEnum": "billing.models.ManualKind",
        "ManualAdjustmentStateEnum": "billing.models.ManualState",
        "WebhookKindEnum": "portal.models.WebhookKind",
        "WebhookDeliveryStatusEnum": "portal.models.DeliveryStatus",
        "NotificationTopicEnum": "portal.models.NotificationTopic",
        "QueueStateEnum": "jobs.reservation_models.QueueState",
        "ReservationStateEnum": "jobs.reservation_models.ReservationState",
    },
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Local passwords (docs/identity.md "Local passwords", issue 32 item 12): Argon2id at OWASP's cost
# (portal/hashers.py), where Django's default PBKDF2 spent most of a sign-in. The other hashers are
# Django's defaults, kept so passwords stored before still verify; Django re-hashes each with the
# first on its next sign-in. Not Django's own Argon2 hasher: it has the same algorithm name.
PASSWORD_HASHERS = [
    "portal.hashers.Argon2idPasswordHasher",
    "django.contrib.auth.hashers.PBKDF2PasswordHasher",
    "django.contrib.auth.hashers.PBKDF2SHA1PasswordHasher",
    "django.contrib.auth.hashers.BCryptSHA256PasswordHasher",
    "django.contrib.auth.hashers.ScryptPasswordHasher",
]

SESSION_COOKIE_HTTPONLY = True
# Dev jobs' Ingress hosts check the portal session (docs/environment.md): with the portal at
# gpupool.centre.cn and dev jobs under dev.centre.cn, ".centre.cn" sends the cookie to both.
SESSION_COOKIE_DOMAIN = env_str("SESSION_COOKIE_DOMAIN", "") or None
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the cookie-less meta tag; see base.html
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

# "json" in containers: one JSON object per line with request/task/job ids (portal/logs.py).
LOG_FORMAT = env_str("LOG_FORMAT", "plain")
LOG_REQUESTS = env_bool("LOG_REQUESTS", False)  # one access line per request (gunicorn's is not JSON)
# Celery would replace the root handler with its own text format; JSON logs keep this one.
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "portal.logs.JsonFormatter"}},
    # Tokens, passwords and URL credentials are redacted from whatever a library logs.
    "filters": {"redact": {"()": "portal.security.RedactSecretsFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}
if LOG_FORMAT == "json":
    LOGGING["handlers"]["console"]["formatter"] = "json"

# --- gpupool -----------------------------------------------------------------------------
GPUPOOL = {
    "CURRENCY": env_str("GPUPOOL_CURRENCY", "CNY"),
    "DEMO": env_bool("GPUPOOL_DEMO", False),
    # The demo's project storages (jobs/demo.py): under the demo's run folder, never a fixed
    # folder of the system's temp directory that every demo on the machine shares and leaves.
    "DEMO_STORAGE_DIR": env_str("GPUPOOL_DEMO_STORAGE_DIR", str(BASE_DIR / ".run" / "demo-storage")),
    "PROMETHEUS_URL": env_str("PROMETHEUS_URL", "http://127.0.0.1:9090"),
    # The DCGM label naming the job on a GPU series: dcgm-exporter's HPC job mapping writes
    # hpc_job (our simulator too); a Kubernetes setup may relabel pod names into it.
    "METRICS_JOB_LABEL": env_str("GPUPOOL_METRICS_JOB_LABEL", "hpc_job"),
    # GET /metrics (its labels name departments) answers a request with "Authorization: Bearer
    # <token>" or from one of the networks (client address as portal.security.client_address);
    # with neither set (dev, tests) anyone. Production refuses to start with neither.
    "METRICS_TOKEN": env_str("GPUPOOL_METRICS_TOKEN", ""),
    "METRICS_ALLOW_NETWORKS": parse_networks(
        "GPUPOOL_METRICS_ALLOW_NETWORKS", env_list("GPUPOOL_METRICS_ALLOW_NETWORKS", [])
    ),
    # The centre's aging bound (docs/scheduling.md, "Queueing strategies"): a job waiting longer
    # blocks its project's later jobs and gets a reservation. 0: none. A project may set its own.
    "AGING_BOUND_SECONDS": env_int("GPUPOOL_AGING_BOUND_SECONDS", 0, min_value=0, max_value=90 * 86400),
    "DEV_LIFETIME_SECONDS": env_int("GPUPOOL_DEV_LIFETIME_SECONDS", 86400),  # DESIGN §4: 24 h
    "DEV_JOBS_PER_USER": env_int("GPUPOOL_DEV_JOBS_PER_USER", 2),
    # The centre's maximum runtime per kind, in hours (issue 18 item 6): a longer job is refused,
    # whatever an approver would say; 0: none beyond the 90 days any job may ask for. A job that
    # names no runtime gets its kind's maximum (a dev job: its lifetime). Longer than a
    # department policy's max_runtime_hours (and within this) → approval.
    "MAX_RUNTIME_HOURS": {
        "training": env_int("GPUPOOL_MAX_RUNTIME_HOURS_TRAINING", 0, min_value=0, max_value=90 * 24),
        "inference": env_int("GPUPOOL_MAX_RUNTIME_HOURS_INFERENCE", 0, min_value=0, max_value=90 * 24),
        "dev": env_int("GPUPOOL_MAX_RUNTIME_HOURS_DEV", 72, min_value=0, max_value=90 * 24),
    },
    # History as a trace (docs/replay.md): the longest range one export may cover, in days.
    "HISTORY_MAX_DAYS": env_int("GPUPOOL_HISTORY_MAX_DAYS", 92, min_value=7, max_value=366),
    # Personal API tokens (docs/identity.md "API tokens"): the longest life one may be given, days.
    "API_TOKEN_MAX_DAYS": env_int("GPUPOOL_API_TOKEN_MAX_DAYS", 365, min_value=1, max_value=3660),
    # Time an approver has to decide a step before it escalates (or expires at the top).
    "APPROVAL_STEP_HOURS": env_int("GPUPOOL_APPROVAL_STEP_HOURS", 48),
    # Absolute links in notification mails.
    "SITE_URL": env_str("GPUPOOL_SITE_URL", "http://localhost:8000"),
    # Native Slurm users (docs/backends.md): the sync owns the accounts and QOS named with this
    # prefix, and hangs top-level departments under the parent account (which it never changes).
    "SLURM_ACCOUNT_PREFIX": env_str("GPUPOOL_SLURM_ACCOUNT_PREFIX", "gp_"),
    "SLURM_PARENT_ACCOUNT": env_str("GPUPOOL_SLURM_PARENT_ACCOUNT", "root"),
    "SLURM_ACCOUNTS_INTERVAL_SECONDS": env_int("SLURM_ACCOUNTS_INTERVAL_SECONDS", 300, min_value=10),
    # DESIGN §12: what happens to the jobs of a user the directory disabled ("keep" or "stop").
    "DEPROVISION_JOBS": env_str("GPUPOOL_DEPROVISION_JOBS", "keep"),
    # DESIGN §13: the registries jobs may pull from — hosts ("registry.centre.cn", "docker.io")
    # or host/path prefixes ("nvcr.io/nvidia"); empty: any registry (docs/environment.md).
    "REGISTRY_ALLOWLIST": env_list("GPUPOOL_REGISTRY_ALLOWLIST", []),
    # The domains of dev jobs' Ingress hosts (<job>.<domain>, a Kubernetes cluster's config
    # "ingress_domain"): sign-in may send the user back there (docs/environment.md).
    "DEV_INGRESS_DOMAINS": [d.lower() for d in env_list("GPUPOOL_DEV_INGRESS_DOMAINS", [])],
    # DESIGN §14: the centre's reference card (relative throughput 1.0), and whether statements
    # price normalised card-hours (标准卡时 = card-hours × relative throughput) instead of plain ones.
    "REFERENCE_FLAVOR": env_str("GPUPOOL_REFERENCE_FLAVOR", "A100-80G"),
    "PRICE_NORMALISED_CARD_HOURS": env_bool("GPUPOOL_PRICE_NORMALISED_CARD_HOURS", False),
    # The live log tail on the job page, in bytes (the whole log is a download).
    "LOG_TAIL_BYTES": env_int("GPUPOOL_LOG_TAIL_BYTES", 16384, min_value=1024, max_value=1048576),
    # Webhooks (docs/notifications.md): hosts that may be reached over plain http and at private,
    # loopback or link-local addresses (an in-house relay; the tests' receiver). Everything else:
    # https to a public address only, checked when each request is sent.
    "WEBHOOK_ALLOW_HOSTS": [h.lower() for h in env_list("GPUPOOL_WEBHOOK_ALLOW_HOSTS", [])],
    "WEBHOOK_TIMEOUT_SECONDS": env_int("GPUPOOL_WEBHOOK_TIMEOUT_SECONDS", 10, min_value=1, max_value=60),
}

if GPUPOOL["DEPROVISION_JOBS"] not in ("keep", "stop"):
    raise ImproperlyConfigured("GPUPOOL_DEPROVISION_JOBS: keep or stop.")

if not re.match(r"^[a-z][a-z0-9_]{0,19}$", GPUPOOL["SLURM_ACCOUNT_PREFIX"]):
    raise ImproperlyConfigured("GPUPOOL_SLURM_ACCOUNT_PREFIX: 1–20 of a-z, 0-9 and '_', a letter first.")
if GPUPOOL["SLURM_PARENT_ACCOUNT"].startswith(GPUPOOL["SLURM_ACCOUNT_PREFIX"]):
    raise ImproperlyConfigured("GPUPOOL_SLURM_PARENT_ACCOUNT must not carry GPUPOOL_SLURM_ACCOUNT_PREFIX.")

if 0 < GPUPOOL["MAX_RUNTIME_HOURS"]["dev"] * 3600 < GPUPOOL["DEV_LIFETIME_SECONDS"]:
    raise ImproperlyConfigured(
        "GPUPOOL_DEV_LIFETIME_SECONDS is longer than GPUPOOL_MAX_RUNTIME_HOURS_DEV allows."
    )

# --- billing (DESIGN §7, docs/billing.md); the currency is GPUPOOL["CURRENCY"] -----------
BILLING = {
    # Credit lenders (negative lines) for card-hours other departments borrowed from them.
    "INTERNAL_SETTLEMENT": env_bool("GPUPOOL_INTERNAL_SETTLEMENT", False),
    # The meter stays this far behind now (then rounds down to the hour), so a transition whose
    # transaction committed a little late is in the log before its hour is metered.
    "METER_LAG_SECONDS": env_int("GPUPOOL_METER_LAG_SECONDS", 300),
    "METER_BATCH_JOBS": env_int("GPUPOOL_METER_BATCH_JOBS", 5000),  # jobs per meter transaction
}

# --- e-mail (approval notifications) ------------------------------------------------------
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 20)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "gpupool <gpupool@localhost>")

# --- OpenID Connect sign-in (DESIGN §12, docs/identity.md; portal/oidc.py) ----------------------
# On when GPUPOOL_AUTH_BACKENDS lists "oidc". Endpoints come from the issuer's discovery document
# (read when someone signs in, never at start-up) unless given one by one. Local accounts stay for
# break-glass admins. The OIDC backend only answers on its own callback: harmless to password logins.
OIDC = {
    "ENABLED": "oidc" in AUTH_BACKENDS_ON,
    "ISSUER": env_str("GPUPOOL_OIDC_ISSUER", "").rstrip("/"),
    "AUTHORIZATION_ENDPOINT": env_str("GPUPOOL_OIDC_AUTHORIZATION_ENDPOINT", ""),
    "TOKEN_ENDPOINT": env_str("GPUPOOL_OIDC_TOKEN_ENDPOINT", ""),
    "USERINFO_ENDPOINT": env_str("GPUPOOL_OIDC_USERINFO_ENDPOINT", ""),
    "JWKS_URI": env_str("GPUPOOL_OIDC_JWKS_URI", ""),
    "END_SESSION_ENDPOINT": env_str("GPUPOOL_OIDC_END_SESSION_ENDPOINT", ""),
    "CLIENT_ID": env_str("GPUPOOL_OIDC_CLIENT_ID", ""),
    "CLIENT_SECRET": env_str("GPUPOOL_OIDC_CLIENT_SECRET", ""),
    "SCOPES": env_str("GPUPOOL_OIDC_SCOPES", "openid email profile"),
    "USERNAME_CLAIM": env_str("GPUPOOL_OIDC_USERNAME_CLAIM", "preferred_username"),
    "EMAIL_CLAIM": env_str("GPUPOOL_OIDC_EMAIL_CLAIM", "email"),
    "NAME_CLAIM": env_str("GPUPOOL_OIDC_NAME_CLAIM", "name"),
    "UNIX_NAME_CLAIM": env_str("GPUPOOL_OIDC_UNIX_NAME_CLAIM", ""),
    "GROUPS_CLAIM": env_str("GPUPOOL_OIDC_GROUPS_CLAIM", "groups"),
    "BUTTON_LABEL": env_str("GPUPOOL_OIDC_BUTTON_LABEL", ""),
    "BUTTON_LABEL_ZH_HANS": env_str("GPUPOOL_OIDC_BUTTON_LABEL_ZH_HANS", ""),
    "TIMEOUT_SECONDS": env_int("GPUPOOL_OIDC_TIMEOUT_SECONDS", 10, min_value=1),
    # The account check (portal/oidc_check.py): how often the provider is asked about every user
    # whose sign-in left a refresh token (GPUPOOL_OIDC_SCOPES with offline_access).
    "CHECK_INTERVAL_SECONDS": env_int("GPUPOOL_OIDC_CHECK_INTERVAL_SECONDS", 900, min_value=60),
}
if OIDC["ENABLED"] and not (OIDC["CLIENT_ID"] and OIDC["ISSUER"]):
    raise ImproperlyConfigured("oidc in GPUPOOL_AUTH_BACKENDS needs GPUPOOL_OIDC_ISSUER and _CLIENT_ID.")
if OIDC["ENABLED"]:
    # docs/identity.md "When the provider ends a session or an account".
    CELERY_BEAT_SCHEDULE["oidc-account-check"] = {
        "task": "portal.oidc_check_accounts", "schedule": OIDC["CHECK_INTERVAL_SECONDS"],
        "options": {"expires": OIDC["CHECK_INTERVAL_SECONDS"]},
    }
