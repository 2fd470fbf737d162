"""``manage.py replay TRACE.csv --policy pooled|static --out result.json`` (DESIGN §9).

Argument parsing only: the replay itself is pure (:mod:`jobs.whatif.replay.sim`; packing mode:
:mod:`jobs.whatif.replay.packing`). See docs/replay.md."""

import argparse
import json
import sys

from django.core.management.base import BaseCommand, CommandError

from jobs.whatif.replay import limits, sim
from jobs.whatif.replay import policy as replay_policy
from jobs.whatif.replay.spec import QUEUEINGS, check_aging_bound, load_queueing, parse_tenants


def _seeds(value: str) -> str:
    if value != "trace" and not all(x.strip().isdigit() for x in value.split(",")):
        raise argparse.ArgumentTypeError("give comma-separated integers, or 'trace'")
    return value


def _policy(o) -> dict | None:
    """The ``policy`` object of ``--policy-file``, else of the ``--cluster`` SPEC (None: none)."""
    for path in (o["policy_file"], o["cluster"]):
        if path:
            with open(path) as fh:
                data = json.load(fh)
            if not isinstance(data, dict):
                raise ValueError(f"{path}: a JSON object")
            if "policy" in data:
                return data["policy"]
            if path == o["policy_file"]:
                raise ValueError(f"{path}: no 'policy' key")
    return None


