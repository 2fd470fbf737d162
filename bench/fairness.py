"""Fair share against today's ordering on the Alibaba 2023 trace (issue 34 item 6): prints ONE JSON
object. Not a timed test.

    python bench/fairness.py            # --start 10013436 --overlay 10 --scale 100 --tenants hash:16
    python bench/fairness.py --quick    # the same with --overlay 3: a look in a few minutes
    python bench/fairness.py --settings 604800:3600,6048:36   # fair runs (half-life s : entry s)
    python bench/fairness.py --overlay 2 --nodes 0.2   # contended: 14,042 jobs on 1,226 GPUs

**Contended protocol** (``--nodes F``): the same arrivals on ``F`` of each GPU model's nodes (evenly
spread over the node list, at least one per model; quotas are derived from the nodes kept), so
the departments are backlogged for hours — fair share only decides anything among departments
that wait together. ``--overlay 2 --nodes 0.2`` (240 of 1,213 nodes) offers the load per GPU of
``--overlay 10`` on every node (2 copies on 1,226 GPUs, 10 on 6,212) but a replay takes 70–300 s
on 2 shared cores (depending on what else runs) instead of > 15 min.
``--quotas equal``: every project the same quota per GPU model (spec.derive_quotas), instead of
quotas proportional to demand.

The same jobs (demand-derived quotas, pooled) replay once with fair share off (today's ordering:
dominant share only) and once per ``--settings`` pair with fair share on, shares = each tree node's
quota (``sim.Options(fair_shares_from_quotas=True)``). Per run, per department (top-level tree
node): average and p95 queue wait (a job's waits summed over its restarts; a job that never
started is counted apart), and Jain's index J = (Σx)² / (n·Σx²) of x = usage ÷ share per period,
where usage = GPU-seconds allocated to the department in the period and share = its quota ÷ the
sum of the departments' quotas; only departments with a job waiting or running in the period count
(one with no demand is not treated unfairly), and periods with fewer than two such departments
are left out (J ≡ 1). Periods: calendar weeks of the virtual clock (``weekly``) and weeks of the
trace's own arrival clock (``trace_weekly``: 604,800 s ÷ ``--scale``, since arrivals are compressed
``--scale`` times but durations are not), each also over the arrival window alone (``*_window``:
periods starting before the last submit — after it only the longest pods run out, which no ordering
changes). Also: the largest job's wait, idle-quota reuse, and per department its part of the
GPU-seconds held in the arrival window ÷ its share (``window_usage_over_share``: 1 = its share),
and ``sampled_waits``: every 300 virtual s, per department, the job-seconds of waiting and of
waiting *in quota* (``Engine.waiting_in_quota``: the quota had room for the job; fair share orders
borrowers, so it should not add to these), and the preemptions each department suffered.
``bar`` says whether fair share raised the lowest J and kept every department's p95 within +10 %
(both p95s under the 1 s coalescing window count as unchanged). Progress lines go to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.scheduler.scheduler import Engine
from jobs.whatif.replay import sim
from jobs.whatif.replay.metrics import percentile
from jobs.whatif.replay.paths import alibaba_dir
from jobs.whatif.replay.spec import demand_milli

DEFAULT_DIR = str(alibaba_dir() / "csv")
WEEK = 604_800.0
P95_SLACK = 0.10  # the bar: no department's p95 queue up by more than 10 %
P95_FLOOR_S = 1.0  # the replay's coalescing window: delays under it are not resolved
SAMPLE_S = 300.0  # virtual seconds between two looks at the waiting jobs (SampledWaits)


class Intervals(sim.Observer):
    """Each job's GPU-holding intervals (start, end); ``end`` None while it runs."""

    def __init__(self) -> None:
        self.runs: dict[str, list[list]] = defaultdict(list)

    def started(self, job_id: str, t: float) -> None:
        self.runs[job_id].append([t, None])

    def released(self, job_id: str, t: float, finished: bool) -> None:
        self.runs[job_id][-1][1] = t


