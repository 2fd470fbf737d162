"""The concurrency scenario of issue 8 at a chosen size: ``--clients`` HTTP clients against
gunicorn (one thread and database connection each) submit, cancel and approve against tight
quotas for ``--duration`` seconds while two Celery workers (and beat) run scheduling cycles and
the simulated cluster runs the jobs. Then the event log is replayed and checked
(``tests/reliability/concurrency_checks.py``).

Prints one JSON object: ``clients``, ``duration_s``, the operation counts (``submits``,
``cancels``, ``approvals`` …), ``admissions``, ``cycles`` per worker,
``max_over_admission_gpus`` (must be 0), ``violations``, ``errors`` (responses no client should
get: 5xx, deadlocks, unexpected 4xx), the status counts and per-operation latency p50/p95 in ms.
Needs DATABASE_URL and REDIS_URL; works in a scratch database (bench/scratchdb.py). The same
scenario is the test ``tests/reliability/test_concurrency.py`` (50 clients, 60 s).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scratchdb import scratch_django


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds the clients run")
    parser.add_argument("--nodes", type=int, default=4, help="nodes of 8 GPUs")
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="15 s instead of --duration")
    args = parser.parse_args()
    logging.disable(logging.INFO)
    with scratch_django() as url:
        from tests.reliability import concurrency_scenario as scenario

        config = scenario.Config(
            clients=args.clients,
            duration=15.0 if args.quick else args.duration,
            seed=args.seed,
            nodes=args.nodes,
        )
        result = scenario.run(config, url)
        summary = result.summary()
        summary["problems"] = (
            result.replayed.violations
            + result.chains
            + result.usage
            + result.ledger
            + [f"{o.op} {o.status}: {o.detail}" for o in result.unexpected()]
        )[:20]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
