"""What the advisor replays, and one candidate's replay summarised (pure: no Django).

A :class:`Scenario` is the Alibaba GPU 2023 trace prepared as ``manage.py replay`` does
(``--tenants``, ``--start``, ``--overlay``, ``--scale``; demand-derived quotas), plus two cuts
that make one replay short enough for a search of hundreds (docs/advisor.md, "Scenario"):

* ``window_s``: only jobs submitted in the first ``window_s`` seconds (after the prepared
  trace's first submit) are kept — a shorter arrival window;
* ``node_fraction``: the first ⌈fraction × n⌉ nodes of each GPU model (file order) — a smaller
  pool, so fewer copies of the trace load it as much.

A :class:`HistoryScenario` (``{"kind": "history", "weeks": N}`` or ``"since"`` / ``"until"``) is the
portal's own recorded history instead: exported once when the search is created (``jobs.whatif.history``,
stored with the search) and replayed here as the fidelity bench does (``jobs.whatif.replay.fidelity``:
the manifest's start latency and periodic cycle), each candidate's ``policy`` on top of the
recorded windows, loans and limits (``jobs.whatif.replay.limits.world``). Candidate 0 (today's settings)
is the history as recorded.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from jobs.whatif.replay import paths, sim
from jobs.whatif.replay import policy as replay_policy
from jobs.whatif.replay.limits import world_for
from jobs.whatif.replay.metrics import Recorder, percentile
from jobs.whatif.replay.spec import capacity, demand_milli
from jobs.whatif.replay.trace import TraceJob, TraceNode


@dataclass(frozen=True)
class Scenario:
    kind = "alibaba"  # a class constant, not a field: to_json() is unchanged
    start: float | None = 10013436.0
    scale: float = 100.0
    overlay: int = 1
    tenants: str = "shape:8"
    window_s: float | None = 9600.0
    node_fraction: float = 0.065
    quota_split: str = "demand"
    pods_csv: str = ""  # "" = the default pod list; else a file inside the traces folder (see pods_file)

    @classmethod
    def from_json(cls, data: Mapping) -> Scenario:
        known = {f.name for f in fields(cls)}
        if data.get("kind", "alibaba") != "alibaba":
            raise ValueError("scenario.kind: alibaba or history")
        data = {k: v for k, v in data.items() if k != "kind"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"scenario: unknown key(s) {', '.join(unknown)}")
        s = cls(**data)
        if s.overlay < 1 or s.scale <= 0 or not 0 < s.node_fraction <= 1:
            raise ValueError("scenario: overlay ≥ 1, scale > 0 and 0 < node_fraction ≤ 1")
        if s.window_s is not None and s.window_s <= 0:
            raise ValueError("scenario: window_s > 0 (or null for the whole window)")
        if s.quota_split not in ("demand", "equal"):
            raise ValueError("scenario: quota_split is demand or equal")
        pods_file(s)  # confined to the traces folder (ValueError naming scenario.pods_csv)
        from jobs.whatif.replay.spec import parse_tenants

        parse_tenants(s.tenants)
        return s

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class HistoryScenario:
    """The portal's own history of the last ``weeks`` weeks, or of ``[since, until)`` (ISO with an
    offset); ``start`` / ``end`` / ``jobs``: the range and job count exported at creation."""

    kind = "history"
    weeks: int | None = None
    since: str | None = None
    until: str | None = None
    start: str | None = None
    end: str | None = None
    jobs: int | None = None

    @classmethod
    def from_json(cls, data: Mapping) -> HistoryScenario:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"kind"})
        if unknown:
            raise ValueError(f"scenario: unknown key(s) {', '.join(unknown)} "
                             "(history: weeks, or since and until)")
        s = cls(**{k: v for k, v in data.items() if k != "kind"})
        if s.weeks is not None and (isinstance(s.weeks, bool) or not isinstance(s.weeks, int)):
            raise ValueError("scenario.weeks: a whole number of weeks")
        for name in ("since", "until"):
            if getattr(s, name) is not None and not isinstance(getattr(s, name), str):
                raise ValueError(f"scenario.{name}: an ISO date-time with an offset")
        if s.weeks is None and s.since is None:
            raise ValueError("scenario.weeks: give weeks, or since (and optionally until)")
        return s

    def to_json(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


def parse(data: Mapping) -> Scenario | HistoryScenario:
    """A stored or submitted scenario: ``kind`` ``alibaba`` (the default) or ``history``."""
    if not isinstance(data, Mapping):
        raise ValueError("scenario: give a JSON object")
    if data.get("kind") == "history":
        return HistoryScenario.from_json(data)
    return Scenario.from_json(data)


class ScenarioUnavailable(ValueError):
    """The scenario's trace files are not on this machine (``missing``: their paths)."""

    def __init__(self, missing: list[Path]):
        self.missing = missing
        super().__init__(
            f"The scenario's trace cannot be read, not found: {', '.join(map(str, missing))}. "
            f"Set {paths.ENV} to the folder that holds {paths.ALIBABA_2023}/ (README, docs/replay.md); "
            f"the traces folder is now {paths.traces_dir()}.")


