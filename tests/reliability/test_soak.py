"""Issue 8, soak (short CI version of ``bench/soak.py``): simulated days of a realistic mix —
gangs, inference, dev jobs with a lifetime, three priorities, node failures, loans that start
and expire — through the real simulator, Celery worker and beat, PostgreSQL and Redis. After
the queue drains: no GPU is held, the cluster runs nothing the portal does not know, no
reservation or queue position is left, the ledger equals the running intervals of the job
events, and the worker's and beat's memory stopped growing in the second half.

The bench runs in its own process (it sets Django up on its own scratch database
``<database>_soak_bench``); the full ≥ 7-day run is reported in docs/performance.md.
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Memory may settle (imports, caches, the warm engine reaching its working set) in the first half;
# a leak would keep growing through the second. Generous: CI machines differ.
WORKER_GROWTH_MIB = 40
BEAT_GROWTH_MIB = 10


def bench_env(suffix: str) -> dict[str, str]:
    """The bench's DATABASE_URL: the tests' database name plus ``suffix`` on the same server (the
    bench adds ``_bench``), so runs against different databases never share a scratch database."""
    parts = urlsplit(os.environ["DATABASE_URL"])
    name = parts.path.lstrip("/") or "postgres"
    return {**os.environ, "DATABASE_URL": urlunsplit(parts._replace(path=f"/{name}_{suffix}"))}


@pytest.fixture(scope="module")
def soak() -> dict:
    done = subprocess.run(
        [sys.executable, "bench/soak.py", "--quick"],
        cwd=ROOT, env=bench_env("soak"), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.celery_worker
def test_soak_leaves_nothing_behind(soak):
    summary = {k: v for k, v in soak.items() if k != "rss_samples"}
    assert soak["simulated_days"] >= 3, summary
    # the mix did what it is for: preemptions and requeues, node failures, loans ending
    assert soak["jobs_submitted"] >= 60, summary
    assert soak["preempted"] > 0 and soak["requeued"] > 0, summary
    # (whether a failed node was running a checkpointing job at that moment depends on timing)
    assert soak["node_failures_injected"] > 0, summary
    assert soak["loans_expired"] == soak["loans_created"] > 0, summary
    # drained: every job ended, nothing held, nothing orphaned or reserved
    assert soak["unfinished_jobs"] == [], summary
    assert soak["jobs_holding"] == 0, summary
    assert all(used == 0 for used in soak["final_usage"].values()), summary
    assert soak["orphan_backend_jobs"] == 0 and soak["backend_jobs"] > 0, summary
    assert soak["stale_reservations"] == 0, summary


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.celery_worker
def test_soak_ledger_equals_the_job_events(soak):
    ledger = soak["ledger"]
    assert ledger["ledger_card_seconds"] > 0, ledger
    assert ledger["still_open"] == 0, ledger
    assert abs(ledger["difference"]) < 0.01, ledger  # rows are rounded to 1e-6 card-seconds
    assert ledger["jobs_differing"] == 0, ledger


@pytest.mark.soak
@pytest.mark.slow
@pytest.mark.celery_worker
def test_soak_memory_is_flat_in_the_second_half(soak):
    rss = soak["rss"]
    assert len(soak["rss_samples"]) >= 20
    assert rss["worker"]["second_half_growth_mib"] < WORKER_GROWTH_MIB, rss
    assert rss["beat"]["second_half_growth_mib"] < BEAT_GROWTH_MIB, rss
