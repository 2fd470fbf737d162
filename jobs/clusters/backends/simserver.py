"""A simulated GPU cluster served over HTTP: the embedded default backend for the demo and tests.

Stdlib only and no Django, so it runs as its own process and the portal talks to it exactly as it
would to a remote cluster (client: ``jobs.clusters.backends.simulator``)::

    python -m jobs.clusters.backends.simserver --port 9400 --state sim.json --speed 60 \
        [--inventory nodes.json]

Time: jobs run on the real clock sped up by ``--speed``. Every duration in the API
(``sim_duration_seconds``, ``max_runtime_seconds``, ``grace_seconds``, slow start) is in simulated
seconds and lasts ``seconds / speed`` real seconds; reported timestamps are real (UTC).
State advances lazily: each request first replays, in time order, every start and end that fell
due since the previous request, so results never depend on how often anyone polls, and a server
restarted on the same state file catches up with what happened while it was down.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import signal
import sys
import threading
import time
import uuid
import zlib
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from jobs.clusters.backends import rendezvous

PENDING, RUNNING, SUCCEEDED, FAILED, CANCELLED, LOST = (
    "pending",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "lost",
)
TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED})
NODE_STATES = ("ready", "cordoned", "down")
DEFAULT_DURATION = 600  # simulated seconds, when a spec has no sim_duration_seconds
# Version 1 still: the log and checkpoint fields are optional (``_with_defaults``), so a state
# file written before them loads as it is.
STATE_VERSION = 1
# Names become file names (the job's log): no separators, no leading dot.
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
STEP_SECONDS = 10  # simulated seconds per training step: one progress line each
# A request writes at most this many progress lines per job (the latest ones, after a "skipped"
# line): a long job at a high speed-up, or a server that was down for hours, must not make one
# request write millions of lines. The step counter itself never skips.
LOG_LINES_PER_ADVANCE = 1000
MAX_TAIL_BYTES = 1024 * 1024
LOG_CHUNK_BYTES = 64 * 1024  # as jobs.clusters.backends.base (not imported: this module stays standalone)


class ApiError(Exception):
    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail


def iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


# ---------------------------------------------------------------- the cluster


class SimCluster:
    """Nodes and jobs of the simulated cluster. Every public method holds one lock: requests
    arrive on many threads, and the advance-then-mutate-then-save sequence must not interleave."""

    def __init__(self, state_path: Path, speed: float, clock=time.time):
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.path = state_path
        self.speed = speed
        self.clock = clock
        self.lock = threading.Lock()
        # One directory per state file: two demo databases keep their simulators side by side
        # in .run/, and their jobs share names (gp-1, ...).
        self.logs_dir = state_path.parent / "logs" / state_path.stem
        self.dirty = False  # log lines written since the last save (a read-only request wrote some)
        self.state = self._load()
        self._trim_logs()

    # -- persistence

    def _load(self) -> dict:
        if not self.path.exists():
            return {
                "version": STATE_VERSION,
                "clock": self.clock(),
                "seq": 0,
                "nodes": {},
                "jobs": {},
                "armed": {},
                "logs": {},
                "xid": {},
            }
        # A corrupt state file stops the server instead of silently starting an empty cluster.
        state = json.loads(self.path.read_text())
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"{self.path}: unsupported state version {state.get('version')!r}")
        state.setdefault("logs", {})
        state.setdefault("xid", {})  # injected XID errors, "<node>/<gpu>" → the last XID
        for job in state["jobs"].values():
            self._with_defaults(job)
        return state

    def _with_defaults(self, job: dict) -> None:
        """A job saved before logs and checkpoints: no environment, no checkpoint, and a log
        that starts when the next request finds it running (``run`` None)."""
        job.setdefault("duration", job["run_seconds"] * self.speed)
        job.setdefault("steps_total", _steps(job["duration"]))
        for key, default in (
            ("env", []),
            ("mounts", []),
            ("checkpoint_dir", ""),
            ("checkpointing", False),
            ("expose_port", None),
            ("load_rps", None),
            ("start_step", 0),
            ("log_step", 0),
            ("run", None),
        ):
            job.setdefault(key, default)

    def _trim_logs(self) -> None:
        """Cut what a log holds beyond the size the state file records: lines written by a server
        killed before it saved. The replay writes them again, from the same saved cursor."""
        for name, entry in self.state["logs"].items():
            path = self.logs_dir / f"{name}.log"
            if path.exists() and path.stat().st_size > entry["size"]:
                os.truncate(path, entry["size"])

    def _save(self) -> None:
        # temp file + fsync + os.replace: a kill -9 mid-write leaves the previous complete file.
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as fh:
            json.dump(self.state, fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)

    def _real(self, sim_seconds: float) -> float:
        return max(0.0, float(sim_seconds)) / self.speed

    # -- time

    def _advance(self, now: float) -> None:
        """Apply every job start and end due by ``now``, earliest first. Ends sort before starts
        at the same instant so a finishing job frees its GPUs for the job waiting on them."""
        cursor = self.state["clock"]
        while True:
            event = self._next_event(cursor, now)
            if event is None:
                break
            at, _order, _seq, job, outcome = event
            if outcome == RUNNING:
                self._start(job, at)
            else:
                self._finish(job, at, *outcome)
            cursor = at
        self.state["clock"] = max(now, self.state["clock"])
        for job in self._active():
            if job["phase"] == RUNNING:
                self._progress(job, now)

    def _next_event(self, cursor: float, now: float):
        events = []
        usage = self._gpu_usage()
        for job in self._active():
            if job["phase"] == RUNNING:
                at, outcome = _end_of(job)
                events.append((at, 0, job["seq"], job, outcome))
            else:
                at = max(job["start_after"], cursor)
                if self._fits(job, usage):
                    events.append((at, 1, job["seq"], job, RUNNING))
        due = [e for e in events if e[0] <= now]
        return min(due, key=lambda e: e[:3]) if due else None

    def _active(self) -> list[dict]:
        return [j for j in self.state["jobs"].values() if j["phase"] not in TERMINAL]

    def _gpu_usage(self) -> dict[tuple[str, int], list[tuple[dict, int]]]:
        usage: dict[tuple[str, int], list[tuple[dict, int]]] = {}
        for job in self.state["jobs"].values():
            if job["phase"] == RUNNING:
                for slot in _slots(job):
                    usage.setdefault((slot["node"], slot["gpu"]), []).append((job, slot["milli"]))
        return usage

    @staticmethod
    def _fits(job: dict, usage) -> bool:
        want: dict[tuple[str, int], int] = {}
        for slot in _slots(job):
            key = (slot["node"], slot["gpu"])
            want[key] = want.get(key, 0) + slot["milli"]
        return all(m + sum(h for _, h in usage.get(k, ())) <= 1000 for k, m in want.items())

    def _finish(self, job, at, phase, exit_code, message, node_failure=False) -> None:
        ran = job["phase"] == RUNNING
        if ran:  # the steps done until this instant, then the end line
            self._progress(job, at, completed=phase == SUCCEEDED)
        job.update(
            phase=phase, finished_at=at, exit_code=exit_code, message=message, node_failure=node_failure
        )
        if ran:
            step, code = job["log_step"], "-" if exit_code is None else exit_code
            self._log(
                job["name"],
                [f"{iso(at)} end {phase} exit={code} step {step}/{job['steps_total']}: {message}"],
            )
            self._save_step(job, step)

    # -- the job's log and checkpoint

    def _start(self, job: dict, at: float) -> None:
        """The job starts: from the step its checkpoint records (a requeued run resumes), so
        only the remaining steps are left to run."""
        job.update(phase=RUNNING, started_at=at, message="")
        step = self._resume_step(job)
        job.update(start_step=step, log_step=step)
        job["run_seconds"] = self._real(max(0.0, job["duration"] - step * STEP_SECONDS))
        self._open_run(job, resumed=step)

    def _open_run(self, job: dict, resumed: int) -> None:
        entry = self.state["logs"].setdefault(job["name"], {"runs": 0, "size": 0})
        entry["runs"] += 1
        job["run"] = entry["runs"]
        lines = [f"== run {job['run']} ==", f"{iso(job['started_at'])} start {_describe(job)}"]
        # DESIGN §17: what each worker of a multi-worker job is given to find worker 0.
        lines += [f"{iso(job['started_at'])} worker {rank}: {rendezvous.describe(variables)}"
                  for rank, variables in enumerate(_rendezvous(job))]
        if resumed:
            lines.append(
                f"{iso(job['started_at'])} resumed from step {resumed} "
                f"(checkpoint {job['checkpoint_dir']}/step)"
            )
        self._log(job["name"], lines)

    def _resume_step(self, job: dict) -> int:
        if not (job["checkpointing"] and job["checkpoint_dir"]):
            return 0
        try:
            step = int(Path(job["checkpoint_dir"], "step").read_text().strip())
        except (OSError, ValueError):  # no checkpoint yet (or not one we wrote): a fresh start
            return 0
        return min(max(step, 0), job["steps_total"])

    def _progress(self, job: dict, until: float, *, completed: bool = False) -> None:
        """Write the progress lines that fell due by ``until`` (every STEP_SECONDS simulated
        seconds; all of them when the job completed), at most LOG_LINES_PER_ADVANCE of them."""
        if job["run"] is None:  # running since before this simulator wrote logs
            self._open_run(job, resumed=0)
        done = job["steps_total"] if completed else self._step_at(job, until)
        first = job["log_step"] + 1
        if done < first:
            return
        lines = []
        if done - first + 1 > LOG_LINES_PER_ADVANCE:
            skipped = done - first + 1 - LOG_LINES_PER_ADVANCE
            first = done - LOG_LINES_PER_ADVANCE + 1
            lines.append(
                f"... {skipped} progress lines skipped ({LOG_LINES_PER_ADVANCE} at most per request)"
            )
        start, offset = job["started_at"], job["start_step"]
        lines += [
            f"{iso(min(until, start + self._real((k - offset) * STEP_SECONDS)))} step {k}/"
            f"{job['steps_total']} loss={_loss(job['name'], k)}"
            for k in range(first, done + 1)
        ]
        self._log(job["name"], lines)
        job["log_step"] = done
        self._save_step(job, done)

    def _step_at(self, job: dict, at: float) -> int:
        elapsed = (at - job["started_at"]) * self.speed
        # the epsilon: a step due exactly now must not be lost to float rounding of speed
        return min(job["steps_total"], job["start_step"] + int(elapsed / STEP_SECONDS + 1e-9))

    def _log(self, name: str, lines: list[str]) -> None:
        entry = self.state["logs"].setdefault(name, {"runs": 0, "size": 0})
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.logs_dir / f"{name}.log", "ab") as fh:
            if fh.tell() > entry["size"]:  # written after the last save by a killed server
                fh.truncate(entry["size"])
            fh.write("".join(f"{line}\n" for line in lines).encode())
            entry["size"] = fh.tell()
        self.dirty = True

    def _save_step(self, job: dict, step: int) -> None:
        """The checkpoint: the step counter in ``<checkpoint dir>/step``, replaced atomically as a
        training job saves its checkpoint (a reader never sees half a number)."""
        if not (job["checkpointing"] and job["checkpoint_dir"]):
            return
        folder = Path(job["checkpoint_dir"])
        tmp = folder / f".step.{os.getpid()}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            tmp.write_text(f"{step}\n")
            os.replace(tmp, folder / "step")
        except OSError as exc:  # the job goes on; its log says why it cannot resume
            if not job.get("checkpoint_error"):
                job["checkpoint_error"] = str(exc)
                self._log(job["name"], [f"checkpoint not written: {exc}"])

    def _run(self, fn, *args, save: bool = True):
        with self.lock:
            now = self.clock()
            self._advance(now)
            result = fn(now, *args)
            if save or self.dirty:
                self._save()
                self.dirty = False
            return result

    # -- nodes

    def nodes(self) -> list[dict]:
        return self._run(lambda now: list(self.state["nodes"].values()), save=False)

    def set_inventory(self, nodes: list[dict], *, keep_states: bool = False) -> list[dict]:
        return self._run(self._set_inventory, [_clean_node(n) for n in nodes], keep_states)

    def _set_inventory(self, now, nodes, keep_states):
        old = self.state["nodes"]
        if keep_states:  # a restart with --inventory keeps injected down/cordoned states
            nodes = [{**n, "state": old[n["name"]]["state"]} if n["name"] in old else n for n in nodes]
        self.state["nodes"] = {n["name"]: n for n in nodes}
        for name in old:
            if name not in self.state["nodes"]:
                self._fail_jobs_on(name, now, f"node {name} removed from the inventory")
        for n in nodes:
            if n["state"] == "down":
                self._fail_jobs_on(n["name"], now, f"node {n['name']} down")
        return list(self.state["nodes"].values())

    def set_node_state(self, name: str, state: str) -> dict:
        if state not in NODE_STATES:
            raise ApiError(400, f"state must be one of {', '.join(NODE_STATES)}")
        return self._run(self._set_node_state, name, state)

    def _set_node_state(self, now, name, state):
        node = self._node(name)
        node["state"] = state
        if state == "down":
            self._fail_jobs_on(name, now, f"node {name} down")
        return node

    def set_xid(self, name: str, gpu, xid) -> dict:
        """The last XID error of one GPU, as DCGM reports it (``DCGM_FI_DEV_XID_ERRORS``); 0
        clears it (a repaired card, a restarted exporter). The jobs on the GPU run on: what a
        broken card means for them is the portal's to decide (node health, DESIGN §17)."""
        try:
            gpu, xid = int(gpu), int(xid)
        except (TypeError, ValueError):
            raise ApiError(400, "gpu and xid must be integers") from None
        return self._run(self._set_xid, name, gpu, xid)

    def _set_xid(self, now, name, gpu, xid):
        node = self._node(name)
        if not 0 <= gpu < node["gpus"] or xid < 0:
            raise ApiError(400, f"node {name} has no GPU {gpu}, or the XID is negative")
        key = f"{name}/{gpu}"
        if xid:
            self.state["xid"][key] = xid
        else:
            self.state["xid"].pop(key, None)
        return {"node": name, "gpu": gpu, "xid": xid}

    def _node(self, name: str) -> dict:
        if name not in self.state["nodes"]:
            raise ApiError(404, f"no node {name}")
        return self.state["nodes"][name]

    def _fail_jobs_on(self, node: str, now: float, message: str) -> None:
        for job in self._active():
            if any(s["node"] == node for s in _slots(job)):
                self._finish(job, now, FAILED, None, message, node_failure=True)

    # -- jobs

    def submit(self, spec: dict) -> tuple[dict, bool]:
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise ApiError(400, "name is required")
        _check_name(name)
        placement = _clean_placement(spec.get("placement") or [], spec.get("gpu_milli"))
        return self._run(self._submit, name, spec, placement)

    def _submit(self, now, name, spec, placement):
        jobs = self.state["jobs"]
        # Idempotent: a retried dispatch finds the job it already created. A *finished* job of
        # that name is an earlier run — the portal requeued the job (preempted, or its node was
        # lost) and runs it again — so it is replaced, as Slurm looks only for unfinished jobs.
        if name in jobs and jobs[name]["phase"] not in TERMINAL:
            return self._view(jobs[name], now), False
        self.state["seq"] += 1
        duration = spec.get("sim_duration_seconds")
        duration = DEFAULT_DURATION if duration is None else max(0.0, float(duration))
        max_runtime = spec.get("max_runtime_seconds")
        job = {
            "name": name,
            "seq": self.state["seq"],
            "job_id": spec.get("job_id"),
            "kind": spec.get("kind", ""),
            "command": spec.get("command") or "",
            "flavor": spec.get("flavor", ""),
            "labels": spec.get("labels") or {},
            "placement": placement,
            "phase": PENDING,
            "submitted_at": now,
            "start_after": now + self.state["armed"].pop(name, 0.0),
            "run_seconds": self._real(duration),
            "duration": duration,
            "steps_total": _steps(duration),
            "deadline_seconds": None if max_runtime is None else self._real(max_runtime),
            "cancel_at": None,
            "started_at": None,
            "finished_at": None,
            "exit_code": None,
            "message": "",
            "node_failure": False,
            **_environment(spec),
            "load_rps": _load_rps(spec),
            "start_step": 0,
            "log_step": 0,
            "run": None,
        }
        jobs[name] = job
        self._check_placement(job, now)
        self._advance(now)  # starts at once when its GPUs are free
        return self._view(job, now), True

    def _check_placement(self, job: dict, now: float) -> None:
        for slot in _slots(job):
            node = self.state["nodes"].get(slot["node"])
            if node is None or node["state"] == "down":
                why = "unknown" if node is None else "down"
                self._finish(job, now, FAILED, None, f"node {slot['node']} {why}", node_failure=True)
                return
            if not 0 <= slot["gpu"] < node["gpus"]:
                self._finish(job, now, FAILED, None, f"node {slot['node']} has no GPU {slot['gpu']}")
                return

    def statuses(self, names: list[str] | None) -> dict[str, dict]:
        return self._run(self._statuses, names)

    def _statuses(self, now, names):
        jobs = self.state["jobs"]
        if names is None:
            return {n: self._view(j, now) for n, j in jobs.items()}
        return {n: self._view(jobs[n], now) if n in jobs else {"name": n, "phase": LOST} for n in names}

    def job(self, name: str) -> dict:
        return self._run(lambda now: self._view(self._job(name), now))

    def _job(self, name: str) -> dict:
        if name not in self.state["jobs"]:
            raise ApiError(404, f"no job {name}")
        return self.state["jobs"][name]

    def cancel(self, name: str, grace_seconds: float) -> dict:
        return self._run(self._cancel, name, grace_seconds)

    def _cancel(self, now, name, grace_seconds):
        job = self._job(name)
        if job["phase"] == PENDING:  # nothing runs yet, so there is nothing to signal
            self._finish(job, now, CANCELLED, None, "cancelled before start")
        elif job["phase"] == RUNNING:
            at = now + self._real(grace_seconds)
            # a repeated cancel may shorten the grace period, never extend it
            if job["cancel_at"] is None or at < job["cancel_at"]:
                job["cancel_at"] = at
                self._log(name, [f"{iso(now)} SIGTERM: stopping in {grace_seconds:g} s"])
            self._advance(now)
        return self._view(job, now)

    def crash(self, name: str, exit_code: int = 137) -> dict:
        return self._run(self._crash, name, exit_code)

    def _crash(self, now, name, exit_code):
        """The program dies: killed by signal 9 (137), or exits with ``exit_code`` on its own."""
        job = self._job(name)
        if job["phase"] in TERMINAL:
            raise ApiError(409, f"job {name} already {job['phase']}")
        why = "killed by signal 9" if exit_code == 137 else f"exited with code {exit_code}"
        self._finish(job, now, FAILED, exit_code, f"crashed (injected): {why}")
        return self._view(job, now)

    def resize(self, name: str, raw_placement, gpu_milli) -> dict:
        placement = _clean_placement(raw_placement, gpu_milli)
        if not placement:
            raise ApiError(400, "a job keeps at least one worker")
        return self._run(self._resize, name, placement)

    def _resize(self, now, name, placement):
        """The job now runs on ``placement`` (workers added or removed). A running job can only
        take GPUs nobody else runs on (409 otherwise: the portal retries once they are free);
        a finished job is left as it is (there is nothing to resize)."""
        job = self._job(name)
        if job["phase"] in TERMINAL:
            return self._view(job, now)
        if job["phase"] == RUNNING:
            usage = self._gpu_usage()
            for slot in (s for w in placement for s in w):
                others = sum(m for j, m in usage.get((slot["node"], slot["gpu"]), ()) if j is not job)
                if others + slot["milli"] > 1000:
                    raise ApiError(409, f"GPU {slot['gpu']} of {slot['node']} is busy")
        job["placement"] = placement
        job["resized_at"] = now
        self._check_placement(job, now)
        self._advance(now)
        return self._view(job, now)

    def set_load(self, name: str, rps: float) -> dict:
        return self._run(self._set_load, name, rps)

    def _set_load(self, now, name, rps):
        """The requests per second the service receives from now on (spread evenly over its
        replicas on the metrics endpoint): how a test or a demo drives the autoscaler."""
        job = self._job(name)
        job["load_rps"] = rps
        return self._view(job, now)

    def slow_start(self, name: str, seconds: float) -> dict:
        return self._run(self._slow_start, name, seconds)

    def _slow_start(self, now, name, seconds):
        job = self.state["jobs"].get(name)
        if job is None:  # armed for a job not submitted yet (the portal dispatches later)
            self.state["armed"][name] = self._real(seconds)
            return {"name": name, "phase": LOST, "armed": True}
        if job["phase"] != PENDING:
            raise ApiError(409, f"job {name} is already {job['phase']}")
        job["start_after"] = now + self._real(seconds)
        return self._view(job, now)

    def _view(self, job: dict, now: float) -> dict:
        message = job["message"]
        if job["phase"] == PENDING:
            message = "slow start" if job["start_after"] > now else "waiting for GPUs"
        elif job["phase"] == RUNNING and job["cancel_at"] is not None:
            message = "cancelling"
        return {
            "name": job["name"],
            "phase": job["phase"],
            "job_id": job["job_id"],
            "command": job["command"],
            "submitted_at": iso(job["submitted_at"]),
            "started_at": iso(job["started_at"]),
            "finished_at": iso(job["finished_at"]),
            "exit_code": job["exit_code"],
            "message": message,
            "nodes": list(dict.fromkeys(s["node"] for s in _slots(job))),
            "node_failure": job["node_failure"],
            "placement": job["placement"],
            "workers": len(job["placement"]),
            "resized_at": iso(job.get("resized_at")),
            "kind": job["kind"],
            "expose_port": job["expose_port"],
            # where the training is: the step reached, of how many, and the step this run began at
            "step": job["log_step"],
            "steps": job["steps_total"],
            "resumed_from": job["start_step"],
            "ends_at": iso(_end_of(job)[0]) if job["phase"] == RUNNING else None,
            "load_rps": job["load_rps"],
            "rendezvous": _rendezvous(job),
        }

    # -- logs and the dev page

    def log_tail(self, name: str, max_bytes: int) -> dict:
        return self._run(self._log_tail, name, max_bytes, save=False)

    def _log_tail(self, now, name, max_bytes):
        path, size, missing = self._log_file(name)
        if missing:
            return {"text": "", "size": None, "truncated": False, "missing": missing}
        start = max(0, size - max_bytes)
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(size - start)
        if start and b"\n" in data:  # from the first whole line: never half a line or character
            data = data[data.index(b"\n") + 1 :]
        return {"text": data.decode("utf-8", "replace"), "size": size, "truncated": start > 0, "missing": ""}

    def log_file(self, name: str) -> tuple[Path, int]:
        """The log and its size now (brought up to date first); 404 with the reason when none."""
        path, size, missing = self._run(lambda now: self._log_file(name), save=False)
        if missing:
            raise ApiError(404, missing)
        return path, size

    def _log_file(self, name: str) -> tuple[Path, int, str]:
        _check_name(name)
        job = self.state["jobs"].get(name)
        entry = self.state["logs"].get(name)
        path = self.logs_dir / f"{name}.log"
        if job is None:
            return path, 0, f"the simulator has no job {name}"
        if entry is None:
            if job["phase"] == PENDING:
                return path, 0, "not started yet"
            return path, 0, "the job never started" if job["started_at"] is None else "the job wrote no log"
        if not path.exists():
            return path, 0, "the log file was removed"
        # the size the state records: what a concurrent write appends later is not part of this read
        return path, min(entry["size"], path.stat().st_size), ""

    def dev_page(self, name: str, port: int) -> str:
        return self._run(self._dev_page, name, port, save=False)

    def _dev_page(self, now, name, port):
        job = self.state["jobs"].get(name)
        if job is None or job["phase"] != RUNNING or job["expose_port"] != port:
            raise ApiError(404, f"job {name} serves nothing on port {port}")
        title = html.escape(f"gpupool dev job {name}")
        return (
            f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>\n'
            f"<body><h1>{title}</h1><p>Simulated dev server on port {port} of a "
            f"{html.escape(job['kind'] or 'dev')} job.</p></body></html>\n"
        )

    # -- metrics

    def metrics(self, node: str | None) -> str:
        return self._run(self._metrics, node, save=False)

    def _metrics(self, now, node_name):
        nodes = self.state["nodes"]
        if node_name is not None:
            node = self._node(node_name)
            if node["state"] == "down":  # a down node's exporter does not answer: the scrape fails
                raise ApiError(503, f"node {node_name} is down")
            nodes = {node_name: node}
        usage = self._gpu_usage()
        live = [n for n in nodes.values() if n["state"] != "down"]
        loaded = [j for j in self._active() if j["phase"] == RUNNING and j["load_rps"] is not None]
        xids = self.state["xid"]
        return render_metrics(live, usage, now, xids) + render_load(loaded, {n["name"] for n in live})