def pods_file(scenario: Scenario) -> Path:
    """The scenario's pod list: the default one of the Alibaba trace, or ``pods_csv`` — relative
    to the traces folder (``paths.traces_dir``), or absolute inside it. Anything that resolves
    outside that folder (``/etc/passwd``, ``../x.csv``, a link out of it) is refused: a scenario
    is a request from the network and must not name any file on the server."""
    if not scenario.pods_csv:
        return paths.alibaba_dir() / "csv" / sim.ALIBABA_PODS
    if not isinstance(scenario.pods_csv, str):
        raise ValueError("scenario.pods_csv: a file name inside the traces folder")
    root = paths.traces_dir().resolve()
    file = (root / scenario.pods_csv).resolve()  # an absolute pods_csv replaces root
    if not file.is_relative_to(root) or file.suffix != ".csv":
        raise ValueError(f"scenario.pods_csv: a .csv file inside the traces folder ({paths.ENV}), given "
                         f"relative to it, e.g. {paths.ALIBABA_2023}/csv/openb_pod_list_gpu100.csv")
    return file


def trace_files(scenario: Scenario) -> tuple[Path, Path]:
    """(pods, nodes): what :func:`load` reads."""
    return pods_file(scenario), paths.alibaba_dir() / "csv" / sim.ALIBABA_NODES


def missing_files(scenario: Scenario) -> list[Path]:
    """The scenario's trace files that are not there (empty: it can load)."""
    return [f for f in trace_files(scenario) if not f.exists()]


_LOADED: dict[tuple, tuple[list[TraceJob], list[TraceNode]]] = {}


def load(scenario: Scenario) -> tuple[list[TraceJob], list[TraceNode]]:
    """The scenario's jobs and nodes; kept per process, a worker replays one scenario many times.
    Missing files: :class:`ScenarioUnavailable` (the search fails with it, as its reason)."""
    pods, nodes_csv = trace_files(scenario)
    key = (scenario, pods, nodes_csv)  # the files too: the traces folder is the environment's
    if key not in _LOADED:
        missing = missing_files(scenario)
        if missing:
            raise ScenarioUnavailable(missing)
        _LOADED.clear()
        jobs, nodes, _ = sim.load(str(pods), alibaba_dir=str(nodes_csv.parent))
        _LOADED[key] = cut(scenario, jobs, nodes)
    return _LOADED[key]


def cut(scenario: Scenario, jobs: list[TraceJob], nodes: list[TraceNode]
        ) -> tuple[list[TraceJob], list[TraceNode]]:
    jobs = sim.prepare(jobs, tenants=scenario.tenants, start=scenario.start, overlay=scenario.overlay,
                       scale=scenario.scale)
    if scenario.window_s is not None and jobs:
        t0 = min(j.submit_time for j in jobs)
        jobs = [j for j in jobs if j.submit_time < t0 + scenario.window_s]
    if scenario.node_fraction < 1:
        by_model: dict[str, list[TraceNode]] = defaultdict(list)
        for n in nodes:
            by_model[n.model].append(n)
        keep = {id(n) for ns in by_model.values() for n in ns[:math.ceil(len(ns) * scenario.node_fraction)]}
        nodes = [n for n in nodes if id(n) in keep]
    return jobs, nodes


