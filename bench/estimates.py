"""Start estimates against what then happens (issue 24): prints ONE JSON object. Not a timed test.

    python bench/estimates.py                       # defaults below (a few minutes on 2 cores)
    python bench/estimates.py --limit-factor 2      # users declare twice the true duration

The Alibaba 2023 trace replayed by :mod:`jobs.whatif.replay.sim` on the production engine (loaded as
bench/replay.py does: warm start at the busy part ``--start``, ``--overlay`` rotated copies,
arrivals ÷ ``--scale``, ``--tenants``). Every ``--every`` virtual seconds the replay's state is
taken as a snapshot and :func:`jobs.scheduler.forecast.forecast` — the same function the portal's beat task
runs — estimates every waiting job's start. When the replay is over, each estimate is compared
with the virtual time the job actually got its GPUs.

Max runtime of a trace job = its true duration × ``--limit-factor``, rounded up (1: users who
know exactly how long their jobs run; the replay's EASY backfill plans with the same limit).
Errors are ``estimated − actual`` in seconds (positive: the job started earlier than estimated).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.scheduler.forecast import forecast
from jobs.whatif.replay import sim
from jobs.whatif.replay.paths import alibaba_dir

DEFAULT_DIR = str(alibaba_dir() / "csv")


class Sampler(sim.Observer):
    def __init__(self, every: float, flags: dict, horizon: float, max_cycles: int, samples: int):
        self.every = every
        self.flags = flags
        self.horizon = horizon
        self.max_cycles = max_cycles
        self.left = samples
        self.estimates: list[tuple[str, float, float | None, str | None]] = []  # (job, at, start, why)
        self.actual: dict[str, float] = {}
        self.forecast_seconds = 0.0
        self.cycles = 0

    def sample(self, t, snapshot, requeue):
        if self.left <= 0 or not snapshot.queued:
            return
        self.left -= 1
        t0 = time.perf_counter()
        # Victims are requeued as the replay requeues them (the portal: build_forecast_input).
        found = forecast(snapshot, requeue=requeue, horizon_seconds=self.horizon, max_cycles=self.max_cycles,
                         **self.flags)
        self.forecast_seconds += time.perf_counter() - t0
        self.cycles += found.cycles
        base = snapshot.now.timestamp()
        for jid, at in found.starts.items():
            self.estimates.append((jid, t, t + (at.timestamp() - base), None))
        for jid, why in found.unknown.items():
            self.estimates.append((jid, t, None, why))

    def started(self, job_id, t):
        self.actual.setdefault(job_id, t)  # the first start (a victim restarting is not a new estimate)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(q * len(values)) - 1)]


def share(n: int, total: int) -> float | None:
    return round(n / total, 4) if total else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alibaba", default=DEFAULT_DIR)
    ap.add_argument("--start", type=float, default=10013436, help="warm start at this trace time (s)")
    ap.add_argument("--overlay", type=int, default=3)
    ap.add_argument("--scale", type=float, default=100.0)
    ap.add_argument("--tenants", default="hash:8")
    ap.add_argument("--policy", choices=("pooled", "static"), default="static")
    ap.add_argument("--limit-factor", type=float, default=1.0)
    ap.add_argument("--every", type=float, default=1800.0, help="virtual seconds between samples")
    ap.add_argument("--samples", type=int, default=12, help="at most this many samples")
    ap.add_argument("--horizon", type=float, default=7 * 86400.0)
    ap.add_argument("--max-cycles", type=int, default=400)
    args = ap.parse_args()
    t0 = time.perf_counter()
    jobs, nodes, quotas = sim.load(None, alibaba_dir=args.alibaba)
    jobs = sim.prepare(jobs, tenants=args.tenants, start=args.start, overlay=args.overlay, scale=args.scale)
    options = sim.Options(policy=args.policy, limit_factor=args.limit_factor, progress_every=10.0)
    flags = {"borrowing": args.policy == "pooled"}
    sampler = Sampler(args.every, flags, args.horizon, args.max_cycles, args.samples)
    result = sim.simulate(jobs, nodes, quotas, options, observer=sampler)
    errors, unknown, never = [], 0, 0
    for jid, _at, start, _why in sampler.estimates:
        if start is None:
            unknown += 1
        elif jid not in sampler.actual:
            never += 1
        else:
            errors.append(start - sampler.actual[jid])
    absolute = [abs(e) for e in errors]
    total = len(sampler.estimates)
    print(json.dumps({
        "trace": "alibaba-gpu-v2023 openb_pod_list_default",
        "jobs": len(jobs), "policy": args.policy, "tenants": args.tenants, "start": args.start,
        "overlay": args.overlay, "scale": args.scale, "limit_factor": args.limit_factor,
        "samples": args.samples - sampler.left, "every_s": args.every,
        "estimates": total,
        "compared": len(errors),
        "median_abs_error_s": statistics.median(absolute) if absolute else None,
        "p90_abs_error_s": pct(absolute, 0.9),
        "median_error_s": statistics.median(errors) if errors else None,
        "share_started_earlier": share(sum(1 for e in errors if e > 60), len(errors)),
        "share_started_later": share(sum(1 for e in errors if e < -60), len(errors)),
        "share_within_60s": share(sum(1 for e in absolute if e <= 60), len(errors)),
        "unknown": unknown,
        "unknown_reasons": dict(Counter(why for *_, why in sampler.estimates if why)),
        "share_unknown": share(unknown, total),
        "estimated_never_started": never,
        "forecast_cycles": sampler.cycles,
        "forecast_wall_seconds": round(sampler.forecast_seconds, 2),
        "avg_queue_s": result.get("avg_queue_delay_s", result.get("queue_delay_avg_s")),
        "wall_seconds": round(time.perf_counter() - t0, 1),
    }))


if __name__ == "__main__":
    main()
