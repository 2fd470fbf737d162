"""How well a replay of an exported history reproduces it (pure: no Django; issue 25 item 1).

``replay_export(folder)`` replays ``trace.csv`` + ``cluster.json`` written by ``jobs.whatif.history``
(the windows, loans and limits of the SPEC included, ``jobs.whatif.replay.limits``); ``compare`` puts
each job's replayed queue delay next to the recorded one (``recorded.csv``) and summarises the
absolute error (median, p90, max) and the per-tenant averages. Jobs whose recorded delay is
censored (still waiting at the end) or that did not go through the portal's queue (``external``:
their backend decided when they started) are left out of the error and counted.
"""

from __future__ import annotations

import csv
import json
import statistics
from dataclasses import replace
from pathlib import Path

from jobs.whatif.replay.csvtrace import read_trace
from jobs.whatif.replay.limits import load_world
from jobs.whatif.replay.metrics import percentile
from jobs.whatif.replay.sim import Options, simulate
from jobs.whatif.replay.spec import load_spec

# The replay as the history export is meant to be read: the engine's defaults (pooled), a job's
# listed flavor as its own, per-job delays. ``coalesce`` 1 s and ``grace`` 0 as ``manage.py replay``.
OPTIONS = Options(policy="pooled", detail=True, alternatives=True)


def export_options(folder: str | Path, **overrides) -> Options:
    """OPTIONS mirroring the service as the manifest describes it: the backend's start latency
    and beat's periodic cycle (``overrides`` win)."""
    manifest = json.loads((Path(folder) / "manifest.json").read_text())
    values = {
        "start_latency": float(manifest.get("backend_start_latency_s") or 0.0),
        "period": float(manifest.get("schedule_interval_s") or 0.0),
        **overrides,
    }
    return replace(OPTIONS, **values)


def replay_export(folder: str | Path, options: Options | None = None) -> dict:
    """``options`` default: :func:`export_options` of the folder."""
    folder = Path(folder)
    options = options or export_options(folder)
    jobs = read_trace(folder / "trace.csv")
    nodes, quotas = load_spec(folder / "cluster.json")
    world = load_world(folder / "cluster.json", jobs)
    return simulate(jobs, nodes, quotas, options, world=world)


def read_recorded(folder: str | Path) -> list[dict]:
    with open(Path(folder) / "recorded.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def _stats(errors: list[float]) -> dict:
    if not errors:
        return {"median_abs_error_s": 0.0, "p90_abs_error_s": 0.0, "max_abs_error_s": 0.0}
    return {
        "median_abs_error_s": round(statistics.median(errors), 3),
        "p90_abs_error_s": round(percentile(errors, 90), 3),
        "max_abs_error_s": round(max(errors), 3),
    }


def compare(recorded: list[dict], result: dict, *, measure: str = "queue_delay_s") -> dict:
    """Per job |replayed − recorded| of ``measure`` (``queue_delay_s``: until the backend started
    the job, what users see; ``admission_delay_s``: until the scheduler admitted it)."""
    replayed = result["job_queue_delay_s"]
    errors: list[float] = []
    per: dict[str, list[tuple[float, float]]] = {}
    left = {"censored": 0, "external": 0, "not_replayed": 0}
    for row in recorded:
        flags = set(filter(None, row["flags"].split("|")))
        if "external" in flags:
            left["external"] += 1
            continue
        if row[measure] == "":
            left["censored"] += 1
            continue
        if row["job_id"] not in replayed:
            left["not_replayed"] += 1
            continue
        rec, rep = float(row[measure]), float(replayed[row["job_id"]])
        errors.append(abs(rep - rec))
        per.setdefault(row["tenant"], []).append((rec, rep))
    tenants = {
        t: {
            "jobs": len(v),
            "avg_recorded_s": round(sum(r for r, _ in v) / len(v), 1),
            "avg_replayed_s": round(sum(p for _, p in v) / len(v), 1),
        }
        for t, v in sorted(per.items())
    }
    recs = [r for v in per.values() for r, _ in v]
    reps = [p for v in per.values() for _, p in v]
    return {
        "measure": measure,
        "compared": len(errors),
        "left_out": left,
        **_stats(errors),
        "avg_recorded_s": round(sum(recs) / len(recs), 1) if recs else 0.0,
        "avg_replayed_s": round(sum(reps) / len(reps), 1) if reps else 0.0,
        "tenants": tenants,
    }
