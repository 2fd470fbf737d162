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
    def __init__(self, workdir: Path, targets: list[str], scrape_configs: list[dict] | None = None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        # honor_labels: the exporter's own labels win over the scrape job's (as for dcgm-exporter).
        scrapes = scrape_configs or [
            {"job_name": "dcgm", "honor_labels": True, "static_configs": [{"targets": targets}]}
        ]
        config.write_text(
            json.dumps(
                {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": scrapes}
            )
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

    def wait_for_scrapes(self, count: int = 2, job: str = "dcgm") -> None:
        """The first scrape comes ~6 s after start (REAL-BACKENDS.md §2): wait for fresh ones."""
        wait_until(
            lambda: self.query(f'count_over_time(up{{job="{job}"}}[1m]) >= {count}'),
            f"{count} scrapes of {job} by Prometheus",
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

    def start(targets, scrape_configs=None):
        prom = Prometheus(tmp_path, targets, scrape_configs)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()