def _rendezvous(job: dict) -> list[dict[str, str]]:
    """Each worker's rendezvous variables, worker 0's node as MASTER_ADDR (the placement now: a
    resized job's next run gets its new size)."""
    return rendezvous.simulated([worker[0]["node"] for worker in job["placement"] if worker])


def _slots(job: dict):
    for worker in job["placement"]:
        yield from worker


def _end_of(job: dict) -> tuple[float, tuple]:
    """When a running job ends and how: its own end, the max runtime, or a cancel."""
    start = job["started_at"]
    ends = [(start + job["run_seconds"], 0, (SUCCEEDED, 0, "completed"))]
    if job["deadline_seconds"] is not None:
        ends.append((start + job["deadline_seconds"], 1, (FAILED, None, "max runtime exceeded")))
    if job["cancel_at"] is not None:
        ends.append((max(start, job["cancel_at"]), 2, (CANCELLED, 143, "cancelled")))
    at, _, outcome = min(ends, key=lambda e: e[:2])
    return at, outcome


def _check_name(name: str) -> None:
    if not SAFE_NAME.fullmatch(name):
        raise ApiError(400, "a job name is letters, digits, '.', '_' and '-', not starting with '.'")


def _steps(duration: float) -> int:
    return max(1, math.ceil(duration / STEP_SECONDS))


