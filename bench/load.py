"""HTTP load: 100 users against ``gunicorn portal.wsgi -w 2 -k sync`` on a database of 100,000 jobs.

The data is bench/pages.py's (the demo centre plus ``--jobs`` jobs in the states of a working
centre, with their events), then one scheduling cycle so the queue's explanations exist and one
meter run so the ledger is up to date, as beat keeps them in production, and ``VACUUM ANALYZE``
as autovacuum would after such a bulk load (the test server runs with autovacuum off; without
statistics PostgreSQL plans the job lists as if each project had 60 jobs). Gunicorn has the
issue's 2 workers of the image's class (sync, as in the Dockerfile, compose and the kustomize
base) and runs the production settings (``portal.settings.production``: DEBUG
off, manifest static files, a random SECRET_KEY; plain HTTP on loopback, so
``SECURE_SSL_REDIRECT=false``).

Each user is a thread in a closed loop with a think time (uniform ``--think`` seconds, the way
a person browses): it opens a page (queue, job list, a job's status page, dashboard — signed in
with a session cookie), calls an API list endpoint (jobs, filtered jobs, a job's events, quota
usage — with an API token), or submits a job through the API, in the proportions of ``MIX``.
Users start spread over the ramp-up; only requests after it count.

Why not locust: it needs gevent's monkey-patching, which must happen before anything else is
imported and does not mix with this process also holding Django and psycopg (to build the data
and sign the users in); and a closed loop of threads with a think time is all the scenario
needs. The driver uses ~10 % of one core at this rate, so it does not starve the server.

Prints one JSON object: jobs_in_db, users, duration_s, requests, errors, throughput_rps and
p50 / p95 / p99 (ms) per group (pages, api_lists, submits) and per endpoint.
Needs DATABASE_URL and REDIS_URL; works in a scratch database (bench/scratchdb.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratchdb import scratch_django  # noqa: E402

# group, endpoint name, weight
MIX = (
    ("pages", "queue", 20),
    ("pages", "job_list", 15),
    ("pages", "job_status", 20),
    ("pages", "dashboard", 5),
    ("api_lists", "api_jobs", 12),
    ("api_lists", "api_jobs_queued", 8),
    ("api_lists", "api_job_events", 5),
    ("api_lists", "api_quota_usage", 5),
    ("submits", "api_submit", 10),
)
TARGETS_P95_MS = {"pages": 300, "api_lists": 150}
MEMBERS = ("alice", "bob", "carol", "dave", "nlp-lead", "ai-admin", "admin")


# ---------------------------------------------------------------- data and sign-in


def _build(jobs: int, seed: int) -> dict:
    from pages import _populate

    from billing.meter import usage_meter
    from jobs.models import Job
    from jobs.scheduling.cycle import schedule_once

    started = time.perf_counter()
    _populate(jobs, seed)
    schedule_once()
    # As in production, where beat meters every 10 minutes: the pages that show usage read the
    # ledger plus only the unmetered tail, not every job's whole history.
    usage_meter()
    from django.db import connection

    with connection.cursor() as cursor:  # VACUUM refuses to run in a transaction: autocommit here
        cursor.execute("VACUUM ANALYZE")
    return {"jobs_in_db": Job.objects.count(), "build_s": round(time.perf_counter() - started, 1)}


def _credentials() -> list[dict]:
    """Per persona: a session (as a sign-in would leave it), an API token, what it may see."""
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from jobs.selectors import submittable_projects, visible_jobs
    from portal.models import User
    from portal.tokens import api_token_create
    from quotas.models import QuotaNode

    out = []
    for user in User.objects.filter(username__in=MEMBERS):
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        project = submittable_projects(user).first()
        flavor = QuotaNode.objects.filter(project=project).select_related("flavor").first().flavor
        out.append({
            "user": user.username,
            "cookie": f"sessionid={session.session_key}",
            "token": api_token_create(actor=user, name="bench").secret,
            "job_ids": list(visible_jobs(user).order_by("-id").values_list("pk", flat=True)[:500]),
            "project": project.pk,
            "flavor": flavor.name,
            "one_gpu_milli": 500 if flavor.shareable and flavor.fraction == 1 else None,
        })
    return out


# ---------------------------------------------------------------- the server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# One random key for the server and for this process, which signs the users' sessions: with two
# keys every session cookie failed its signature ("Session data corrupted"), the pages answered
# with a redirect to the sign-in page and the bench timed that page instead.
SECRET_KEY = secrets.token_urlsafe(48)


def server_env() -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.production",
            "SECRET_KEY": SECRET_KEY, "ALLOWED_HOSTS": "127.0.0.1,localhost",
            "GPUPOOL_METRICS_TOKEN": secrets.token_urlsafe(24),
            "SECURE_SSL_REDIRECT": "false", "LOG_LEVEL": "WARNING"}


WORKERS = 2  # the figure
WORKER_CLASS = "sync"  # the image's (Dockerfile, docker-compose.yml, deploy/kubernetes/base/web.yaml)


def start_gunicorn(workers: int = WORKERS, worker_class: str = WORKER_CLASS) -> tuple[subprocess.Popen, str]:
    env = server_env()
    subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
                   cwd=ROOT, env=env, check=True)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "portal.wsgi", "-w", str(workers), "-k", worker_class,
         "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--timeout", "60"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=open(_log(), "wb"))  # noqa: SIM115
    url = f"http://127.0.0.1:{port}"
    _wait_healthy(proc, url)
    return proc, url


def _log() -> Path:
    return Path(tempfile.gettempdir()) / f"h4load-gunicorn-{os.getpid()}.log"


def _wait_healthy(proc: subprocess.Popen, url: str) -> None:
    import requests

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"gunicorn exited: {_log().read_text()[-2000:]}")
        try:
            if requests.get(url + "/healthz", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise SystemExit("gunicorn did not answer /healthz within 60 s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------- the users


def _request(session, url: str, cred: dict, endpoint: str, rng: random.Random):
    """One request of the mix; pages carry the session cookie, API calls the token. Redirects
    are not followed: a page that sends the user to the sign-in page is an error, not a page."""
    page = {"Cookie": cred["cookie"]}
    api = {"Authorization": f"Token {cred['token']}"}
    job = rng.choice(cred["job_ids"]) if cred["job_ids"] else 0
    if endpoint == "queue":
        return session.get(url + "/jobs/queue/", headers=page)
    if endpoint == "job_list":
        return session.get(url + "/jobs/", headers=page)
    if endpoint == "job_status":
        return session.get(url + f"/jobs/{job}/", headers=page)
    if endpoint == "dashboard":
        return session.get(url + "/", headers=page)
    if endpoint == "api_jobs":
        return session.get(url + "/api/v1/jobs/", headers=api)
    if endpoint == "api_jobs_queued":
        return session.get(url + "/api/v1/jobs/?state=queued", headers=api)
    if endpoint == "api_job_events":
        return session.get(url + f"/api/v1/jobs/{job}/events/", headers=api)
    if endpoint == "api_quota_usage":
        return session.get(url + f"/api/v1/quota-usage/?flavor={cred['flavor']}", headers=api)
    body = {"name": f"load-{rng.randrange(10**9)}", "project": cred["project"], "kind": "training",
            "flavor": cred["flavor"], "workers": 1, "gpus_per_worker": 1, "gpu_milli": cred["one_gpu_milli"],
            "priority": "training", "image": "registry.local/load:1", "max_runtime_seconds": 3600}
    return session.post(url + "/api/v1/jobs/", json=body, headers=api)


def _user(n: int, url: str, cred: dict, clock: dict, think: tuple[float, float], out: list, seed: int):
    import requests

    rng = random.Random(seed * 1000 + n)
    endpoints = [(g, e) for g, e, _w in MIX]
    weights = [w for _g, _e, w in MIX]
    session = requests.Session()
    session.max_redirects = 0
    # A connection per request, as the proxy in front of gunicorn opens them; sync workers keep
    # none alive (with gthread's 2 s keep-alive, connections idle through a longer think time
    # were closed by the server just as the client reused them: ConnectionError).
    session.headers["Connection"] = "close"
    time.sleep(rng.uniform(0, clock["ramp"]))
    while time.monotonic() < clock["end"]:
        group, endpoint = rng.choices(endpoints, weights)[0]
        started = time.monotonic()
        try:
            status = _request(session, url, cred, endpoint, rng).status_code
        except requests.RequestException as exc:
            status = type(exc).__name__
        elapsed = (time.monotonic() - started) * 1000
        out.append((group, endpoint, elapsed, status, started >= clock["measure_from"]))
        time.sleep(rng.uniform(*think))


def drive(url: str, creds: list[dict], users: int, duration: float, ramp: float, think, seed: int) -> list:
    now = time.monotonic()
    clock = {"ramp": ramp, "measure_from": now + ramp, "end": now + ramp + duration}
    out: list = []
    threads = [
        threading.Thread(target=_user, args=(n, url, creds[n % len(creds)], clock, think, out, seed))
        for n in range(users)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=ramp + duration + 120)
    return out


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 1) if values else 0.0


def summarise(everything: list, duration: float) -> dict:
    """Figures over the measured requests (after the ramp-up); errors over all of them."""
    samples = [s for s in everything if s[4]]
    by_group, by_endpoint = defaultdict(list), defaultdict(list)
    errors: dict[str, int] = defaultdict(int)
    for _group, endpoint, _ms, status, _measured in everything:
        if not (status in (200, 201) if isinstance(status, int) else False):
            errors[f"{endpoint}:{status}"] += 1
    for group, endpoint, ms, _status, _measured in samples:
        by_group[group].append(ms)
        by_endpoint[endpoint].append(ms)

    def stats(values):
        return {"n": len(values), "p50_ms": _pct(values, 0.5), "p95_ms": _pct(values, 0.95),
                "p99_ms": _pct(values, 0.99), "max_ms": _pct(values, 1.0)}

    groups = {g: stats(v) for g, v in by_group.items()}
    return {
        "duration_s": duration,
        "requests": len(samples),
        "errors": sum(errors.values()),
        "submits_created": sum(1 for s in everything if s[1] == "api_submit" and s[3] == 201),
        "error_kinds": dict(errors),
        "throughput_rps": round(len(samples) / duration, 1),
        **groups,
        "targets_met": all(groups.get(g, {}).get("p95_ms", 0) < t for g, t in TARGETS_P95_MS.items())
        and not errors,
        "endpoints": {e: stats(v) for e, v in sorted(by_endpoint.items())},
    }


def run(jobs: int, users: int, duration: float, ramp: float, think: tuple[float, float], seed: int) -> dict:
    with scratch_django():
        data = _build(jobs, seed)
        from django.conf import settings

        settings.SECRET_KEY = SECRET_KEY  # the sessions below must verify in the server
        creds = _credentials()
        from django.db import connections

        connections.close_all()  # the server has the database to itself while it is measured
        proc, url = start_gunicorn()
        try:
            samples = drive(url, creds, users, duration, ramp, think, seed)
        finally:
            stop(proc)
        from jobs.models import Job

        data["submitted_jobs_in_db"] = Job.objects.filter(name__startswith="load-").count()
    return {**data, "users": users, "gunicorn_workers": WORKERS, "gunicorn_worker_class": WORKER_CLASS,
            "think_s": list(think), "ramp_s": ramp, **summarise(samples, duration)}


if __name__ == "__main__":
    import logging

    logging.disable(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--duration", type=float, default=120.0, help="measured seconds, after the ramp-up")
    parser.add_argument("--ramp", type=float, default=20.0)
    parser.add_argument("--think", type=float, nargs=2, default=(1.0, 5.0), metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, 20 users, 15 s")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.users, args.duration, args.ramp = 2_000, 20, 15.0, 3.0
    print(json.dumps(run(args.jobs, args.users, args.duration, args.ramp, tuple(args.think), args.seed)))
