"""A real simserver process per test: free port, temp state file, high speed."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jobs.clusters.backends.simulator import SimulatorBackend
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[1]
SPEED = 100.0  # 100 simulated seconds per real second: a 50 s job lasts 0.5 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class SimServer:
    port: int
    state: Path
    speed: float = SPEED
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def backend(self) -> SimulatorBackend:
        return SimulatorBackend(self.url, timeout=5)

    def start(self) -> None:
        cmd = [sys.executable, "-m", "jobs.clusters.backends.simserver", "--port", str(self.port),
               "--state", str(self.state), "--speed", str(self.speed)]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            wait_until(self._healthy, "simserver to answer /healthz", interval=0.02, retry_on=OSError)
        except AssertionError:
            self.stop()
            raise

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"simserver exited: {self.proc.stderr.read().decode()[-2000:]}")
        with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
            return r.status == 200

    def kill9(self) -> None:
        """Die like a crashed process: no handler runs, only what is already on disk survives."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stderr.close()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc.stderr.close()


@pytest.fixture
def simserver(tmp_path):
    server = SimServer(port=_free_port(), state=tmp_path / "sim-state.json")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def fast_simserver(tmp_path):
    """At 10,000× (a log's step line per millisecond): a long log within a second or two."""
    server = SimServer(port=_free_port(), state=tmp_path / "fast-sim-state.json", speed=10_000)
    server.start()
    yield server
    server.stop()