def _loss(name: str, step: int) -> str:
    """A falling training loss, the same for a step whichever run writes it (a resumed run
    continues the curve): a decay plus a little noise from the job's name and the step."""
    noise = zlib.crc32(f"{name}:{step}".encode()) % 1000 / 20000
    return f"{0.15 + 2.3 / (1 + step / 25) + noise:.4f}"


def _environment(spec: dict) -> dict:
    """What the job's log and dev page need from the spec's working environment: variable
    names and secret references, never values (the state file and logs are not secret stores)."""
    env = [
        {k: str(e.get(k) or "") for k in ("name", "secret", "key")}
        for e in spec.get("env") or ()
        if isinstance(e, dict)
    ]
    mounts = [
        {"path": str(m.get("mount_path", "")), "read_only": bool(m.get("read_only"))}
        for m in spec.get("mounts") or ()
        if isinstance(m, dict)
    ]
    port = spec.get("expose_port")
    return {
        "env": env,
        "mounts": mounts,
        "checkpoint_dir": _checkpoint_dir(spec.get("checkpoint")),
        "checkpointing": bool(spec.get("checkpointing")),
        "expose_port": int(port) if isinstance(port, int) and 0 < port < 65536 else None,
        "array_index": index if isinstance(index := spec.get("array_index"), int) else None,
    }