class SampledWaits:
    """Every ``SAMPLE_S`` virtual seconds, after a cycle: per department, the jobs waiting and
    those of them in quota (``Engine.waiting_in_quota``), each counted for ``SAMPLE_S`` — job-
    seconds of waiting, and of waiting while the quota had room for the job (fair share orders
    borrowers; in-quota demand should not wait behind it). Also the preemptions each department
    suffered (every cycle)."""

    def __init__(self, tenant_of: dict[str, str]) -> None:
        self.tenant_of = tenant_of
        self.next = float("-inf")
        self.waiting: dict[str, float] = defaultdict(float)
        self.in_quota: dict[str, float] = defaultdict(float)
        self.victims: dict[str, int] = defaultdict(int)  # preemptions suffered, every cycle

    def factory(self, *args, **kwargs) -> Engine:
        outer = self

        class Sampling(Engine):
            def cycle(self, now=None):
                result = super().cycle(now)
                for pre in result.preemptions:
                    outer.victims[department(outer.tenant_of[pre.victim_id])] += 1
                t = now.timestamp()
                if t >= outer.next:
                    outer.next = t + SAMPLE_S
                    for jid in result.explanations:
                        outer.waiting[department(outer.tenant_of[jid])] += SAMPLE_S
                    for jid in self.waiting_in_quota():
                        outer.in_quota[department(outer.tenant_of[jid])] += SAMPLE_S
                return result

        return Sampling(*args, **kwargs)

    def report(self) -> dict:
        return {d: {"waiting_job_s": self.waiting[d], "in_quota_waiting_job_s": self.in_quota[d],
                    "preempted": self.victims[d]} for d in sorted(set(self.waiting) | set(self.victims))}


def thin_nodes(nodes: list, fraction: float) -> list:
    """``fraction`` of each GPU model's nodes, evenly spread over the list (node i is kept when
    ⌊(i+1)·f⌋ > ⌊i·f⌋), at least one per model: the same arrivals on a smaller pool, so they
    contend — the trace's flavor mix and node shapes stay, quotas are derived from what is kept."""
    if fraction >= 1:
        return list(nodes)
    by_model: dict[str, list] = defaultdict(list)
    for n in nodes:
        by_model[n.model].append(n)
    kept = []
    for group in by_model.values():
        take = [n for i, n in enumerate(group) if int((i + 1) * fraction) > int(i * fraction)]
        kept.extend(take or group[:1])
    order = {n.name: i for i, n in enumerate(nodes)}
    return sorted(kept, key=lambda n: order[n.name])


def department(tenant: str) -> str:
    return tenant.split("/")[0]


def jain(xs: list[float]) -> float | None:
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if xs and s2 > 0 else None


