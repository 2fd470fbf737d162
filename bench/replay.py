"""Replay benchmark (issue 7): prints ONE JSON object. Not a timed test.

    python bench/replay.py                    # Alibaba 2023 default trace × 15 (105,960 jobs), pooled
    python bench/replay.py --quick            # the trace once (7,064 jobs): a before/after in a minute
    python bench/replay.py --repeat 2 --policy static --scale 1
    python bench/replay.py --repeat 1 --start 10013436 --overlay 10 --scale 100 --tenants hash:8   # loaded
    python bench/replay.py --quick --no-resources   # GPUs only: the trace's CPU and memory left out
    python bench/replay.py --quick --fair-share    # fair share, shares = each node's quota (DESIGN §16)

The dynamic replay of :mod:`jobs.whatif.replay.sim` on the production engine, without Django:
``jobs`` replayed, ``wall_seconds`` (loading, replay and metrics), and the result metrics
(per-tenant rows left out; ``resources`` and the stranded GPUs say whether the trace's CPU and
memory were placed). Progress lines go to stderr. The bar: 100,000 jobs in ≤ 300 s.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.whatif.replay import sim
from jobs.whatif.replay.paths import alibaba_dir

DEFAULT_DIR = str(alibaba_dir() / "csv")  # GPUPOOL_TRACES_DIR, or ../shared/traces


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alibaba", default=DEFAULT_DIR)
    ap.add_argument("--trace", help="openb_pod_list_*.csv (default: the default pod list)")
    ap.add_argument("--repeat", type=int, default=None, help="copies of the trace one after another (15)")
    ap.add_argument("--quick", action="store_true", help="the trace once (--repeat 1) unless --repeat says")
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--tenants", default="trace", help="trace (QoS class) | hash:N | shape:N")
    ap.add_argument("--start", type=float, default=None, help="warm start at this trace time (s)")
    ap.add_argument("--overlay", type=int, default=1, help="N copies over the same window")
    ap.add_argument("--policy", choices=("pooled", "static"), default="pooled")
    ap.add_argument("--quotas", choices=("demand", "equal"), default="demand",
                    help="derived quotas: proportional to demand, or equal per tenant")
    ap.add_argument("--no-resources", action="store_true",
                    help="GPUs only: leave the trace's CPU and memory out of the engine")
    ap.add_argument("--profile", action="store_true", help="cProfile, top functions to stderr")
    ap.add_argument("--fair-share", action="store_true",
                    help="fair share with each node's quota as its shares (DESIGN §16)")
    args = ap.parse_args()
    if args.repeat is None:
        args.repeat = 1 if args.quick else 15
    t0 = time.perf_counter()
    jobs, nodes, quotas = sim.load(args.trace, alibaba_dir=args.alibaba)
    jobs = sim.prepare(jobs, tenants=args.tenants, start=args.start, overlay=args.overlay,
                       repeat=args.repeat, scale=args.scale)
    options = sim.Options(policy=args.policy, progress_every=5.0, quota_split=args.quotas,
                          resources=not args.no_resources, fair_shares_from_quotas=args.fair_share)
    if args.profile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        result = prof.runcall(sim.simulate, jobs, nodes, quotas, options)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    else:
        result = sim.simulate(jobs, nodes, quotas, options)
    result.pop("tenants")
    result.update({"quick": args.quick, "repeat": args.repeat, "scale": args.scale,
                   "tenant_split": args.tenants,
                   "quota_split": args.quotas, "start": args.start, "overlay": args.overlay,
                   "replay_wall_seconds": result["wall_seconds"],
                   "wall_seconds": round(time.perf_counter() - t0, 3)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