def _load_rps(spec: dict) -> float | None:
    """The load a simulated service starts with: its plain env var ``SIM_LOAD_RPS``
    (requests per second over all replicas), or none (no load series)."""
    for e in spec.get("env") or ():
        if isinstance(e, dict) and e.get("name") == LOAD_ENV and not e.get("secret"):
            try:
                rps = float(e.get("value"))
            except (TypeError, ValueError):
                return None
            return rps if math.isfinite(rps) and rps >= 0 else None
    return None


def _checkpoint_dir(checkpoint) -> str:
    """``Checkpoint.host_dir`` of jobs.clusters.backends.base: the simulator's jobs run "on this machine",
    where the storage's host path is. Absolute only: a relative one would land in the server's cwd."""
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("mount"), dict):
        return ""
    host = str(checkpoint["mount"].get("host_path") or "")
    subdir = str(checkpoint.get("subdir") or "")
    if not os.path.isabs(host) or ".." in subdir.split("/"):
        return ""
    return f"{host.rstrip('/')}/{subdir}".rstrip("/")


def _describe(job: dict) -> str:
    nodes = ",".join(dict.fromkeys(s["node"] for s in _slots(job)))
    gpus = sum(s["milli"] for s in _slots(job)) / 1000
    env = ", ".join(
        f"{e['name']}=<from secret {e['secret']}/{e['key']}>" if e["secret"] else e["name"]
        for e in job["env"]
    )
    mounts = ", ".join(m["path"] + (" (read-only)" if m["read_only"] else "") for m in job["mounts"])
    parts = [
        job["name"],
        f"kind={job['kind']}",
        f"nodes={nodes}",
        f"gpus={gpus:g}",
        f"env=[{env}]",
        f"mounts=[{mounts}]",
    ]
    if job["checkpoint_dir"]:  # set by the portal for every job with one; not a secret
        parts.append(f"GPUPOOL_CHECKPOINT_DIR={job['checkpoint_dir']}")
    if job["expose_port"]:
        parts.append(f"port={job['expose_port']}")
    if job.get("array_index") is not None:  # a task of an array: its GPUPOOL_ARRAY_INDEX
        parts.append(f"GPUPOOL_ARRAY_INDEX={job['array_index']}")
    return " ".join(parts)


