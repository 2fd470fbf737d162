"""A real Prometheus (Debian's package) for tests: scrapes given targets every second."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.waiting import wait_until


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, workdir: Path, targets: list[str]):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        # honor_labels: the exporter's own labels win over the scrape job's (as for dcgm-exporter).
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n"
            "  - job_name: dcgm\n    honor_labels: true\n    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
        self.started = time.time()
        self.proc = subprocess.Popen(
            [
                shutil.which("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def query(self, expr: str) -> list:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)["data"]["result"]

    def wait_for_scrapes(self, count: int = 2) -> None:
        """The first scrape comes ~6 s after start (REAL-BACKENDS.md §2): wait for fresh ones."""
        wait_until(
            lambda: self.query(f'count_over_time(up{{job="dcgm"}}[1m]) >= {count}'),
            f"{count} scrapes by Prometheus",
            interval=0.5,
            retry_on=OSError,  # not listening yet
        )

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def prometheus_for(tmp_path):
    """``prometheus_for(["127.0.0.1:port", …])`` starts a Prometheus scraping those targets."""
    if shutil.which("prometheus") is None:
        pytest.fail("prometheus is not installed (.ci/run installs Debian's package)")
    started = []

    def start(targets):
        prom = Prometheus(tmp_path, targets)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()