class Command(BaseCommand):
    help = "Replay a GPU job trace through the production scheduling engine on a virtual clock."

    def add_arguments(self, parser):
        parser.add_argument("trace", nargs="?", help="trace CSV (generic, or openb_pod_list_*.csv)")
        parser.add_argument("--trace", dest="trace_file", metavar="CSV",
                            help="the trace CSV as an option (e.g. an exported history's trace.csv)")
        parser.add_argument("--policy", choices=("pooled", "static"), default="pooled")
        parser.add_argument("--out", help="write the result JSON here (default: stdout)")
        parser.add_argument("--cluster", help="SPEC.json: nodes and tenant quotas")
        parser.add_argument("--alibaba", metavar="DIR", help="folder of the Alibaba GPU 2023 openb_* files")
        parser.add_argument("--mode", choices=("dynamic", "packing"), default="dynamic")
        parser.add_argument("--packing-policy", default="fgd",
                            help="packing mode: fgd|fgd-res|bestfit|ours|random")
        parser.add_argument(
            "--seeds",
            default=",".join(str(s) for s in range(42, 52)),
            type=_seeds,
            help="packing mode: shuffle seeds, comma-separated (default 42..51, as the paper), or 'trace'",
        )
        parser.add_argument("--no-resources", action="store_true",
                            help="GPUs only: leave the trace's CPU and memory out (both modes)")
        parser.add_argument("--no-borrowing", action="store_true")
        parser.add_argument("--no-backfill", action="store_true")
        parser.add_argument("--plain-best-fit", action="store_true", help="no fragmentation-aware placement")
        parser.add_argument(
            "--no-alternatives",
            action="store_true",
            help="generic CSV: a job listing several GPU models (A|B) runs on the one with the most "
            "capacity, instead of the first the engine can place in the listed order (the Alibaba "
            "trace always does: its gpu_spec has no order of preference)",
        )
        parser.add_argument("--repeat", type=int, default=1, help="the trace N times back to back")
        parser.add_argument("--scale", type=float, default=1.0, help="arrival-rate factor (times ÷ scale)")
        parser.add_argument("--tenants", default="trace",
                            help="tenant split: trace (Alibaba: the QoS class) | hash:N | shape:N")
        parser.add_argument("--start", type=float, default=None,
                            help="warm start at this trace time (s): earlier jobs still running start then")
        parser.add_argument("--overlay", type=int, default=1,
                            help="N copies of the trace over the same window, rotated by 1/N of its span")
        parser.add_argument("--coalesce", type=float, default=1.0, help="seconds of events per cycle")
        parser.add_argument("--grace", type=float, default=0.0, help="seconds a preempted job keeps its GPUs")
        parser.add_argument("--checkpointing", action="store_true", help="preempted jobs resume, not restart")
        parser.add_argument("--period", type=float, default=0.0,
                            help="seconds between periodic cycles while jobs wait (0: cycles only on events)")
        parser.add_argument("--start-latency", type=float, default=0.0,
                            help="seconds from admission until a job starts (its GPUs held meanwhile)")
        parser.add_argument("--quotas", choices=("demand", "equal"), default="demand",
                            help="derived quotas: proportional to each tenant's demand, or equal per tenant")
        parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
        parser.add_argument("--queueing", choices=QUEUEINGS, default=None,
                            help="queueing strategy of every project the SPEC's \"queueing\" does not name "
                            "(default best_effort)")
        parser.add_argument("--aging-bound", type=float, default=None, metavar="S",
                            help="aging bound in seconds (overrides the SPEC's aging_bound_s)")
        parser.add_argument("--wait-bound", type=float, default=3600.0, metavar="S",
                            help="waited_over_bound counts the jobs queued longer than S seconds (3600)")
        parser.add_argument("--half-life", type=float, default=None, metavar="S",
                            help="fair share: half-life of past usage in seconds (the SPEC's fair_share, "
                            "else 7 days); fair share is on when the SPEC has \"shares\"")
        parser.add_argument("--fair-entry", type=float, default=None, metavar="S",
                            help="fair share: seconds of its cards an admission charges at once (the SPEC's, "
                            "else 3600)")
        parser.add_argument("--no-fair-share", action="store_true",
                            help="ignore the SPEC's \"shares\" (order by dominant share alone)")
        parser.add_argument("--policy-file", metavar="JSON",
                            help="a JSON file whose 'policy' object changes quota rules and engine settings "
                            "(docs/advisor.md); a SPEC.json's own 'policy' key is read the same way")

    def handle(self, *args, **o):
        if o["repeat"] < 1 or o["overlay"] < 1 or o["scale"] <= 0:
            raise CommandError("--repeat and --overlay must be ≥ 1 and --scale > 0")
        if o["period"] < 0 or o["start_latency"] < 0:
            raise CommandError("--period and --start-latency must be ≥ 0")
        fair = self._fair(o)
        if o["trace_file"]:
            if o["trace"]:
                raise CommandError("give the trace once: as an argument or with --trace")
            o["trace"] = o["trace_file"]
        try:
            if o["mode"] == "packing":
                result = self._packing(o)
            else:
                parse_tenants(o["tenants"])
                jobs, nodes, quotas = sim.load(o["trace"], alibaba_dir=o["alibaba"], cluster=o["cluster"])
                if quotas is not None and o["tenants"] != "trace":
                    raise CommandError("--tenants re-splits the tenants: it needs derived quotas")
                if quotas is not None and o["quotas"] != "demand":
                    raise CommandError("--quotas chooses derived quotas: the SPEC already has quotas")
                jobs = sim.prepare(jobs, tenants=o["tenants"], start=o["start"], overlay=o["overlay"],
                                   repeat=o["repeat"], scale=o["scale"])
                # A generic trace's ``gpu_type`` A|B is an order of preference (DESIGN §9, §14).
                generic = sim.alibaba_paths(o["trace"], o["alibaba"]) is None
                alternatives = generic and not o["no_alternatives"]
                options = sim.Options(
                    policy=o["policy"], borrowing=not o["no_borrowing"], backfill=not o["no_backfill"],
                    fragmentation_aware=not o["plain_best_fit"], coalesce=o["coalesce"], grace=o["grace"],
                    checkpointing=o["checkpointing"], progress_every=0 if o["quiet"] else 5.0,
                    quota_split=o["quotas"], alternatives=alternatives, period=o["period"],
                    start_latency=o["start_latency"], resources=not o["no_resources"],
                    fair_share=not o["no_fair_share"], **fair, **self._queueing(o))
                # Windows, loans and borrow / lend limits of the SPEC (jobs.whatif.replay.limits):
                # the limits then change over the virtual clock by the portal's own rules.
                # With a policy on top (jobs.whatif.replay.policy), at every instant the limits in force
                # are transformed by it (limits.world; docs/replay.md, "The policy key").
                rules = _policy(o)
                if rules is not None:
                    rules = replay_policy.check(rules)
                options, world, quotas = limits.world_for(o["cluster"], jobs, nodes, quotas, rules,
                                                                 options)
                result = sim.simulate(jobs, nodes, quotas, options, world=world)
                if rules is not None:
                    result["policy_rules"] = rules
                result.update({"repeat": o["repeat"], "scale": o["scale"], "tenant_split": o["tenants"],
                               "quota_split": o["quotas"], "start": o["start"], "overlay": o["overlay"],
                               "alternatives": alternatives})
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CommandError(str(exc)) from exc
        text = json.dumps(result, indent=2)
        if o["out"]:
            with open(o["out"], "w") as fh:
                fh.write(text + "\n")
        else:
            self.stdout.write(text)

    @staticmethod
    def _fair(o) -> dict:
        """Fair-share options: a half-life or entry charge given here wins over the SPEC's."""
        given = {k: o[k] for k in ("half_life", "fair_entry") if o[k] is not None}
        if not all(0 <= v < float("inf") for v in given.values()):
            raise CommandError("--half-life and --fair-entry must be seconds ≥ 0")
        out = {"fair_from_spec": not given}
        if "half_life" in given:
            out["fair_half_life_s"] = given["half_life"]
        if "fair_entry" in given:
            out["fair_entry_s"] = given["fair_entry"]
        return out

    @staticmethod
    def _queueing(o) -> dict:
        """Queueing options: the SPEC's per-project strategies and aging bound, the flags."""
        per, bound = load_queueing(o["cluster"]) if o["cluster"] else ({}, None)
        if o["aging_bound"] is not None:
            bound = check_aging_bound(o["aging_bound"], "--aging-bound")
        if not 0 <= o["wait_bound"] < float("inf"):
            raise CommandError("--wait-bound must be a number of seconds ≥ 0")
        return {"queueing": o["queueing"] or "best_effort", "queueing_by_tenant": per,
                "aging_bound_s": bound, "wait_bound_s": o["wait_bound"]}

    def _packing(self, o):
        from jobs.whatif.replay import packing

        paths = sim.alibaba_paths(o["trace"], o["alibaba"])
        if not paths:
            raise CommandError("packing mode needs the Alibaba trace (openb_pod_list_*.csv or --alibaba DIR)")
        progress = None if o["quiet"] else (lambda msg: print(f"replay: {msg}", file=sys.stderr, flush=True))
        seeds = None if o["seeds"] == "trace" else [int(x) for x in o["seeds"].split(",")]
        return packing.run(paths[0], paths[1], policy=o["packing_policy"], seeds=seeds, progress=progress,
                           resources="none" if o["no_resources"] else None)