def _clean_node(raw: dict) -> dict:
    if not isinstance(raw, dict) or not raw.get("name"):
        raise ApiError(400, "every node needs a name")
    state = raw.get("state", "ready")
    if state not in NODE_STATES:
        raise ApiError(400, f"node {raw['name']}: state must be one of {', '.join(NODE_STATES)}")
    try:
        gpus = int(raw.get("gpus", 0))
    except (TypeError, ValueError):
        raise ApiError(400, f"node {raw['name']}: gpus must be an integer") from None
    node = {k: str(raw.get(k) or "") for k in ("flavor_hint", "zone", "spine", "leaf")}
    return {"name": str(raw["name"]), **node, "gpus": gpus, "state": state}


def _clean_placement(raw, gpu_milli) -> list[list[dict]]:
    default_milli = int(gpu_milli) if gpu_milli else 1000
    try:
        placement = [
            [
                {"node": str(s["node"]), "gpu": int(s["gpu"]), "milli": int(s.get("milli") or default_milli)}
                for s in worker
            ]
            for worker in raw
        ]
    except (TypeError, KeyError, ValueError, AttributeError):
        raise ApiError(400, "placement: a list of workers, each a list of {node, gpu, milli}") from None
    if any(not 0 < s["milli"] <= 1000 for w in placement for s in w):
        raise ApiError(400, "milli must be between 1 and 1000")
    return placement


