"""Consolidation on the loaded Alibaba 2023 trace (issue 36 item 2): prints ONE JSON object.

    python bench/consolidation.py            # --overlay 2 --nodes 0.2 --gangs 48 --budget 12
    python bench/consolidation.py --quick    # --overlay 1: a look in a minute or two

The trace (read in place, docs/replay.md) is loaded as bench/fairness.py's contended protocol:
warm start at 10,013,436 s, ``--overlay`` copies over the same window, arrivals ÷ 100, eight
projects (``hash:8``), on ``--nodes`` of each GPU model's nodes. Its pods are one worker of at most
8 GPUs, so it has no job of ≥ 32 GPUs: ``--gangs`` training gangs are added, evenly spread over the
arrival window, alternately 4 × 8 and 8 × 8 GPUs of the G2 model (the 8-GPU nodes), each
``--gang-hours`` long, taking the projects in turn. Every job checkpoints (``--grace`` seconds
to write its checkpoint on the signal) and every priority class has a ``--min-runtime``.

The same jobs replay twice through the production engine: consolidation off, and on with an
hourly budget of ``--budget`` moves (gangs of ≥ 16 GPUs, moved jobs of ≤ 8 GPUs). Per run: the
average and p95 queue wait of the jobs of ≥ 32 GPUs (a job's waits summed over its restarts; a
job that never started is counted apart), the same over all jobs, the moves made and the
GPU-hours of work lost to them (a moved job's GPUs from its signal to its exit: it writes its
checkpoint and resumes from it), preemptions of any kind, and the window GPU allocation.
Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fairness import thin_nodes

from jobs.whatif.replay import sim
from jobs.whatif.replay.metrics import percentile
from jobs.whatif.replay.paths import alibaba_dir
from jobs.whatif.replay.trace import TraceJob

BIG = 32  # GPUs: the jobs the issue asks about
GANG_MODEL = "G2"


class Waits(sim.Observer):
    """Each job's waits: submit → first start, then each release → restart."""

    def __init__(self, submit: dict[str, float]) -> None:
        self.since = dict(submit)
        self.wait: dict[str, float] = defaultdict(float)
        self.ran: set[str] = set()

    def started(self, job_id: str, t: float) -> None:
        self.wait[job_id] += t - self.since.pop(job_id)
        self.ran.add(job_id)

    def released(self, job_id: str, t: float, finished: bool) -> None:
        if not finished:
            self.since[job_id] = t


def add_gangs(jobs: list[TraceJob], count: int, hours: float) -> list[TraceJob]:
    if count <= 0:
        return jobs
    t0 = min(j.submit_time for j in jobs)
    t1 = max(j.submit_time for j in jobs)
    tenants = sorted({j.tenant for j in jobs})
    gangs = []
    for k in range(count):
        workers = 4 if k % 2 == 0 else 8
        gangs.append(TraceJob(f"gang-{k:03d}", t0 + (t1 - t0) * (k + 0.5) / count, hours * 3600, 8,
                              1000, (GANG_MODEL,), tenants[k % len(tenants)], "training", 100, workers))
    return sorted(jobs + gangs, key=lambda j: (j.submit_time, j.job_id))


def figures(waits: list[float], never: int) -> dict:
    return {"jobs": len(waits) + never, "never_started": never,
            "avg_queue_s": round(sum(waits) / len(waits), 1) if waits else None,
            "p95_queue_s": round(percentile(waits, 95), 1) if waits else None}


def run(jobs, nodes, quotas, options) -> dict:
    obs = Waits({j.job_id: j.submit_time for j in jobs})
    t = time.perf_counter()
    result = sim.simulate(jobs, nodes, quotas, options, observer=obs)
    wall = time.perf_counter() - t
    runnable = set(sim.assign_flavors(jobs, nodes))
    big = [j for j in jobs if j.job_id in runnable and j.num_gpus * j.workers >= BIG]
    every = [j for j in jobs if j.job_id in runnable]

    def of(group):
        done = [obs.wait[j.job_id] for j in group if j.job_id in obs.ran and j.job_id not in obs.since]
        return figures(done, sum(1 for j in group if j.job_id not in obs.ran))
    return {"moves_per_hour_budget": options.consolidation_moves_per_hour,
            "jobs_ge_32_gpus": of(big), "all_jobs": of(every),
            "moves": result["consolidation_moves"],
            "gpu_hours_lost_to_moves": round(result["consolidation_gpu_hours_lost"], 3),
            "preemptions": result["preemptions"],
            "window_gpu_allocation_rate": round(result.get("window_gpu_allocation_rate", 0.0), 4),
            "wall_seconds": round(wall, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alibaba", default=str(alibaba_dir() / "csv"))
    ap.add_argument("--quick", action="store_true", help="--overlay 1 unless --overlay says")
    ap.add_argument("--start", type=float, default=10013436)
    ap.add_argument("--overlay", type=int, default=None, help="copies over the same window (2)")
    ap.add_argument("--scale", type=float, default=100.0)
    ap.add_argument("--tenants", default="hash:8")
    ap.add_argument("--nodes", type=float, default=0.2, help="fraction of each GPU model's nodes kept")
    ap.add_argument("--gangs", type=int, default=48, help="gangs of 32 and 64 GPUs added")
    ap.add_argument("--gang-hours", type=float, default=2.0)
    ap.add_argument("--budget", type=int, default=12, help="moves per hour with consolidation on")
    ap.add_argument("--grace", type=float, default=60.0, help="seconds to write a checkpoint")
    ap.add_argument("--min-runtime", type=float, default=600.0, help="every class's minimum runtime (s)")
    args = ap.parse_args()
    if args.overlay is None:
        args.overlay = 1 if args.quick else 2
    t0 = time.perf_counter()
    jobs, nodes, quotas = sim.load(None, alibaba_dir=args.alibaba)
    nodes = thin_nodes(nodes, args.nodes)
    jobs = sim.prepare(jobs, tenants=args.tenants, start=args.start, overlay=args.overlay,
                       repeat=1, scale=args.scale)
    jobs = add_gangs(jobs, args.gangs, args.gang_hours)
    runs = {}
    for budget in (0, args.budget):
        opts = sim.Options(policy="pooled", checkpointing=True, grace=args.grace,
                           min_runtime_s=args.min_runtime, consolidation_moves_per_hour=budget,
                           progress_every=30.0)
        runs["on" if budget else "off"] = run(jobs, nodes, quotas, opts)
    print(json.dumps({"jobs": len(jobs), "gangs": args.gangs, "gang_hours": args.gang_hours,
                      "quick": args.quick, "start": args.start, "overlay": args.overlay,
                      "scale": args.scale, "tenants": args.tenants, "node_fraction": args.nodes,
                      "nodes": len(nodes), "gpus": sum(n.gpus for n in nodes), "grace_s": args.grace,
                      "min_runtime_s": args.min_runtime, "runs": runs,
                      "wall_seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