def replay(jobs: list[TraceJob], nodes: list[TraceNode], inputs: Mapping) -> dict:
    """One replay of ``jobs`` under ``inputs`` (``{"policy": …, "queueing": …}``, see
    :func:`jobs.whatif.advisor.space.replay_inputs`), summarised."""
    options = sim.Options(detail=True)
    queueing = dict(inputs.get("queueing") or {})
    if queueing:  # the strict-FIFO projects (best effort is the replay's default)
        options = replace(options, queueing_by_tenant=queueing)
    options, world = replay_policy.world(jobs, nodes, None, inputs.get("policy") or {}, options)
    result = sim.simulate(jobs, nodes, None, options, world=world)
    summary = summarise(result, {j.job_id: j.tenant for j in jobs}, world)
    return summary


def run(scenario: Scenario, inputs: Mapping) -> dict:
    jobs, nodes = load(scenario)
    return replay(jobs, nodes, inputs)


def no_wait_reuse(jobs: list[TraceJob], nodes: list[TraceNode], quotas=None) -> float:
    """Window idle-quota reuse against today's quotas if every job ran the moment it was
    submitted — what the demand itself allows, whatever the policy: a policy moves starts, it
    cannot make a tenant want more than its quota while another's sits idle. A yardstick for
    ``window_idle_quota_reuse_ratio_today_quotas``, not a bound (moving starts can shift it a
    little either way). ``quotas``: the SPEC's (None: derived, as the advisor's replays do)."""
    _options, world = replay_policy.world(jobs, nodes, quotas, {}, sim.Options())
    rec = Recorder(sim.project_quotas(world.tree, world.limits), capacity(nodes))
    flavors = sim.assign_flavors(jobs, nodes)
    events = []
    for j in jobs:
        if j.job_id in flavors:
            events.append((j.submit_time, 0, j))
            if j.duration is not None:
                events.append((j.submit_time + j.duration, 1, j))
    last_submit = max((t for t, kind, _ in events if kind == 0), default=0.0)
    windowed = False
    for t, kind, j in sorted(events, key=lambda e: (e[0], e[1], e[2].job_id)):
        if not windowed and t > last_submit:
            rec.mark_window(last_submit)
            windowed = True
        if kind == 0:
            rec.submitted(j.job_id, j.tenant, t)
            rec.started(j.job_id, flavors[j.job_id], demand_milli(j), t)
        else:
            rec.released(j.job_id, t, finished=True)
    if not windowed:
        rec.mark_window(last_submit)
    return rec.summary()["window_idle_quota_reuse_ratio"]


_HISTORY: dict = {}  # key -> (folder, jobs, nodes, quotas, recorded): the last history of this process


def run_history(key, files: Callable[[], Mapping[str, str]], inputs: Mapping) -> dict:
    """One replay of a stored history export under ``inputs``. ``files()`` gives the export's
    texts (``jobs.whatif.history.texts``: trace.csv, cluster.json, recorded.csv, manifest.json); they are
    written to a private folder and read once per process and ``key`` (a worker replays one
    search's history many times)."""
    if key not in _HISTORY:
        import tempfile
        from pathlib import Path

        from jobs.whatif.replay.csvtrace import read_trace
        from jobs.whatif.replay.fidelity import read_recorded
        from jobs.whatif.replay.spec import load_spec

        forget_histories()
        folder = Path(tempfile.mkdtemp(prefix="gpupool-advisor-history-"))
        for name, text in files().items():
            (folder / name).write_text(text, encoding="utf-8")
        nodes, quotas = load_spec(folder / "cluster.json")
        _HISTORY[key] = (folder, read_trace(folder / "trace.csv"), nodes, quotas, read_recorded(folder))
    folder, jobs, nodes, quotas, recorded = _HISTORY[key]
    return replay_history(folder, jobs, nodes, quotas, recorded, inputs)


