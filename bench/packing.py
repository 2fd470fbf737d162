"""Packing benchmark (issue 7, DESIGN §9): the published FGD fragmentation experiment on the
Alibaba GPU 2023 "openb" trace, through the production placement. Prints ONE JSON object.

    python bench/packing.py                 # 4 policies x 10 seeds (42-51), ~15 min on 2 cores
    python bench/packing.py --quick         # 2 seeds (42, 43)
    python bench/packing.py --policies fgd,bestfit --seeds 42,43,44

Per policy: mean / min / max / std of ``allocation_at_100pct`` (% of the 6,212 GPUs allocated
when the arrived GPU demand reaches 100 % of capacity) next to the published table
(``fgd-expected-results/analysis_allo_discrete.csv``, workload ``openb_pod_list_default``).
The trace is read in place from the shared traces folder (``GPUPOOL_TRACES_DIR``, default
``../shared/traces`` beside the checkout; ``--trace DIR`` to point elsewhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from jobs.whatif.replay import packing
from jobs.whatif.replay.paths import alibaba_dir

TRACE = alibaba_dir()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds instead of 10")
    ap.add_argument("--policies", default=",".join(packing.POLICIES))
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default 42-51)")
    ap.add_argument("--workload", default="openb_pod_list_default")
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--no-cpu-mem", action="store_true", help="ignore node CPU / memory")
    args = ap.parse_args()
    last = 44 if args.quick else 52
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(range(42, last))
    trace = Path(args.trace)
    pods_csv = trace / "csv" / f"{args.workload}.csv"
    nodes_csv = trace / "csv" / "openb_node_list_gpu_node.csv"
    t0 = time.perf_counter()
    out: dict = {"workload": args.workload, "seeds": seeds, "cpu_mem": not args.no_cpu_mem, "policies": {}}
    for policy in args.policies.split(","):
        res = packing.run(pods_csv, nodes_csv, policy=policy, seeds=seeds, cpu_mem=not args.no_cpu_mem,
                          published_csv=trace / "fgd-expected-results" / "analysis_allo_discrete.csv",
                          progress=lambda msg: print(msg, file=sys.stderr, flush=True))
        out.update(nodes=res["nodes"], gpus=res["gpus"], pods=res["pods"], gpu_pods=res["gpu_pods"])
        out["published"] = res["published"]
        out["policies"][policy] = {
            "mean": res["allocation_at_100pct"], "min": res["allocation_min"], "max": res["allocation_max"],
            "std": res["allocation_std"], "failed_mean": sum(r["failed"] for r in res["runs"]) / len(seeds),
            "per_seed": [r["allocation_at_100pct"] for r in res["runs"]], "wall_seconds": res["wall_seconds"],
        }
    out["wall_seconds"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