# ---------------------------------------------------------------- DCGM-exporter metrics

DCGM_METRICS = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W)."),
    ("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered."),
)
DRIVER_VERSION = "535.161.08"
MODEL_NAMES = {
    "A100-80G": "NVIDIA A100-SXM4-80GB",
    "A100-40G": "NVIDIA A100-SXM4-40GB",
    "H800": "NVIDIA H800",
    "H100": "NVIDIA H100 80GB HBM3",
    "V100": "Tesla V100-SXM2-32GB",
}
DEFAULT_MEMORY_MIB = 80 * 1024


def render_metrics(nodes: list[dict], usage, now: float, xids: dict[str, int] | None = None) -> str:
    """Prometheus text exposition as dcgm-exporter writes it. A GPU shared by several jobs has
    one series per job (each with its part of the device's utilisation and memory), so a query
    by ``job`` label finds every job; their GPU_UTIL values sum to the device's. ``xids``: the
    last XID error per ``"<node>/<gpu>"`` (injected, ``set_xid``); 0 elsewhere."""
    xids = xids or {}
    rows = [
        row
        for node in nodes
        for i in range(node["gpus"])
        for row in _gpu_rows(
            node, i, usage.get((node["name"], i), []), now, xids.get(f"{node['name']}/{i}", 0)
        )
    ]
    out = []
    for metric, help_text in DCGM_METRICS:
        out += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        out += [f"{metric}{{{_labels(labels)}}} {values[metric]}" for labels, values in rows]
    return "\n".join(out) + "\n"