def _spread(acc: dict, key, a: float, b: float, period: float, t0: float, weight: float) -> None:
    """Add ``weight`` × the length of [a, b) falling in each period to acc[(period index, key)]."""
    k = int((a - t0) // period)
    while a < b:
        edge = t0 + (k + 1) * period
        if edge > a:  # (rounding can put ``a`` on the edge of the period before)
            cut = min(b, edge)
            acc[(k, key)] += weight * (cut - a)
            a = cut
        k += 1


def figures(jobs: list, obs: Intervals, result: dict, period: float) -> dict:
    """Per-department queue figures and Jain's index per ``period`` from one replay."""
    by_id = {j.job_id: j for j in jobs if j.job_id in result["_runnable"]}
    end = result["_t_end"]
    t0 = min(j.submit_time for j in by_id.values())
    quota: dict[str, float] = defaultdict(float)
    for tenant, row in result["tenants"].items():
        quota[department(tenant)] += sum(row["quota_gpus"].values())
    total = sum(quota.values())
    share = {d: q / total for d, q in quota.items()}
    waits: dict[str, list[float]] = defaultdict(list)
    never: dict[str, int] = defaultdict(int)
    usage: dict = defaultdict(float)
    present: dict = defaultdict(float)
    last = max(j.submit_time for j in by_id.values())
    in_window: dict[str, float] = defaultdict(float)  # GPU-seconds held between t0 and the last submit
    for jid, j in by_id.items():
        d = department(j.tenant)
        runs = obs.runs.get(jid, [])
        if not runs:
            never[d] += 1
            _spread(present, d, j.submit_time, end, period, t0, 1.0)
            continue
        wait, since = 0.0, j.submit_time
        for a, b in runs:
            wait += a - since
            since = end if b is None else b
            _spread(usage, d, a, since, period, t0, demand_milli(j) / 1000)
            in_window[d] += demand_milli(j) / 1000 * max(0.0, min(since, last) - a)
        waits[d].append(wait)
        _spread(present, d, j.submit_time, since, period, t0, 1.0)
    periods = sorted({k for k, _ in present})
    per = []
    for k in periods:
        active = sorted(d for d in share if present.get((k, d), 0.0) > 0)
        if len(active) < 2:
            continue
        xs = [usage.get((k, d), 0.0) / share[d] for d in active]
        per.append({"period": k, "departments": len(active), "jain": jain(xs)})
    js = [p["jain"] for p in per if p["jain"] is not None]
    # the arrival window (first to last submit): where departments compete; after it only the
    # longest pods run out, which no ordering changes
    held = sum(in_window.values()) or 1.0
    jw = [p["jain"] for p in per if p["jain"] is not None and p["period"] * period < last - t0]
    largest = max(by_id.values(), key=lambda j: (demand_milli(j), j.duration or 0.0, j.job_id))
    lw = [r[0] for r in obs.runs.get(largest.job_id, [])]
    return {
        "departments": {d: {"share": round(share[d], 4), "jobs": len(waits[d]) + never[d],
                            "never_started": never[d],
                            "avg_queue_s": round(sum(waits[d]) / len(waits[d]), 1) if waits[d] else 0.0,
                            "p95_queue_s": round(percentile(waits[d], 95), 1),
                            # its part of the GPU-seconds held in the arrival window ÷ its share
                            "window_usage_over_share": round(in_window[d] / held / share[d], 3)}
                        for d in sorted(share)},
        "periods_counted": len(js),
        "jain_min": round(min(js), 4) if js else None,
        "jain_mean": round(sum(js) / len(js), 4) if js else None,
        "window_s": round(last - t0, 1),
        "window_periods": len(jw),
        "jain_min_window": round(min(jw), 4) if jw else None,
        "jain_mean_window": round(sum(jw) / len(jw), 4) if jw else None,
        "jain_by_period": [{**p, "jain": round(p["jain"], 4) if p["jain"] else None} for p in per],
        "largest_job": {"id": largest.job_id, "gpus": demand_milli(largest) / 1000,
                        "wait_s": round(lw[0] - largest.submit_time, 1) if lw else None},
    }


def run(jobs, nodes, quotas, options, period_s: dict[str, float]) -> dict:
    obs = Intervals()
    sampled = SampledWaits({j.job_id: j.tenant for j in jobs})
    t = time.perf_counter()
    result = sim.simulate(jobs, nodes, quotas, options, observer=obs, engine_factory=sampled.factory)
    wall = time.perf_counter() - t
    ends = [b for rs in obs.runs.values() for _, b in rs if b is not None]
    result["_t_end"] = max(ends + [j.submit_time for j in jobs])
    result["_runnable"] = set(sim.assign_flavors(jobs, nodes))  # what the replay submits
    out = {"fair_share": result["fair_share"], "fair_half_life_s": result["fair_half_life_s"],
           "fair_entry_s": options.fair_entry_s if result["fair_share"] else None,
           "wall_seconds": round(wall, 1), "avg_queue_s": round(result["avg_queue_delay_s"], 1),
           "p95_queue_s": round(result["p95_queue_delay_s"], 1),
           "window_gpu_allocation_rate": round(result.get("window_gpu_allocation_rate", 0.0), 4),
           "window_idle_quota_reuse_ratio": round(result.get("window_idle_quota_reuse_ratio", 0.0), 4),
           "idle_quota_reuse_ratio": round(result["idle_quota_reuse_ratio"], 4),
           "preemptions": result["preemptions"], "sampled_waits": sampled.report()}
    for name, period in period_s.items():
        out[name] = figures(jobs, obs, result, period)
    return out


def bar(base: dict, fair: dict, name: str) -> dict:
    """The issue's bar on one period kind: the lowest J raised, no department's p95 up > 10 %."""
    worse = []
    for d, row in fair[name]["departments"].items():
        b, f = base[name]["departments"][d]["p95_queue_s"], row["p95_queue_s"]
        if f > b * (1 + P95_SLACK) and f > P95_FLOOR_S:
            worse.append({"department": d, "base_p95_s": b, "fair_p95_s": f})
    raised = (fair[name]["jain_min"] or 0) > (base[name]["jain_min"] or 0)
    in_window = (fair[name]["jain_min_window"] or 0) > (base[name]["jain_min_window"] or 0)
    return {"lowest_jain_raised": raised, "lowest_window_jain_raised": in_window,
            "p95_over_10pct": worse, "met": raised and not worse}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--alibaba", default=DEFAULT_DIR)
    ap.add_argument("--quick", action="store_true", help="--overlay 3 unless --overlay says")
    ap.add_argument("--start", type=float, default=10013436)
    ap.add_argument("--overlay", type=int, default=None, help="copies over the same window (10)")
    ap.add_argument("--scale", type=float, default=100.0)
    ap.add_argument("--tenants", default="hash:16", help="hash:16 = four departments of four projects")
    ap.add_argument("--nodes", type=float, default=1.0,
                    help="fraction of each GPU model's nodes to keep (1: all; 0.25: a contended pool)")
    ap.add_argument("--quotas", choices=("demand", "equal"), default="demand",
                    help="derived quotas: proportional to demand, or equal per tenant")
    ap.add_argument("--settings", default="604800:3600",
                    help="fair-share runs, comma-separated HALF_LIFE_S:ENTRY_S (default the centre's)")
    args = ap.parse_args()
    if args.overlay is None:
        args.overlay = 3 if args.quick else 10
    settings = []
    for item in args.settings.split(","):
        h, _, e = item.partition(":")
        settings.append((float(h), float(e or 3600)))
    t0 = time.perf_counter()
    jobs, nodes, quotas = sim.load(None, alibaba_dir=args.alibaba)
    nodes = thin_nodes(nodes, args.nodes)
    jobs = sim.prepare(jobs, tenants=args.tenants, start=args.start, overlay=args.overlay,
                       repeat=1, scale=args.scale)
    periods = {"weekly": WEEK, "trace_weekly": WEEK / args.scale}
    base_opts = sim.Options(policy="pooled", quota_split=args.quotas, fair_share=False, progress_every=30.0)
    runs = {"today": run(jobs, nodes, quotas, base_opts, periods)}
    for h, e in settings:
        opts = sim.Options(policy="pooled", quota_split=args.quotas, fair_share=True,
                           fair_shares_from_quotas=True, fair_half_life_s=h, fair_entry_s=e,
                           progress_every=30.0)
        runs[f"fair h={h:g}s entry={e:g}s"] = run(jobs, nodes, quotas, opts, periods)
    base = runs["today"]
    bars = {k: {name: bar(base, r, name) for name in periods} for k, r in runs.items() if k != "today"}
    print(json.dumps({"jobs": len(jobs), "quick": args.quick, "start": args.start, "overlay": args.overlay,
                      "scale": args.scale, "tenants": args.tenants, "quota_split": args.quotas,
                      "node_fraction": args.nodes, "nodes": len(nodes), "gpus": sum(n.gpus for n in nodes),
                      "policy": "pooled", "period_s": periods, "runs": runs, "bar": bars,
                      "wall_seconds": round(time.perf_counter() - t0, 1)}))


if __name__ == "__main__":
    main()