def forget_histories() -> None:
    """Drop the history this process holds, and its folder."""
    import shutil

    for folder, *_rest in _HISTORY.values():
        shutil.rmtree(folder, ignore_errors=True)
    _HISTORY.clear()


def replay_history(folder, jobs: list[TraceJob], nodes: list[TraceNode], quotas, recorded: list[dict],
                   inputs: Mapping) -> dict:
    """A history replayed as the fidelity bench does (the manifest's backend start latency and
    periodic cycle, a job's flavor its own, per-job delays), under ``inputs``; summarised, with
    ``recorded``: how far the replayed queue delays are from the recorded ones
    (``jobs.whatif.replay.fidelity.compare``; candidate 0 is the history as recorded)."""
    from jobs.whatif.replay import fidelity

    options = fidelity.export_options(folder)
    queueing = dict(inputs.get("queueing") or {})
    if queueing:
        options = replace(options, queueing_by_tenant=queueing)
    rules = replay_policy.check(inputs.get("policy") or {})
    options, world, _ = world_for(folder / "cluster.json", jobs, nodes, quotas, rules, options)
    result = sim.simulate(jobs, nodes, None, options, world=world)
    summary = summarise(result, {j.job_id: j.tenant for j in jobs}, world)
    cmp = fidelity.compare(recorded, result)
    summary["recorded"] = {k: cmp[k] for k in ("compared", "median_abs_error_s", "p90_abs_error_s",
                                               "max_abs_error_s", "avg_recorded_s", "avg_replayed_s")}
    return summary


KEEP = ("jobs", "finished", "never_started", "avg_queue_delay_s", "p50_queue_delay_s", "p95_queue_delay_s",
        "gpu_allocation_rate", "idle_quota_reuse_ratio", "window_s", "window_gpu_allocation_rate",
        "window_idle_quota_reuse_ratio", "idle_quota_reuse_ratio_today_quotas",
        "window_idle_quota_reuse_ratio_today_quotas", "preemptions", "preempted_gpu_hours_lost", "makespan_s",
        "wall_seconds", "cycles", "gpus", "nodes", "p99_queue_delay_s", "max_queue_delay_s",
        "waited_over_bound")


def summarise(result: Mapping, tenant_of: Mapping[str, str], world) -> dict:
    """The figures the objective and the page need: the run's headline, per department (first
    path part of the tenant) avg / p95 queue delay over its jobs, GPU-hours and its quota in GPUs
    per flavor (the lowest it had at any time), and per project the replay's own row."""
    out = {k: result[k] for k in KEEP if k in result}
    out["gpu_hours"] = sum(t["gpu_hours"] for t in result["tenants"].values())
    delays: dict[str, list[float]] = defaultdict(list)
    for job, delay in result["job_queue_delay_s"].items():
        delays[tenant_of[job].split("/")[0]].append(delay)
    jobs: dict[str, int] = defaultdict(int)
    hours: dict[str, float] = defaultdict(float)
    for tenant, row in result["tenants"].items():
        jobs[tenant.split("/")[0]] += row["jobs"]
        hours[tenant.split("/")[0]] += row["gpu_hours"]
    quotas = _lowest_department_quotas(world)
    out["departments"] = {
        d: {"jobs": jobs[d], "avg_queue_delay_s": sum(delays[d]) / len(delays[d]) if delays[d] else 0.0,
            "p95_queue_delay_s": percentile(delays[d], 95), "gpu_hours": hours[d],
            "quota_gpus": quotas.get(d, {})}
        for d in sorted(jobs)}
    out["projects"] = {t: {k: row[k] for k in ("jobs", "avg_queue_delay_s", "p95_queue_delay_s", "gpu_hours",
                                               "quota_gpus")}
                       for t, row in sorted(result["tenants"].items())}
    return out


def _lowest_department_quotas(world) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for limits in [world.limits, *(lim for _, lim in world.changes)]:
        for d, per in replay_policy.department_quotas(world.tree, limits).items():
            for f, q in per.items():
                out.setdefault(d, {})[f] = min(q, out.get(d, {}).get(f, q))
    return out
