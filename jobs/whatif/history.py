"""History as a trace (issue 25 item 1; docs/replay.md, "History as a trace").

The jobs of a range ``[start, end)`` — portal jobs and external ones (DESIGN §11) — become the
generic trace CSV (DESIGN §9), and the pool as it stood becomes a cluster SPEC that
``manage.py replay`` reads: the nodes with their real topology, the quota tree with borrow and
lend limits, the quota windows and the loans (``jobs.whatif.replay.limits``). A ``recorded.csv`` holds
each job's queue delay as the events recorded it, so a replay of the trace can be compared with
what really happened (bench/history_fidelity.py), and ``manifest.json`` says what was exported.

Decisions (each job from its transition events, times from the events — the backend's where it
reported them):

* **Which jobs.** Every job that was in the queue during the range and started at least once:
  entered the queue (first ``→ queued``) before ``end`` and neither ended nor left the queue for
  good before ``start``. A job that never ran (cancelled, expired or rejected while waiting) took
  no GPUs and is counted, not exported (``skipped_never_ran``). A job still waiting at ``end``
  that never started is exported without duration (``waiting_at_end``).
* **submit_time** = first entry into the queue − ``start`` (an approval's wait is not queueing).
  A job that entered before ``start`` (``carried_over``) is submitted at 0 with what was left:
  a job running at ``start`` runs for the rest of its run.
* **duration** = its run time from the events: one run → first start to end; a preempted /
  requeued job → the sum of its runs when it checkpoints, else its last run (its work restarted).
  A job still running at ``end`` (``running_at_end``): its run up to ``end``; a job still waiting
  at ``end``: blank (the trace's "never ends").
* **priority** = its priority class's value (the replay makes one preemptible class per value);
  **tenant** = the department codes from the top down, then the project code (current tree);
  **workers** / **num_gpus** / **gpu_milli** as submitted; **gpu_type** the flavor it ran on.
* **Quotas** are today's quota nodes: quota nodes keep no history, so ``quotas_changed`` lists
  the nodes edited since ``start``. **Windows**: the active ones, in the order the portal applies
  them; **loans**: the approved ones (active or returned) overlapping the range, their validity
  relative to ``start``. **Nodes**: the active clusters' nodes that were ready at ``start``
  (node events tell the state then).
"""

from __future__ import annotations

import csv
import io
import json
import statistics
import zipfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _

from jobs.models import Job, JobEvent
from jobs.scheduling.config import fair_usage, read_config
from jobs.states import TERMINAL, JobState
from jobs.whatif.replay.csvtrace import COLUMNS
from portal.daterange import OUT_OF_RANGE, in_range
from portal.models import Department, Project
from quotas.models import Flavor, Loan, LoanState, Node, NodeEvent, NodeState, QuotaNode, QuotaWindow
from quotas.selectors import site_zone

FILES = ("trace.csv", "cluster.json", "recorded.csv", "manifest.json")
RECORDED_COLUMNS = ("job_id", "tenant", "kind", "queue_delay_s", "admission_delay_s", "flags")
__all__ = ["FILES", "HistoryExport", "history_export", "history_range", "write_dir", "zip_bytes"]


def max_days() -> int:
    return settings.GPUPOOL["HISTORY_MAX_DAYS"]


