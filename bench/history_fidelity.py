"""Fidelity of history as a trace (issue 25 item 1): record a workload with the production
scheduler on a virtual clock (tests/history_scenario.py), export it (``jobs.whatif.history``), replay the
export (``jobs.whatif.replay.fidelity``) and compare each job's queue delay, recorded vs replayed.

    python bench/history_fidelity.py [--jobs 200] [--hours 8] [--seed 7] [--latency 5] [--period 60]

Prints one JSON object: the scenario, the median / p90 / max absolute error of each job's queue
delay (until the backend started it) and per tenant the average delay recorded vs replayed. The
replay mirrors the service as the export's manifest describes it (backend start latency) and the
driver's periodic cycle (``--period``); ``--no-replay-latency`` / ``--no-replay-period`` switch
either off to show what they are worth. Runs in a scratch database
(``<name>_bench`` next to DATABASE_URL's), dropped at the end. Needs DATABASE_URL and REDIS_URL.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--hours", type=float, default=8.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--latency", type=float, default=5.0, help="backend start latency, s")
    parser.add_argument("--period", type=float, default=60.0, help="periodic cycle, s")
    parser.add_argument(
        "--no-replay-period",
        action="store_true",
        help="the replay cycles only on events (not every --period seconds)",
    )
    parser.add_argument(
        "--no-replay-latency",
        action="store_true",
        help="the replay starts a job when admitted (not the manifest's backend latency later)",
    )
    parser.add_argument("--no-loan", action="store_true")
    parser.add_argument("--no-window", action="store_true")
    a = parser.parse_args(argv)
    from scratchdb import scratch_django

    with scratch_django():
        logging.disable(logging.INFO)
        from jobs.whatif import history
        from jobs.whatif.replay import fidelity
        from tests.history_scenario import record

        t0 = time.perf_counter()
        rec = record(
            seed=a.seed,
            jobs=a.jobs,
            span_s=a.hours * 3600,
            nodes=a.nodes,
            latency=a.latency,
            period=a.period,
            loan=not a.no_loan,
            window=not a.no_window,
        )
        record_s = time.perf_counter() - t0
        export = history.history_export(start=rec.start, end=rec.end)
        with tempfile.TemporaryDirectory() as folder:
            history.write_dir(export, folder)
            t1 = time.perf_counter()
            # the driver's periodic cycle is --period (beat's default of 5 s would take long here)
            over = {"period": 0.0 if a.no_replay_period else a.period}
            if a.no_replay_latency:
                over["start_latency"] = 0.0
            options = fidelity.export_options(folder, **over)
            result = fidelity.replay_export(folder, options)
            replay_s = time.perf_counter() - t1
            recorded = fidelity.read_recorded(folder)
        queue = fidelity.compare(recorded, result)
    return {
        "jobs": a.jobs,
        "hours": a.hours,
        "seed": a.seed,
        "gpus": a.nodes * 8,
        "latency_s": a.latency,
        "period_s": a.period,
        "replay_period_s": options.period,
        "replay_start_latency_s": options.start_latency,
        "cycles_recorded": rec.cycles,
        "preemptions_recorded": rec.preemptions,
        "preemptions_replayed": result["preemptions"],
        "exported_jobs": export.manifest["jobs"],
        "windows": export.manifest["windows"],
        "loans": export.manifest["loans"],
        "queue_delay": {k: v for k, v in queue.items() if k != "tenants"},
        "tenants": queue["tenants"],
        "record_wall_s": round(record_s, 1),
        "replay_wall_s": round(replay_s, 3),
    }


if __name__ == "__main__":
    print(json.dumps(main()))
