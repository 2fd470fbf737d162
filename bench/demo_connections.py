"""Database connections of the demo's web server while browser tabs poll the queue (issue 18, item 7).

    python bench/demo_connections.py [--clients 12] [--rounds 40] [--interval 0.25] [--variant gunicorn:60]

Builds the demo centre in a scratch database (bench/scratchdb.py: migrate + ``seed_demo``), then
for each variant starts the web server alone on it with the demo's settings
(``portal.settings.dev``): ``runserver --noreload`` (what ``make demo`` ran before) and gunicorn as
``scripts/devenv.py`` now starts it, each with ``DB_CONN_MAX_AGE`` 60 (the default) and 0. Each
client is one signed-in keep-alive session, as a browser tab is; it opens the queue page once and
then asks for the queue table ``--rounds`` times, ``--interval`` s apart (a tab polls every 5 s;
faster here, so a short run overlaps many requests). Meanwhile a sampler reads PostgreSQL's
``pg_stat_activity`` for the scratch database every 50 ms (from the ``postgres`` database, so it
never counts itself).

Prints one JSON object: per variant the most connections seen at once, requests, server errors
(5xx or a failed request) and p50 / p95 latency (ms). Needs DATABASE_URL and REDIS_URL.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratchdb import scratch_django  # noqa: E402

DEMO_PASSWORD = "gpupool-demo"  # the demo's printed password
USERS = ("alice", "bob", "ai-admin", "admin")  # tabs of several personas, as on a demo day
VARIANTS = (("runserver", 60), ("runserver", 0), ("gunicorn", 60), ("gunicorn", 0))


def devenv():
    """scripts/devenv.py as a module: the bench starts gunicorn exactly as the demo does."""
    spec = importlib.util.spec_from_file_location("devenv", ROOT / "scripts" / "devenv.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- clients


def sign_in(base: str, username: str, password: str = DEMO_PASSWORD) -> requests.Session:
    """A browser tab: a keep-alive session signed in through the real sign-in form."""
    session = requests.Session()
    form = session.get(f"{base}/accounts/login/", timeout=60)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    answer = session.post(
        f"{base}/accounts/login/",
        data={"csrfmiddlewaretoken": token, "username": username, "password": password},
        headers={"Referer": f"{base}/accounts/login/"},
        allow_redirects=False,
        timeout=60,
    )
    if answer.status_code != 302:
        raise RuntimeError(f"sign-in of {username} answered {answer.status_code}")
    return session


def _tab(base: str, session: requests.Session, rounds: int, interval: float, out: list) -> None:
    paths = ["/jobs/queue/"] + ["/jobs/queue/table/"] * rounds
    for path in paths:
        started = time.perf_counter()
        try:
            status = session.get(base + path, timeout=120, allow_redirects=False).status_code
        except requests.RequestException as error:
            status = type(error).__name__
        out.append((path, status, (time.perf_counter() - started) * 1000))
        time.sleep(interval)


def poll_tabs(base: str, sessions: list[requests.Session], rounds: int, interval: float) -> list:
    """Every session polls at once, one thread each; [(path, status or error name, ms)]."""
    out: list = []
    threads = [threading.Thread(target=_tab, args=(base, s, rounds, interval, out)) for s in sessions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return out


class ConnectionSampler:
    """Samples ``pg_stat_activity`` for one database on its own thread until stopped; keeps the
    most connections seen at once, in all and per ``application_name``."""

    def __init__(self, database_url: str):
        parts = urlsplit(database_url)
        self.database = parts.path.lstrip("/")
        self.admin_url = urlunsplit(parts._replace(path="/postgres"))
        self.most = 0
        self.most_by_app: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ConnectionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            while not self._stop.is_set():
                rows = conn.execute(
                    "SELECT coalesce(application_name, ''), count(*) FROM pg_stat_activity"
                    " WHERE datname = %s GROUP BY 1",
                    [self.database],
                ).fetchall()
                self.samples += 1
                self.most = max(self.most, sum(n for _, n in rows))
                for app, n in rows:
                    self.most_by_app[app] = max(self.most_by_app.get(app, 0), n)
                time.sleep(0.05)


def summary(results: list) -> dict:
    times = sorted(ms for _, status, ms in results if status == 200)
    errors = [status for _, status, _ in results if not (isinstance(status, int) and status < 500)]
    pct = (lambda q: round(times[min(len(times) - 1, int(q * len(times)))], 1)) if times else (lambda q: None)
    return {
        "requests": len(results),
        "statuses": sorted({str(status) for _, status, _ in results}),
        "errors": len(errors),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
    }


# ---------------------------------------------------------------- servers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(server: str, conn_max_age: int, database_url: str) -> tuple[subprocess.Popen, str, Path]:
    port = _free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "portal.settings.dev",
           "DB_CONN_MAX_AGE": str(conn_max_age), "GPUPOOL_DEMO": "1"}
    if server == "runserver":  # what `make demo` ran before issue 18
        command = [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]
    else:
        command = devenv()._gunicorn(sys.executable, port, devenv().WEB_WORKERS)
    log = Path(tempfile.gettempdir()) / f"demo-connections-{server}-{os.getpid()}.log"
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=open(log, "wb"))  # noqa: SIM115 - the child holds it
    base = f"http://127.0.0.1:{port}"
    while True:  # readiness: until /healthz answers (or the server died)
        if proc.poll() is not None:
            raise SystemExit(f"{server} exited: {log.read_text()[-2000:]}")
        try:
            if requests.get(base + "/healthz", timeout=5).status_code == 200:
                return proc, base, log
        except requests.RequestException:
            pass
        time.sleep(0.2)


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def measure(server: str, conn_max_age: int, database_url: str, clients: int, rounds: int,
            interval: float) -> dict:
    proc, base, _ = _start(server, conn_max_age, database_url)
    try:
        sessions = [sign_in(base, USERS[i % len(USERS)]) for i in range(clients)]
        with ConnectionSampler(database_url) as sampler:
            results = poll_tabs(base, sessions, rounds, interval)
        for session in sessions:
            session.close()
        return {"server": server, "conn_max_age": conn_max_age, "most_connections": sampler.most,
                "by_process": sampler.most_by_app, "samples": sampler.samples, **summary(results)}
    finally:
        _stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--variant", action="append", metavar="SERVER:AGE",
                        help="e.g. gunicorn:60 (repeatable; default: all four, in this order: "
                        + ", ".join(f"{s}:{a}" for s, a in VARIANTS) + ")")
    args = parser.parse_args()
    variants = [(v.split(":")[0], int(v.split(":")[1])) for v in args.variant] if args.variant else VARIANTS
    with scratch_django("portal.settings.dev") as url:  # the demo's password hasher
        from django.core.management import call_command
        from django.db import connections

        call_command("seed_demo", verbosity=0, stdout=open(os.devnull, "w"))  # noqa: SIM115
        connections.close_all()
        runs = [
            measure(server, age, url, args.clients, args.rounds, args.interval) for server, age in variants
        ]
    print(json.dumps({"clients": args.clients, "rounds": args.rounds, "interval_s": args.interval,
                      "web_workers": devenv().WEB_WORKERS, "runs": runs}))


if __name__ == "__main__":
    main()