def history_range(
    *,
    weeks: int | None = None,
    since: datetime | str | None = None,
    until: datetime | str | None = None,
    now: datetime | None = None,
) -> tuple[datetime, datetime]:
    """``[start, end)``: the last ``weeks`` weeks up to ``now``, or ``[since, until)`` (``until``
    defaults to ``now``). ``since``/``until`` may be ISO text as a caller received it (the API,
    the command, an advisor scenario). Bounded by GPUPOOL_HISTORY_MAX_DAYS; errors name the field."""
    now = now or timezone.now()
    since, until = _instant("since", since), _instant("until", until)
    if weeks is not None and (since is not None or until is not None):
        raise ValidationError({"weeks": [_("Give either weeks or since/until, not both.")]})
    if weeks is None and since is None:
        raise ValidationError({"weeks": [_("Give weeks, or since (and optionally until).")]})
    limit = max_days()
    if weeks is not None:
        if weeks < 1 or weeks * 7 > limit:
            raise ValidationError({"weeks": [_("Give between 1 and %(n)d weeks.") % {"n": limit // 7}]})
        return now - timedelta(weeks=weeks), now
    for name, value in (("since", since), ("until", until)):
        if value is not None and timezone.is_naive(value):
            raise ValidationError({name: [_("Give a time zone offset (e.g. +08:00).")]})
    if since > now:
        raise ValidationError({"since": [_("since is in the future.")]})
    end = until or now
    if end <= since:
        raise ValidationError({"until": [_("until must be after since.")]})
    if end - since > timedelta(days=limit):
        raise ValidationError({"since": [_("The range may span at most %(n)d days.") % {"n": limit}]})
    return since, end


def _instant(name: str, value: datetime | str | None) -> datetime | None:
    """The date-time a caller gave, inside the portal's span of dates (``portal.daterange``):
    year 1 at +08:00 is an instant before year 1 in UTC, which no database driver, time-zone
    conversion or ``strftime`` can hold (issue 32 item 21)."""
    if isinstance(value, str):
        if not value:
            return None
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(
                {name: [_("Give an ISO date-time with offset, e.g. 2026-11-02T00:00:00+08:00.")]}
            ) from None
    if value is not None and not in_range(value):
        raise ValidationError({name: [str(OUT_OF_RANGE)]})
    return value


@dataclass
class _Life:
    """One job's history from its transition events."""

    queued_at: datetime | None = None  # first entry into the queue
    runs: list[list] = field(default_factory=list)  # [start, end or None]
    waits: list[list] = field(default_factory=list)  # [queued at, admitted at or None, running at or None]
    ended_at: datetime | None = None  # a terminal state
    left_queue_at: datetime | None = None  # ended without running

    def add(self, source: str, target: str, at: datetime) -> None:
        if target == JobState.QUEUED:
            self.queued_at = self.queued_at or at
            self.waits.append([at, None, None])
        elif target == JobState.ADMITTED and self.waits and self.waits[-1][1] is None:
            self.waits[-1][1] = at
        elif target == JobState.RUNNING:
            self.runs.append([at, None])
            if self.waits and self.waits[-1][2] is None:
                self.waits[-1][2] = at
        if source == JobState.RUNNING and self.runs and self.runs[-1][1] is None:
            self.runs[-1][1] = at
        if target in TERMINAL:
            self.ended_at = at
            if not self.runs:
                self.left_queue_at = at


@dataclass
class HistoryExport:
    start: datetime
    end: datetime
    trace: list[dict]
    cluster: dict
    recorded: list[dict]
    manifest: dict


def _department_paths() -> dict[int, str]:
    rows = dict(
        (pk, (code, parent)) for pk, code, parent in Department.objects.values_list("id", "code", "parent_id")
    )
    out: dict[int, str] = {}

    def path(pk: int) -> str:
        if pk not in out:
            code, parent = rows[pk]
            out[pk] = code if parent is None else f"{path(parent)}/{code}"
        return out[pk]

    for pk in rows:
        path(pk)
    return out


def _tenant_paths() -> tuple[dict[int, str], dict[int, str]]:
    """(department id → path, project id → path). A project's path never equals a
    department's (a project and a sub-department may share a code): then ``~project``."""
    depts = _department_paths()
    taken = set(depts.values())
    projects = {}
    for pk, code, dept in Project.objects.values_list("id", "code", "department_id"):
        p = f"{depts[dept]}/{code}"
        projects[pk] = p if p not in taken else f"{p}~project"
    return depts, projects


def _lives(jobs: Iterable[int]) -> dict[int, _Life]:
    out: dict[int, _Life] = defaultdict(_Life)
    events = (
        JobEvent.objects.filter(job_id__in=jobs, kind="transition")
        .order_by("job_id", "occurred_at", "id")
        .values_list("job_id", "from_state", "to_state", "occurred_at")
    )
    for jid, source, target, at in events.iterator(chunk_size=5000):
        out[jid].add(source, target, at)
    return out


def _seconds(a: datetime, b: datetime) -> float:
    return round((b - a).total_seconds(), 3)


def _duration(life: _Life, start: datetime, end: datetime, checkpointing: bool) -> tuple[float | None, str]:
    """(duration, flag) of a job that started: see the module docstring."""
    runs = [[max(a, start), b] for a, b in life.runs if a < end and (b is None or b > start)]
    if not runs:
        return None, "waiting_at_end"
    last_open = runs[-1][1] is None or runs[-1][1] > end
    closed = [[a, min(b, end) if b is not None else end] for a, b in runs]
    if checkpointing or len(closed) == 1:
        total = sum(_seconds(a, b) for a, b in closed)
    else:
        total = _seconds(*closed[-1])
    return max(1.0, total), ("running_at_end" if last_open else "")


def _delays(life: _Life, start: datetime, end: datetime) -> tuple[float | None, float | None]:
    """Recorded queue delay: time queued (from ``start`` at the earliest) until the backend started
    the job, summed over its waits — the replay's definition (docs/replay.md, Metrics) — and the
    same until its admission (the scheduler's decision, without the backend's start latency)."""
    queue = admit = 0.0
    since = None  # a wait whose admission was taken back before the start goes on in the next one
    waits = [w for w in life.waits if w[0] < end]
    for k, (queued, admitted, running) in enumerate(waits):
        q = max(since or queued, start)
        if running is None:
            if k + 1 == len(waits):
                return None, None  # still waiting at the end: censored
            since = since or queued  # preempted before it started, queued again
            continue
        since = None
        if running <= start:
            continue
        queue += max(0.0, _seconds(q, running))
        admit += max(0.0, _seconds(q, admitted or running))
    return queue, admit


def _jobs(start: datetime, end: datetime, tenants: dict[int, str], counts: dict) -> tuple[list, list]:
    candidates = (
        Job.objects.filter(submitted_at__lt=end)
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gt=start))
        .exclude(state__in=[JobState.PENDING_APPROVAL, JobState.REJECTED])
    )
    rows = list(
        candidates.order_by("submitted_at", "id").values_list(
            "id",
            "project_id",
            "kind",
            "flavor__name",
            "priority_class__value",
            "workers",
            "gpus_per_worker",
            "gpu_milli",
            "checkpointing",
            "cpu_millicores",
            "memory_mib",
        )
    )
    lives = _lives(candidates.values("id"))
    trace, recorded = [], []
    for jid, project, kind, flavor, priority, workers, gpus, gpu_milli, checkpointing, cpu, mem in rows:
        life = lives.get(jid)
        if life is None or not _in_range(life, start, end, counts):
            continue
        flags = _flags(life, kind, start)
        duration, flag = _duration(life, start, end, checkpointing)
        flags += [flag] if flag else []
        for f in flags:
            counts[f] += 1
        tenant = tenants[project]
        trace.append(
            {
                "job_id": str(jid),
                "submit_time": max(0.0, _seconds(start, life.queued_at)),
                "duration": "" if duration is None else duration,
                "num_gpus": gpus,
                "gpu_milli": gpu_milli if gpu_milli is not None else "",
                "gpu_type": flavor,
                "tenant": tenant,
                "kind": kind,
                "priority": priority,
                "workers": workers,
                # What each worker asked besides GPUs; empty: its GPUs' share (as live).
                "cpu_milli": "" if cpu is None else cpu,
                "memory_mib": "" if mem is None else mem,
            }
        )
        queue, admit = _delays(life, start, end)
        recorded.append(
            {
                "job_id": str(jid),
                "tenant": tenant,
                "kind": kind,
                "queue_delay_s": "" if queue is None else round(queue, 3),
                "admission_delay_s": "" if admit is None else round(admit, 3),
                "flags": "|".join(flags),
            }
        )
    return trace, recorded


def _in_range(life: _Life, start: datetime, end: datetime, counts: dict) -> bool:
    """In the queue during the range and started at least once (else counted as never ran)."""
    if life.queued_at is None or life.queued_at >= end:
        return False
    never_ran = not life.runs or life.runs[0][0] >= end
    if never_ran and life.left_queue_at is not None and life.left_queue_at < end:
        counts["skipped_never_ran"] += 1  # took no GPUs: nothing to replay
        return False
    return life.ended_at is None or life.ended_at > start


def _flags(life: _Life, kind: str, start: datetime) -> list[str]:
    flags = ["carried_over"] if life.queued_at < start else []
    if len(life.runs) > 1:
        flags.append("requeued")
    if kind == "external":
        flags.append("external")
    return flags


def _num(value: Decimal | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if value == value.to_integral_value() else float(value)


def _quotas(depts: dict[int, str], projects: dict[int, str], start: datetime) -> tuple[dict, dict, list]:
    """SPEC ``quotas`` (every quota node, and quota 0 for a department on the path of one that
    has no node of that flavor — what the engine reads for a missing node), key per node id,
    and the nodes edited since ``start``."""
    out: dict[str, dict] = defaultdict(dict)
    keys, changed = {}, []
    parents = dict(Department.objects.values_list("id", "parent_id"))
    project_dept = dict(Project.objects.values_list("id", "department_id"))
    need: set[tuple[int, str]] = set()
    for n in QuotaNode.objects.select_related("flavor").order_by("id"):
        path = projects[n.project_id] if n.project_id else depts[n.department_id]
        keys[n.pk] = (path, n.flavor.name)
        entry = {"quota": _num(n.quota)}
        if n.borrow_limit is not None:
            entry["borrow_limit"] = _num(n.borrow_limit)
        if n.lend_limit is not None:
            entry["lend_limit"] = _num(n.lend_limit)
        out[path][n.flavor.name] = entry
        if n.updated_at and n.updated_at > start:
            changed.append(f"{path}:{n.flavor.name}")
        dept = project_dept[n.project_id] if n.project_id else parents.get(n.department_id)
        while dept is not None:
            need.add((dept, n.flavor.name))
            dept = parents.get(dept)
    for dept, flavor in need:
        out[depts[dept]].setdefault(flavor, {"quota": 0})
    return {t: dict(sorted(per.items())) for t, per in sorted(out.items())}, keys, sorted(changed)


def fair_share_spec(depts: dict[int, str], projects: dict[int, str], wanted: set[str],
                    start: datetime) -> tuple[dict[str, float], dict]:
    """The SPEC's ``shares`` and ``fair_share`` block: what the service's fair share (DESIGN §16)
    worked with at ``start`` — each node's shares (an admin's weight, else its quota in normalised
    cards), the half-life and entry charge, each flavor's normalised cards per unit, and each
    project's decayed usage at ``start`` (so the replay starts from the same past). Only the nodes
    the replay's tree has (``wanted``: the SPEC's quota nodes and the trace's tenants)."""
    config = read_config(start)
    ids = {f"d{pk}": path for pk, path in depts.items()} | {f"p{pk}": path for pk, path in projects.items()}
    shares = {ids[t]: float(v) for t, v in config.fair_shares.items() if ids.get(t) in wanted}
    usage = fair_usage(start, config.fair_half_life_s)
    norms = {name: float(throughput * num / den) for name, throughput, num, den in Flavor.objects.values_list(
        "name", "relative_throughput", "fraction_numerator", "fraction_denominator")}
    block = {
        "half_life_s": config.fair_half_life_s,
        "entry_s": config.fair_entry_s,
        "norms": norms,
        "usage_at_start": {ids[t]: v for t, v in sorted(usage.items()) if ids.get(t) in wanted and v > 0},
    }
    return shares, block


def _with_ancestors(paths: Iterable[str]) -> set[str]:
    out = set()
    for path in paths:
        parts = path.split("/")
        out.update("/".join(parts[:k]) for k in range(1, len(parts) + 1))
    return out


def _windows(keys: dict) -> list[dict]:
    out = []
    for w in QuotaWindow.objects.filter(active=True).order_by("id"):
        tenant, flavor = keys[w.quota_node_id]
        out.append(
            {
                "tenant": tenant,
                "flavor": flavor,
                "name": w.name,
                "weekdays": sorted(int(d) for d in w.weekdays),
                "start": w.start_time.strftime("%H:%M:%S"),
                "end": w.end_time.strftime("%H:%M:%S"),
                "quota": _num(w.quota),
                "lend_limit": _num(w.lend_limit),
            }
        )
    return out


def _loans(keys: dict, start: datetime, end: datetime) -> list[dict]:
    out = []
    loans = Loan.objects.filter(
        state__in=[LoanState.ACTIVE, LoanState.RETURNED], starts_at__lt=end, ends_at__gt=start
    ).order_by("starts_at", "id")
    for loan in loans:
        lender, flavor = keys[loan.lender_id]
        borrower, _f = keys[loan.borrower_id]
        out.append(
            {
                "id": loan.pk,
                "lender": lender,
                "borrower": borrower,
                "flavor": flavor,
                "amount": _num(loan.amount),
                "start_s": _seconds(start, loan.starts_at),
                "end_s": _seconds(start, loan.ends_at),
            }
        )
    return out


def _nodes(start: datetime) -> tuple[list[dict], list[str]]:
    """The active clusters' nodes that were ready at ``start`` (the state before the first node
    event after it, else the current one), with their topology; and the names left out."""
    first_after = {}
    for node_id, state in (
        NodeEvent.objects.filter(at__gt=start)
        .order_by("node_id", "at", "id")
        .values_list("node_id", "from_state")
    ):
        first_after.setdefault(node_id, state)
    out, left = [], []
    nodes = (
        Node.objects.filter(cluster__active=True)
        .select_related("cluster", "flavor")
        .order_by("cluster__name", "name")
    )
    for n in nodes:
        state = first_after.get(n.pk, n.state)
        name = f"{n.cluster.name}/{n.name}"
        if state != NodeState.READY:
            left.append(name)
            continue
        out.append(
            {
                "name": name,
                "flavor": n.flavor.name,
                "gpus_per_node": n.gpu_count,
                "zone": n.zone,
                "spine": n.spine,
                "leaf": n.leaf,
                # Allocatable CPU and memory where the backend reports them (SPEC's optional keys).
                **({"cpu_milli": n.cpu_millicores} if n.cpu_millicores else {}),
                **({"memory_mib": n.memory_mib} if n.memory_mib else {}),
            }
        )
    return out, left


def history_export(*, start: datetime, end: datetime, now: datetime | None = None,
                   shares: bool | None = None) -> HistoryExport:
    """The trace, SPEC, recorded delays and manifest of ``[start, end)``.

    The SPEC carries the service's fair share (:func:`fair_share_spec`), so its replay orders as
    the service did (docs/replay.md); ``shares=False`` leaves it out (the replay then orders by
    dominant share alone, as the service did before it had fair share)."""
    now = now or timezone.now()
    zone = site_zone()
    depts, projects = _tenant_paths()
    counts: dict[str, int] = defaultdict(int)
    trace, recorded = _jobs(start, end, projects, counts)
    quotas, keys, changed = _quotas(depts, projects, start)
    nodes, left_out = _nodes(start)
    latencies = [
        float(r["queue_delay_s"]) - float(r["admission_delay_s"])
        for r in recorded
        if r["queue_delay_s"] != "" and "external" not in r["flags"]
    ]
    cluster = {
        "origin": start.astimezone(zone).isoformat(),
        "zone": str(zone.key),
        "nodes": nodes,
        "quotas": quotas,
        "windows": _windows(keys),
        "loans": _loans(keys, start, end),
    }
    if shares is not False:
        wanted = _with_ancestors([*quotas, *(row["tenant"] for row in trace)])
        cluster["shares"], cluster["fair_share"] = fair_share_spec(depts, projects, wanted, start)
    manifest = {
        "format": "gpupool-history/1",
        "start": start.astimezone(zone).isoformat(),
        "end": end.astimezone(zone).isoformat(),
        "span_s": _seconds(start, end),
        "exported_at": now.astimezone(zone).isoformat(),
        "files": list(FILES),
        "jobs": len(trace),
        "external_jobs": counts["external"],
        "skipped_never_ran": counts["skipped_never_ran"],
        "carried_over": counts["carried_over"],
        "running_at_end": counts["running_at_end"],
        "waiting_at_end": counts["waiting_at_end"],
        "requeued": counts["requeued"],
        "nodes": len(nodes),
        "gpus": sum(n["gpus_per_node"] for n in nodes),
        "nodes_not_ready": left_out,
        "quota_entries": sum(len(v) for v in quotas.values()),
        "windows": len(cluster["windows"]),
        "loans": len(cluster["loans"]),
        "quotas_changed_since_start": changed,
        # What a replay needs to mirror the service (docs/replay.md): the backend's start latency
        # (median admission → running of the exported portal jobs) and beat's cycle period.
        "backend_start_latency_s": round(statistics.median(latencies), 3) if latencies else 0.0,
        "schedule_interval_s": settings.CELERY_BEAT_SCHEDULE["scheduling-cycle"]["schedule"],
        "replay": "manage.py replay trace.csv --cluster cluster.json --policy pooled",
    }
    return HistoryExport(start, end, trace, cluster, recorded, manifest)


def _csv(rows: list[dict], columns: Iterable[str]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def texts(export: HistoryExport) -> dict[str, str]:
    return {
        "trace.csv": _csv(export.trace, COLUMNS),
        "cluster.json": json.dumps(export.cluster, indent=1, ensure_ascii=False) + "\n",
        "recorded.csv": _csv(export.recorded, RECORDED_COLUMNS),
        "manifest.json": json.dumps(export.manifest, indent=1, ensure_ascii=False) + "\n",
    }


def write_dir(export: HistoryExport, out: str | Path) -> list[Path]:
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in texts(export).items():
        (folder / name).write_text(text, encoding="utf-8")
        written.append(folder / name)
    return written


def zip_bytes(export: HistoryExport) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in texts(export).items():
            z.writestr(name, text)
    return buf.getvalue()
