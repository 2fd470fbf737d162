# gpupool: one image for every process (web, Celery worker and beat, migrations, the simulated
# cluster). Build: `docker build -t gpupool:0.1.0 .`; run as in docker-compose.yml or
# deploy/kubernetes (docs/deploy.md).

# --- build: the pinned dependency set in a virtualenv ------------------------------------
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# python-ldap (LDAP sign-in, docs/identity.md) is compiled against OpenLDAP's and SASL's headers.
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev libldap2-dev libsasl2-dev \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
# Only what pip needs: the dependency layer is rebuilt when pyproject.toml changes, not the code.
# (pyproject declares no packages: this installs the pinned dependencies; the code runs from /app.)
COPY pyproject.toml README.md ./
RUN pip install --upgrade pip && pip install .

# --- runtime -------------------------------------------------------------------------------
FROM python:3.11-slim
# The shared libraries python-ldap links to.
RUN apt-get update && apt-get install -y --no-install-recommends libldap-2.5-0 libsasl2-2 \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 gpupool \
 && useradd --system --uid 10001 --gid gpupool --home-dir /app --no-create-home \
      --shell /usr/sbin/nologin gpupool
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=portal.settings.production
WORKDIR /app
# The code stays owned by root: the portal never writes to it (read-only root filesystem in
# Kubernetes; /tmp is the only writable place).
COPY . .
# Byte-code compiled now, since nothing can write __pycache__ at run time.
RUN python -m compileall -q portal quotas jobs billing
# Static files are collected into the image (production serves them with WhiteNoise's
# manifest storage). Production settings insist on these variables; nothing connects to them.
RUN SECRET_KEY=collectstatic-only-0000000000000000000000000000000000000000000000 \
    ALLOWED_HOSTS=build DATABASE_URL=postgresql://build@localhost/build REDIS_URL=redis://localhost:6379/0 \
    GPUPOOL_METRICS_TOKEN=collectstatic-only-token \
    python manage.py collectstatic --noinput
USER 10001:10001
EXPOSE 8000
# Docker's own check (compose); Kubernetes uses the probes in deploy/kubernetes/base/web.yaml.
# /healthz is 200 only when PostgreSQL and Redis answer. Worker and beat override it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
# Sync workers, one request each, behind a proxy that buffers slow clients (the ingress): the
# requests are CPU-bound Python, and threads in a worker share one GIL and hold connections that
# another worker could serve at once — with 4 threads the load run's p95s were about twice as
# long (docs/performance.md, "Load"). Scale with workers (about two per core) and replicas.
CMD ["gunicorn", "portal.wsgi:application", "--bind=0.0.0.0:8000", "--workers=3", "--worker-class=sync", \
     "--worker-tmp-dir=/tmp", "--timeout=60"]
