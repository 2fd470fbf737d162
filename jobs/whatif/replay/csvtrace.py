"""The generic trace CSV of DESIGN §9 (pure: no Django).

Columns: ``job_id,submit_time,duration,num_gpus,gpu_milli,gpu_type,tenant,kind,priority,workers``
(seconds). Only ``job_id``, ``submit_time`` and ``num_gpus`` are required; a blank or missing
optional field takes the :class:`~jobs.whatif.replay.trace.TraceJob` default. A blank ``duration``
means the job never ends within the trace. ``gpu_type`` lists allowed models separated by ``|``.
Optional ``cpu_milli`` / ``memory_mib``: what each worker asks of its node besides GPUs (millicores,
MiB; blank or 0: nothing), replayed with the nodes' figures of the SPEC (issue 33 item 7).
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator
from pathlib import Path

from jobs.whatif.replay.trace import TraceJob

COLUMNS = ("job_id", "submit_time", "duration", "num_gpus", "gpu_milli", "gpu_type", "tenant",
           "kind", "priority", "workers", "cpu_milli", "memory_mib")


class TraceError(ValueError):
    """A malformed trace row (the message names the line)."""


def parse_rows(rows: Iterable[dict[str, str]]) -> Iterator[TraceJob]:
    for line, row in enumerate(rows, start=2):
        def get(name: str, row: dict[str, str] = row) -> str:
            return (row.get(name) or "").strip()
        try:
            if not get("job_id") or not get("submit_time") or not get("num_gpus"):
                raise TraceError("job_id, submit_time and num_gpus are required")
            kw: dict = {}
            if get("gpu_milli"):
                kw["gpu_milli"] = int(get("gpu_milli"))
            if get("gpu_type"):
                kw["gpu_types"] = tuple(t.strip() for t in get("gpu_type").split("|") if t.strip())
            for name in ("tenant", "kind"):
                if get(name):
                    kw[name] = get(name)
            for name in ("priority", "workers"):
                if get(name):
                    kw[name] = int(get(name))
            for name in ("cpu_milli", "memory_mib"):
                if get(name) and int(get(name)):
                    kw[name] = int(get(name))
            duration = float(get("duration")) if get("duration") else None
            job = TraceJob(get("job_id"), float(get("submit_time")), duration, int(get("num_gpus")), **kw)
        except (TypeError, ValueError) as exc:
            raise TraceError(f"line {line}: {exc}") from exc
        if job.num_gpus < 0 or job.workers < 1 or not 0 < job.gpu_milli <= 1000 or (
                job.duration is not None and job.duration < 0) or (job.cpu_milli or 0) < 0 or (
                job.memory_mib or 0) < 0:
            raise TraceError(f"line {line}: out of range: {row}")
        yield job


def read_trace(path: str | Path) -> list[TraceJob]:
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"job_id", "submit_time", "num_gpus"} - set(reader.fieldnames or ())
        if missing:
            raise TraceError(f"{path}: missing columns {sorted(missing)}")
        return list(parse_rows(reader))
