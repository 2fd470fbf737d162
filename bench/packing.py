"""Packing benchmark (issue 7, DESIGN §9; issue 33 item 7): the published FGD fragmentation
experiment on the Alibaba GPU 2023 "openb" trace, through the production placement. Prints ONE
JSON object.

    python bench/packing.py                 # 5 policies x 10 seeds (42-51), with CPU and memory
    python bench/packing.py --policies fgd-res   # resource-aware FGD (issue 36 item 1)
    python bench/packing.py --quick         # 2 seeds (42, 43)
    python bench/packing.py --policies fgd --resources engine,none   # both, in one run
    python bench/packing.py --no-resources  # GPUs only (= --resources none)

Per resources mode and policy: mean / min / max / std of ``allocation_at_100pct`` (% of the
6,212 GPUs allocated when the arrived GPU demand reaches 100 % of capacity) and the stranded GPUs
(free GPUs their node's free CPU or memory cannot feed, at 100 % and the mean over the 1 %
steps), next to the published table (``fgd-expected-results/analysis_allo_discrete.csv``,
workload ``openb_pod_list_default``). Resources modes (docs/replay.md, "Packing mode"):
``engine`` (default) = nodes' CPU and memory and pods' requests in the engine's pools, placed as
the live engine places a request; ``engine-by-size`` = the same with one flavor per node size (GPU
model, GPUs, CPU, memory), so no flavor's share is set by a smaller node; ``fit`` = the paper
simulator's own fit beside the pools (the
figure before issue 33); ``none`` = GPUs only. The trace is read in place from the shared traces
folder (``GPUPOOL_TRACES_DIR``, default ``../shared/traces`` beside the checkout; ``--trace DIR``).
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


def _modes(args) -> list[str]:
    if args.no_resources:
        return ["none"]
    modes = args.resources.split(",")
    for mode in modes:
        if mode not in packing.RESOURCES:
            sys.exit(f"--resources: unknown mode {mode!r} (one of {', '.join(packing.RESOURCES)})")
    return modes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds instead of 10")
    ap.add_argument("--policies", default=",".join(packing.POLICIES))
    ap.add_argument("--seeds", default=None, help="comma-separated seeds (default 42-51)")
    ap.add_argument("--workload", default="openb_pod_list_default")
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--resources", default="engine", help="comma-separated: " + ", ".join(packing.RESOURCES))
    ap.add_argument("--no-resources", action="store_true", help="GPUs only (ignore CPU and memory)")
    args = ap.parse_args()
    last = 44 if args.quick else 52
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else list(range(42, last))
    trace = Path(args.trace)
    pods_csv = trace / "csv" / f"{args.workload}.csv"
    nodes_csv = trace / "csv" / "openb_node_list_gpu_node.csv"
    t0 = time.perf_counter()
    out: dict = {"workload": args.workload, "seeds": seeds, "resources": {}}
    # Seed-major, modes interleaved: on a shared machine both modes see the same load.
    for policy in args.policies.split(","):
        runs: dict[str, list] = {m: [] for m in _modes(args)}
        for seed in seeds:
            for mode in runs:
                res = packing.run(pods_csv, nodes_csv, policy=policy, seeds=[seed], resources=mode,
                                  published_csv=trace / "fgd-expected-results" / "analysis_allo_discrete.csv",
                                  progress=lambda msg: print(msg, file=sys.stderr, flush=True))
                runs[mode].append(res)
        for mode, results in runs.items():
            first = results[0]
            out.update(nodes=first["nodes"], gpus=first["gpus"], pods=first["pods"],
                       gpu_pods=first["gpu_pods"],
                       published=first["published"])
            out["resources"].setdefault(mode, {})[policy] = _summary(results)
    out["wall_seconds"] = round(time.perf_counter() - t0, 3)
    print(json.dumps(out, indent=1))


def _summary(results: list[dict]) -> dict:
    import statistics

    per = [r["runs"][0] for r in results]
    alloc = [r["allocation_at_100pct"] for r in per]
    stranded = [r["stranded_gpus_at_100pct"] for r in per]
    return {
        "mean": round(statistics.fmean(alloc), 3), "min": min(alloc), "max": max(alloc),
        "std": round(statistics.pstdev(alloc), 3) if len(alloc) > 1 else 0.0,
        "stranded_gpus_at_100pct_mean": round(statistics.fmean(stranded), 3),
        "stranded_gpus_mean_over_steps": round(statistics.fmean(r["stranded_gpus_mean"] for r in per), 3),
        "failed_mean": statistics.fmean(r["failed"] for r in per),
        "per_seed": alloc, "per_seed_stranded_at_100pct": stranded,
        "wall_seconds": round(sum(r["wall_seconds"] for r in results), 3),
    }


if __name__ == "__main__":
    main()