def _gpu_rows(node: dict, index: int, holders: list[tuple[dict, int]], now: float, xid: int = 0):
    base = {
        "gpu": str(index),
        "UUID": gpu_uuid(node["name"], index),
        "device": f"nvidia{index}",
        "modelName": MODEL_NAMES.get(node["flavor_hint"], node["flavor_hint"]),
        "Hostname": node["name"],
        "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION,
    }
    total = _memory_mib(node["flavor_hint"])
    parts = [
        (job, _activity(job, index, now) * milli / 1000, _memory(job, total) * milli // 1000)
        for job, milli in holders
    ]
    device_util = min(100.0, sum(u for _, u, _ in parts))
    free = max(0, total - sum(m for _, _, m in parts))
    device = {
        "DCGM_FI_DEV_FB_FREE": free,
        "DCGM_FI_DEV_GPU_TEMP": round(31 + device_util * 0.45),
        "DCGM_FI_DEV_POWER_USAGE": f"{62.5 + device_util * 3.3:.3f}",
        "DCGM_FI_DEV_XID_ERRORS": xid,
    }
    if not parts:
        return [
            (
                base,
                {
                    "DCGM_FI_DEV_GPU_UTIL": 0,
                    "DCGM_FI_DEV_MEM_COPY_UTIL": 0,
                    "DCGM_FI_DEV_FB_USED": 0,
                    **device,
                },
            )
        ]
    return [
        (
            {**base, "job": job["name"], "hpc_job": job["name"]},
            {
                "DCGM_FI_DEV_GPU_UTIL": round(util),
                "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.6),
                "DCGM_FI_DEV_FB_USED": mem,
                **device,
            },
        )
        for job, util, mem in parts
    ]


LOAD_ENV = "SIM_LOAD_RPS"
LOAD_METRIC = "gpupool_sim_requests_per_second"


def render_load(jobs: list[dict], nodes: set[str]) -> str:
    """The load of simulated services, one series per replica (its share of the job's requests
    per second, the load spread evenly), on the node of the replica's first GPU, labelled like
    the GPU series (``job``, ``hpc_job``) plus ``replica``: ``avg(...{hpc_job="gp-7"})`` is the
    per-replica load an autoscaler compares with its target."""
    out = [f"# HELP {LOAD_METRIC} Requests per second served by a replica (simulated).",
           f"# TYPE {LOAD_METRIC} gauge"]
    for job in sorted(jobs, key=lambda j: j["name"]):
        replicas = [w for w in job["placement"] if w]
        for k, worker in enumerate(replicas):
            if worker[0]["node"] in nodes:
                labels = {"job": job["name"], "hpc_job": job["name"], "replica": str(k),
                          "Hostname": worker[0]["node"]}
                out.append(f"{LOAD_METRIC}{{{_labels(labels)}}} {job['load_rps'] / len(replicas):.6g}")
    return "\n".join(out) + "\n" if len(out) > 2 else ""


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'gpupool-sim:{node}/{index}')}"


def _activity(job: dict, index: int, now: float) -> float:
    """Deterministic from the job's name and the time: a slow wave around a per-job level, so
    range queries show shapes. A command mentioning ``idle`` stays under 5 % (idle-job demos)."""
    h = zlib.crc32(job["name"].encode())
    phase = 2 * math.pi * now / (90 + h % 120) + index
    if "idle" in job["command"]:
        return 2.0 + 1.5 * math.sin(phase)
    return min(100.0, 45 + h % 40 + 12 * math.sin(phase))


def _memory(job: dict, total: int) -> int:
    h = zlib.crc32(job["name"].encode())
    share = 0.1 if "idle" in job["command"] else 0.35 + (h % 50) / 100
    return int(total * share)


def _memory_mib(flavor_hint: str) -> int:
    # "A100-80G" → 80 GiB; a MIG profile "A100-1g.10gb" → its slice, 10 GiB (the last match)
    sizes = re.findall(r"(\d+)\s*g(?:b)?\b", flavor_hint, flags=re.IGNORECASE)
    return int(sizes[-1]) * 1024 if sizes else DEFAULT_MEMORY_MIB


def _labels(labels: dict[str, str]) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return ",".join(f'{k}="{esc(v)}"' for k, v in labels.items())


# ---------------------------------------------------------------- HTTP

ROUTES = [
    ("GET", r"/healthz", "healthz"),
    ("GET", r"/nodes", "get_nodes"),
    ("PUT", r"/inventory", "put_inventory"),
    ("POST", r"/nodes/([^/]+)/state", "post_node_state"),
    ("POST", r"/nodes/([^/]+)/xid", "post_node_xid"),
    ("POST", r"/jobs", "post_job"),
    ("GET", r"/jobs", "get_jobs"),
    ("GET", r"/jobs/([^/]+)", "get_job"),
    ("DELETE", r"/jobs/([^/]+)", "delete_job"),
    ("POST", r"/jobs/([^/]+)/crash", "post_crash"),
    ("POST", r"/jobs/([^/]+)/slow_start", "post_slow_start"),
    ("POST", r"/jobs/([^/]+)/resize", "post_resize"),
    ("POST", r"/jobs/([^/]+)/load", "post_load"),
    ("GET", r"/jobs/([^/]+)/log", "get_log"),
    ("GET", r"/jobs/([^/]+)/log/raw", "get_log_raw"),
    ("GET", r"/jobs/([^/]+)/port/([^/]+)", "get_dev_page"),
    ("GET", r"/metrics", "get_metrics"),
]
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Handler(BaseHTTPRequestHandler):
    cluster: SimCluster  # set on the subclass made by make_server
    server_version = "gpupool-simserver/1"

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_DELETE(self):
        self._dispatch("DELETE")

    def log_message(self, format, *args):
        pass  # one line per poll would drown the demo's output

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        self.query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            for verb, pattern, handler in ROUTES:
                match = re.fullmatch(pattern, url.path.rstrip("/") or "/")
                if match and verb == method:
                    getattr(self, handler)(*(unquote(g) for g in match.groups()))
                    return
            raise ApiError(404, f"no route {method} {url.path}")
        except ApiError as exc:
            self._json(exc.status, {"detail": exc.detail})
        except Exception as exc:  # the client sees a 5xx and retries; the server keeps serving
            self._json(500, {"detail": f"{type(exc).__name__}: {exc}"})

    def _body(self) -> dict | list:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise ApiError(400, "body must be JSON") from None

    def _json(self, status: int, payload) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _number(self, value, what: str) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ApiError(400, f"{what} must be a number") from None
        if not math.isfinite(number) or number < 0:
            raise ApiError(400, f"{what} must be a non-negative number")
        return number

    def healthz(self):
        with self.cluster.lock:
            state = self.cluster.state
            self._json(
                200,
                {
                    "status": "ok",
                    "nodes": len(state["nodes"]),
                    "jobs": len(state["jobs"]),
                    "speed": self.cluster.speed,
                },
            )

    def get_nodes(self):
        self._json(200, {"nodes": self.cluster.nodes()})

    def put_inventory(self):
        body = self._body()
        nodes = body.get("nodes") if isinstance(body, dict) else body
        if not isinstance(nodes, list):
            raise ApiError(400, 'body must be a list of nodes or {"nodes": [...]}')
        # ?keep_states=1: known nodes keep the state they have here (an injected fault is the
        # cluster's truth, which the portal reads back); only new nodes take the given state.
        keep = self.query.get("keep_states", "") in ("1", "true")
        self._json(200, {"nodes": self.cluster.set_inventory(nodes, keep_states=keep)})

    def post_node_state(self, name):
        body = self._body()
        state = body.get("state") if isinstance(body, dict) else None
        self._json(200, self.cluster.set_node_state(name, state))

    def post_node_xid(self, name):
        body = self._body()
        body = body if isinstance(body, dict) else {}
        self._json(200, self.cluster.set_xid(name, body.get("gpu"), body.get("xid")))

    def post_job(self):
        body = self._body()
        if not isinstance(body, dict):
            raise ApiError(400, "body must be a JobSpec object")
        view, created = self.cluster.submit(body)
        self._json(201 if created else 200, view)

    def get_jobs(self):
        names = self.query.get("names")
        wanted = None if names is None else [n for n in names.split(",") if n]
        self._json(200, {"jobs": self.cluster.statuses(wanted)})

    def get_job(self, name):
        self._json(200, self.cluster.job(name))

    def delete_job(self, name):
        grace = self._number(self.query.get("grace_seconds", 0), "grace_seconds")
        self._json(200, self.cluster.cancel(name, grace))

    def post_crash(self, name):
        body = self._body()
        code = body.get("exit_code", 137) if isinstance(body, dict) else 137
        if not isinstance(code, int) or isinstance(code, bool) or not 1 <= code <= 255:
            raise ApiError(400, "exit_code must be an integer between 1 and 255")
        self._json(200, self.cluster.crash(name, code))

    def post_slow_start(self, name):
        body = self._body()
        seconds = self._number(body.get("seconds") if isinstance(body, dict) else None, "seconds")
        self._json(200, self.cluster.slow_start(name, seconds))

    def post_load(self, name):
        body = self._body()
        rps = self._number(body.get("rps") if isinstance(body, dict) else None, "rps")
        self._json(200, self.cluster.set_load(name, rps))

    def post_resize(self, name):
        body = self._body()
        if not isinstance(body, dict) or not isinstance(body.get("placement"), list):
            raise ApiError(400, 'body must be {"placement": [[{node, gpu, milli}, ...], ...]}')
        self._json(200, self.cluster.resize(name, body["placement"], body.get("gpu_milli")))

    def get_log(self, name):
        tail = self._number(self.query.get("tail_bytes", LOG_CHUNK_BYTES), "tail_bytes")
        self._json(200, self.cluster.log_tail(name, int(min(tail, MAX_TAIL_BYTES))))

    def get_log_raw(self, name):
        """The whole log as it is now, streamed in chunks (never read whole into memory). Only
        this response is HTTP/1.1 (chunked needs it), and it closes the connection after."""
        path, size = self.cluster.log_file(name)
        self.protocol_version = "HTTP/1.1"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            with open(path, "rb") as fh:
                left = size
                while left > 0 and (chunk := fh.read(min(LOG_CHUNK_BYTES, left))):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    left -= len(chunk)
            self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the downloader went away; nothing to answer after the headers were sent

    def get_dev_page(self, name, port):
        if not port.isdigit():
            raise ApiError(404, f"no port {port}")
        self._send(200, self.cluster.dev_page(name, int(port)).encode(), "text/html; charset=utf-8")

    def get_metrics(self):
        text = self.cluster.metrics(self.query.get("node"))
        self._send(200, text.encode(), METRICS_CONTENT_TYPE)


def make_server(host: str, port: int, cluster: SimCluster) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"cluster": cluster})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="gpupool simulated GPU cluster")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--state", type=Path, required=True, help="JSON state file (kept across restarts)")
    parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per real second")
    parser.add_argument("--inventory", type=Path, help='JSON list of nodes (or {"nodes": [...]})')
    args = parser.parse_args(argv)
    cluster = SimCluster(args.state, args.speed)
    if args.inventory:
        raw = json.loads(args.inventory.read_text())
        cluster.set_inventory(raw["nodes"] if isinstance(raw, dict) else raw, keep_states=True)
    server = make_server(args.host, args.port, cluster)
    # SIGTERM ends serve_forever cleanly; the state is already on disk after every change.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"simserver listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
