"""Slurm backend: the Slurm command line (sbatch, squeue, sacct, scancel, sinfo, scontrol).

Plain Python, no Django. Every call runs a Slurm client with a timeout and a small, fixed
environment: ``SLURM_CONF`` names the cluster, ``SLURM_TIME_FORMAT=%s`` makes every time Slurm
prints epoch seconds (an instant: no zone to guess; ``TZ=UTC`` too, for anything else), and
nothing of the caller's environment (database URLs, secrets) leaks into the jobs, which inherit
the environment of ``sbatch``.

How portal concepts map onto Slurm:

* A job is one batch job named ``spec.name`` (``gp-<id>``); ``submit`` looks for an unfinished job
  of that name in ``squeue`` before it calls ``sbatch``, so a retried dispatch never starts a second one.
* A gang of ``workers`` × ``gpus_per_worker`` is ``--nodes=<workers> --ntasks-per-node=1
  --gres=<gres>:<gpus_per_worker>`` on the placement's nodes (``--nodelist``; workers sharing a node
  become ``--ntasks-per-node``); the batch script runs the command once per worker with ``srun``,
  which kills the whole gang when one worker fails.
* A shared job (``gpu_milli`` below 1,000, any sharing mode) asks for GPU *shards* of the node's
  GPU type instead of whole GPUs, ``--gres=shard:<type>:<n>`` with n = ⌈gpu_milli × shards_per_gpu
  / 1000⌉ (8 shards per GPU: one shard is 125 thousandths). gres.conf binds each GPU's shards to it,
  and Slurm never gives a device out whole and in shards at once. Slurm 22.05 cannot be told *which*
  GPU's shards to use: the node is the placement's, the GPU on it Slurm's choice.
* A job of a ``cpu`` flavor (``spec.cpu_only``) asks its units as cores, ``--cpus-per-task=<units>``
  per task and no ``--gres``, in ``cpu_partition`` where the cluster keeps its GPU-less nodes in a
  partition of their own. A node without GPU GRES is listed with the hint ``cpu`` and its allocatable
  cores as its units (the inventory sync maps it to the cpu flavor).
* Slurm does not requeue our jobs (``--no-requeue``): the portal decides what a node failure means
  (checkpointing jobs are requeued by the portal, others fail), so Slurm reports NODE_FAIL.
* Cancel with a grace period sends the grace signal to the job's processes (``scancel --signal``)
  and leaves a detached waiter that cancels the job when the grace period is over. A job that
  exits by itself after the signal (checkpoint written, exit 0) still reports *cancelled*:
  ``cancel`` leaves a marker in the job's directory, so the portal never reads a preempted job as
  succeeded.
* Finished jobs: ``squeue`` keeps them for ``MinJobAge`` seconds, ``sacct`` (slurmdbd) for good.
* Times: a status's ``started_at`` / ``finished_at`` are Slurm's own Start/End (``squeue`` %S/%e,
  ``sacct`` Start/End), ``time_source`` "slurm": the portal meters by them, not by its polls.
* The working environment (storage, checkpoint dir, variables, secrets files): ``slurm_env``. The
  job's working directory stays its directory under ``jobs_dir`` (script, output, markers).
* Logs: the job's output file ``<jobs_dir>/<name>/slurm-<id>.out`` (stdout and stderr: without
  ``-e`` Slurm writes both there). A portal requeue is a new Slurm job under the same name: the
  newest job id's file is the log. The script leaves ``started-<id>`` when it starts, so a missing
  file reads as "not started yet" or "removed", without asking Slurm.
* A dev job's port is reached with an SSH tunnel through the centre's login node (``login_host``).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobs.clusters import topology
from jobs.clusters.backends import rendezvous
from jobs.clusters.backends.base import (
    ARRAY_INDEX_ENV,
    CANCELLED,
    CPU_HINT,
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    SUCCEEDED,
    Access,
    BackendError,
    JobSpec,
    JobStatus,
    LogTail,
    NodeInfo,
    cpu_units,
)
from jobs.clusters.backends.logfile import chunks, tail
from jobs.clusters.backends.slurm_env import env_key, environment_lines

# Slurm job states (long names, as squeue %T and sacct State print them) → portal phases.
PHASES = {
    "PENDING": PENDING,
    "CONFIGURING": PENDING,
    "PREEMPTED": PENDING,
    "REQUEUED": PENDING,
    "REQUEUE_HOLD": PENDING,
    "REQUEUE_FED": PENDING,
    "RESV_DEL_HOLD": PENDING,
    "RUNNING": RUNNING,
    "COMPLETING": RUNNING,
    "SUSPENDED": RUNNING,  # still holds its allocation (metering is allocation-based)
    "STOPPED": RUNNING,
    "SIGNALING": RUNNING,
    "STAGE_OUT": RUNNING,
    "RESIZING": RUNNING,
    "COMPLETED": SUCCEEDED,
    "FAILED": FAILED,
    "TIMEOUT": FAILED,
    "OUT_OF_MEMORY": FAILED,
    "DEADLINE": FAILED,
    "SPECIAL_EXIT": FAILED,
    "NODE_FAIL": FAILED,
    "BOOT_FAIL": FAILED,
    "CANCELLED": CANCELLED,
    "REVOKED": CANCELLED,
}
NODE_FAILURES = {"NODE_FAIL", "BOOT_FAIL"}
FINISHED = {state for state, phase in PHASES.items() if phase in (SUCCEEDED, FAILED, CANCELLED)}
# Jobs in these states have processes that a signal can reach.
SIGNALABLE = {"RUNNING", "SUSPENDED", "STOPPED", "SIGNALING", "CONFIGURING"}

# squeue's --name and sacct's --name take a comma list; keep command lines short.
NAMES_PER_CALL = 200
TIME_SOURCE = "slurm"
# Replies that mean "that job is already gone", not a failure of scancel.
GONE = ("already completing or completed", "Invalid job id specified")
UNSET = {"", "N/A", "None", "Unknown", "NONE"}
DEFAULT_SECRETS_DIR = "/etc/gpupool/secrets"
DEFAULT_LOGIN_HOST = "login"
# A GPU's shards in deploy/slurm/start.sh's gres.conf: one shard is 1000 / 8 = 125 thousandths of a card.
SHARDS_PER_GPU = 8
WHOLE = 1000  # gpu_milli of a whole card
# Job names become directory names; user and host names go into a command line the user copies.
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
HOST_OR_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
# The job's markers and output files carry its Slurm job id.
ID_FILE = re.compile(r"(?:submitted|started)-(\d+)|slurm-(\d+)\.out")
NOT_STARTED = "the job has not started: no output yet"
REMOVED = "the output file was removed"


@dataclass(frozen=True, slots=True)
class _Record:
    """One job as squeue or sacct printed it."""

    job_id: int
    name: str
    state: str  # long Slurm state, first word only ("CANCELLED by 0" → CANCELLED)
    start: datetime | None
    end: datetime | None
    nodes: tuple[str, ...]
    reason: str
    exit_code: int | None = None


class SlurmBackend:
    """Runs portal jobs on a Slurm cluster through its command-line clients.

    ``slurm_conf`` is the path clients get as ``SLURM_CONF``; ``partition`` limits jobs and the
    inventory to one partition; ``gres_map`` maps the portal's GRES name for a flavor
    (``Flavor.slurm_gres``, e.g. ``gpu:a100``) or the flavor's name to the GRES this cluster uses
    (e.g. ``gpu:nvidia_a100-sxm4-80gb``) — the inventory maps it back. ``jobs_dir`` holds one
    directory per job (script, output, cancel markers); it must be on a file system the nodes see,
    and defaults to ``$GPUPOOL_SLURM_JOBS_DIR`` or ``jobs/`` next to the ``etc/`` of ``slurm_conf``.
    ``secrets_dir`` is where the nodes keep the values of secret references
    (``<secrets_dir>/<project>/<secret>/<key>``); ``login_host`` the host users ssh into (the
    centre's login node), for a dev job's tunnel. ``shards_per_gpu`` is how many ``gres/shard`` the
    cluster's gres.conf gives each GPU (0: no shards; shared jobs then take whole GPUs).
    ``cpu_partition`` is the partition of the GPU-less nodes, where CPU-only jobs go (None: the
    same as GPU jobs); the inventory lists it beside ``partition``.
    """

    def __init__(
        self,
        slurm_conf: str,
        partition: str | None = None,
        gres_map: dict[str, str] | None = None,
        *,
        jobs_dir: str | None = None,
        timeout: float = 30.0,
        grace_signal: str = "USR1",
        checkpoint_warning_seconds: int = 120,
        requeue: bool = False,
        sacct_lookback_days: int = 60,
        secrets_dir: str = DEFAULT_SECRETS_DIR,
        login_host: str = DEFAULT_LOGIN_HOST,
        shards_per_gpu: int = SHARDS_PER_GPU,
        cpu_partition: str | None = None,
    ) -> None:
        self.slurm_conf = str(slurm_conf)
        self.partition = partition
        self.gres_map = dict(gres_map or {})
        default_jobs = Path(self.slurm_conf).resolve().parent.parent / "jobs"
        self.jobs_dir = Path(jobs_dir or os.environ.get("GPUPOOL_SLURM_JOBS_DIR") or default_jobs)
        self.timeout = timeout
        self.grace_signal = grace_signal
        self.checkpoint_warning_seconds = checkpoint_warning_seconds
        self.requeue = requeue
        self.sacct_lookback = timedelta(days=sacct_lookback_days)
        self.secrets_dir = str(secrets_dir)
        self.login_host = login_host
        self.shards_per_gpu = int(shards_per_gpu)
        self.cpu_partition = cpu_partition
        self.env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            # Epoch seconds: Start/End mean one instant whatever zone the cluster's hosts use
            # (an ISO time without zone would be read in TZ, a guess if TZ is ignored).
            "SLURM_TIME_FORMAT": "%s",
            "SLURM_CONF": self.slurm_conf,
        }

    # ---- the Backend protocol -------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> str:
        existing = self._unfinished(spec.name)
        if existing:
            return str(existing[-1].job_id)
        workdir = self.jobs_dir / spec.name
        workdir.mkdir(parents=True, exist_ok=True)
        script = workdir / "job.sh"
        script.write_text(self._script(spec, workdir))
        out = self._run(["sbatch", "--parsable", *self._sbatch_options(spec, workdir), str(script)])
        job_id = out.strip().split(";")[0]  # "<id>" or "<id>;<cluster>"
        # The newest job of the name is its log's job, also before that job has written anything.
        (workdir / f"submitted-{int(job_id)}").touch()
        return job_id

    def cancel(self, name: str, *, grace_seconds: int = 0) -> None:
        for rec in self._unfinished(name):
            self._mark_cancelled(name, rec.job_id)
            if grace_seconds > 0 and rec.state in SIGNALABLE:
                self._scancel(["--signal", self.grace_signal, str(rec.job_id)])
                self._cancel_later(rec.job_id, grace_seconds)
            else:
                self._scancel([str(rec.job_id)])

    def resize(self, spec: JobSpec) -> None:
        # A Slurm allocation can shrink (scontrol update NumNodes) but never grow, and the node
        # list it was given is fixed: the portal never resizes Slurm jobs (docs/backends.md).
        raise BackendError(f"slurm: {spec.name} cannot be resized; Slurm jobs keep their size")

    def status(self, names: list[str]) -> dict[str, JobStatus]:
        if not names:
            return {}
        live = _newest(self._squeue(names))
        unsure = [n for n in names if n not in live or live[n].state in FINISHED]
        done = self._finished(unsure, live) if unsure else {}
        result = {}
        for name in names:
            rec = _pick(live.get(name), done.get(name))
            if rec is not None and rec.state in FINISHED and rec.exit_code is None:
                rec = self._with_exit_code(rec)
            result[name] = self._to_status(name, rec) if rec else JobStatus(name, LOST, message="unknown")
        return result

    def list_nodes(self) -> list[NodeInfo]:
        args = ["sinfo", "-h", "-N", "-o", "%N|%G|%T|%f|%E"]
        if self.partition:
            args += ["-p", ",".join(filter(None, (self.partition, self.cpu_partition)))]
        nodes: dict[str, NodeInfo] = {}
        for line in self._run(args).splitlines():
            if line.strip():
                node = self._node(line)
                nodes.setdefault(node.name, node)  # sinfo -N prints a node once per partition
        machines = self._machines()
        return sorted(
            (_with_cores(replace(node, **machines.get(node.name, {}))) for node in nodes.values()),
            key=lambda n: _natural_key(n.name),
        )

    def _machines(self) -> dict[str, dict]:
        """Every node's whole machine from ``scontrol show node -o`` (one line per node)."""
        out = {}
        for line in self._run(["scontrol", "show", "node", "-o"]).splitlines():
            fields = scontrol_fields(line)
            if fields.get("NodeName"):
                out[fields["NodeName"]] = node_machine(fields)
        return out

    def set_node_schedulable(self, name: str, schedulable: bool, *, reason: str = "") -> None:
        """``scontrol update NodeName=… State=DRAIN Reason=…`` (running jobs go on, no new ones
        start: sinfo shows draining, then drained) or ``State=RESUME``. Resuming a node that is
        not drained is a no-op (Slurm refuses it as an invalid state change)."""
        node = f"NodeName={_safe(name)}"
        if schedulable:
            try:
                self._run(["scontrol", "update", node, "State=RESUME"])
            except BackendError as exc:
                if "Invalid node state" not in str(exc):
                    raise
            return
        why = " ".join((reason or "gpupool").split())  # one line: sinfo prints the reason as a field
        self._run(["scontrol", "update", node, "State=DRAIN", f"Reason={why}"])

    def log_tail(self, name: str, *, max_bytes: int) -> LogTail:
        path, missing = self._output_file(name)
        if path is None:
            return LogTail(text="", missing=missing)
        try:
            with path.open("rb") as handle:
                return tail(handle, max_bytes)
        except FileNotFoundError:  # removed since we looked
            return LogTail(text="", missing=REMOVED)

    def log_stream(self, name: str) -> Iterator[bytes]:
        # Opened here, not in the generator: a missing log raises before the caller starts a
        # download, and a file removed meanwhile stays readable through the open handle.
        path, missing = self._output_file(name)
        try:
            handle = path.open("rb") if path else None
        except FileNotFoundError:
            handle, missing = None, REMOVED
        if handle is None:
            raise BackendError(f"slurm: no log for {name}: {missing}")
        return chunks(handle)

    def access(self, name: str, port: int, *, nodes: tuple[str, ...], user: str) -> Access:
        if not nodes:
            raise BackendError(f"slurm: {name} runs on no node: nothing to reach")
        if not 0 < int(port) < 65536:
            raise BackendError(f"slurm: {port} is not a port")
        node = nodes[0]  # the first worker (rank 0) serves the dev job's port
        for what, text in (("user", user), ("node", node), ("login host", self.login_host)):
            if not HOST_OR_USER.match(text):  # never a command line with something to quote
                raise BackendError(f"slurm: {what} {text!r} cannot go into an ssh command")
        return Access(
            command=f"ssh -N -L {int(port)}:{node}:{int(port)} {user}@{self.login_host}",
            note=(
                f"Run this on your own computer and leave it running, then open localhost:{int(port)}: "
                f"it forwards that port through the login node {self.login_host} to port {int(port)} "
                f"on {node}, where the job runs. It works while the job runs."
            ),
        )

    def health(self) -> str:
        try:
            self._run(["scontrol", "ping"])
        except BackendError as exc:
            return f"slurmctld unreachable: {exc}"
        try:  # status() needs accounting for finished jobs
            self._run(["sacctmgr", "-n", "-P", "show", "cluster", "format=cluster"])
        except BackendError as exc:
            return f"slurmdbd unreachable: {exc}"
        return "ok"

    # ---- running the clients ----------------------------------------------------------------------

    def _run(self, args: Sequence[str]) -> str:
        try:
            proc = subprocess.run(  # noqa: S603 — fixed Slurm clients, arguments as a list
                list(args), env=self.env, capture_output=True, text=True, timeout=self.timeout, check=False
            )
        except FileNotFoundError as exc:
            raise BackendError(f"{args[0]} is not installed") from exc
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"{args[0]} timed out after {self.timeout:g}s") from exc
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise BackendError(f"{args[0]} failed ({proc.returncode}): {detail[-1] if detail else ''}")
        return proc.stdout

    def _scancel(self, args: list[str]) -> None:
        try:
            self._run(["scancel", *args])
        except BackendError as exc:
            if not any(text in str(exc) for text in GONE):  # gone meanwhile: cancel is idempotent
                raise

    def _cancel_later(self, job_id: int, seconds: int) -> None:
        # The kill after the grace period must not block the caller (a Celery task) nor depend on it
        # staying alive: a detached shell waits, then cancels that job id (never the name, which a
        # requeued job reuses). It gives up early once the job has ended by itself (checkpoint
        # written). `sh -c '... &'` returns at once and leaves no child behind.
        finished = "|".join(sorted(FINISHED))
        waiter = (
            f"end=$(($(date +%s) + {int(seconds)})); "
            f'while [ "$(date +%s)" -lt "$end" ]; do '
            f'case "$(squeue -h -t all -j {int(job_id)} -o %T 2>/dev/null)" in {finished}) exit 0;; esac; '
            "sleep 1; done; "
            f"exec scancel {int(job_id)}"
        )
        subprocess.run(  # noqa: S603
            ["/bin/sh", "-c", f"({waiter}) </dev/null >/dev/null 2>&1 &"],
            env=self.env,
            timeout=self.timeout,
            check=False,
            start_new_session=True,
        )

    # ---- submit ----------------------------------------------------------------------------------

    def _sbatch_options(self, spec: JobSpec, workdir: Path) -> list[str]:
        opts = ["-J", spec.name, "-D", str(workdir), "-o", str(workdir / "slurm-%j.out")]
        opts += self._layout(spec)
        opts += self._machine(spec)
        partition = (self.cpu_partition or self.partition) if spec.cpu_only else self.partition
        if partition:
            opts += ["-p", partition]
        if spec.max_runtime_seconds:
            opts.append(f"--time={_minutes(spec.max_runtime_seconds)}")
        if spec.checkpointing:
            # Warn the job before its time limit kills it, so it can write a checkpoint.
            opts.append(f"--signal={self.grace_signal}@{self.checkpoint_warning_seconds}")
        if not self.requeue:
            opts.append("--no-requeue")
        if spec.labels:
            opts.append("--comment=" + ",".join(f"{k}={_safe(v)}" for k, v in sorted(spec.labels.items())))
        return opts

    def _layout(self, spec: JobSpec) -> list[str]:
        """Node count, tasks and GRES: one task per worker, on the placement's nodes."""
        gres, count = self._layout_gres(spec)
        # A CPU-only job's units are the cores of --cpus-per-task (_machine): no device to ask.
        devices = [] if spec.cpu_only else [f"--gres={gres}:{count}"]
        per_node = self._per_node(spec)
        if not per_node:
            return [f"--nodes={spec.workers}", "--ntasks-per-node=1", *devices]
        most = max(per_node.values())
        opts = [f"--nodes={len(per_node)}", f"--ntasks-per-node={most}", *devices]
        if most > 1:
            # Workers of a node share its GPUs (CUDA_VISIBLE_DEVICES lists them all; a worker takes
            # its slice by SLURM_LOCALID). GRES is per node in Slurm, so with an uneven spread
            # (2 + 1) the lighter node is asked for as many GPUs as the heaviest.
            opts.append(f"--ntasks={spec.workers}")
        return [*opts, "--nodelist=" + ",".join(per_node)]

    def _machine(self, spec: JobSpec) -> list[str]:
        """CPU, memory and local disk (DESIGN §15): cores per task (a task is a worker), memory and
        tmp per node — Slurm counts ``--mem`` and ``--tmp`` per node, so a node holding several
        workers is asked for all of theirs. Nothing asked: Slurm's defaults (DefMemPerCPU)."""
        workers = max(self._per_node(spec).values(), default=1)
        opts = []
        if spec.cpu_millicores:
            opts.append(f"--cpus-per-task={cores(spec.cpu_millicores)}")
        if spec.memory_mib:
            opts.append(f"--mem={spec.memory_mib * workers}M")
        if spec.local_disk_gib:
            opts.append(f"--tmp={spec.local_disk_gib * workers}G")
        return opts

    @staticmethod
    def _per_node(spec: JobSpec) -> Counter:
        # A worker's GPUs are all on one node; several workers may share a node.
        return Counter(worker[0].node for worker in spec.placement if worker)

    def _layout_gres(self, spec: JobSpec) -> tuple[str, int]:
        """The GRES of each node and its count (per node: the most workers on one node's worth)."""
        gres, per_worker = self._gres_request(spec)
        per_node = self._per_node(spec)
        return gres, per_worker * (max(per_node.values()) if per_node else 1)

    def _gres_request(self, spec: JobSpec) -> tuple[str, int]:
        """The GRES a worker asks for and how many: whole GPUs, or a shared card's shards."""
        gres = self._gres(spec)
        shards = shards_for(spec.gpu_milli, self.shards_per_gpu)
        if not shards:
            return gres, max(spec.gpus_per_worker, 1)
        # The shards of the flavor's GPU type (gres.conf's shard lines take their GPU's type).
        kind, _, gpu_type = gres.partition(":")
        return ("shard:" + gpu_type if kind == "gpu" and gpu_type else "shard"), shards

    def _step_gres(self, spec: JobSpec) -> str:
        """srun's GRES option for a shard job: Slurm 22.05 refuses a step that inherits a *typed*
        shard request (``shard:a100:4``: "Invalid generic resource specification"), but takes the
        same shards untyped. Whole-GPU steps inherit the job's GRES as they are."""
        gres, count = self._layout_gres(spec)
        return f"--gres=shard:{count} " if gres.startswith("shard") and not spec.cpu_only else ""

    @staticmethod
    def _step_cpus(spec: JobSpec) -> str:
        """Slurm 22.05's srun no longer reads SLURM_CPUS_PER_TASK: without the option each worker's
        step would run on one core of the cores its job holds."""
        return f"--cpus-per-task={cores(spec.cpu_millicores)} " if spec.cpu_millicores else ""

    def _gres(self, spec: JobSpec) -> str:
        for key in (spec.slurm_gres, spec.flavor):
            if key and key in self.gres_map:
                return self.gres_map[key]
        return spec.slurm_gres or "gpu"

    def _script(self, spec: JobSpec, workdir: Path | None = None) -> str:
        workdir = workdir or self.jobs_dir / spec.name
        env = {
            "GPUPOOL_JOB_NAME": spec.name,
            "GPUPOOL_JOB_KIND": spec.kind,
            "GPUPOOL_IMAGE": spec.image,  # no container runtime here: the command runs on the node
            "GPUPOOL_GRACE_SIGNAL": self.grace_signal,
            "GPUPOOL_GPUS_PER_WORKER": spec.gpus_per_worker,
            **{f"GPUPOOL_{env_key(k)}": v for k, v in spec.labels.items()},
        }
        if spec.array_index is not None:
            env[ARRAY_INDEX_ENV] = spec.array_index
        if spec.expose_port:  # a dev job serves its port on its first node (see access)
            env["GPUPOOL_PORT"] = int(spec.expose_port)
        exports = [f"export {k}={shlex.quote(str(v))}" for k, v in env.items()]
        started = f'touch {shlex.quote(str(workdir))}/started-"$SLURM_JOB_ID"'  # see _output_file
        command = spec.command or "true"
        meet = rendezvous.needed(spec.workers)  # DESIGN §17: workers find worker 0
        if meet:
            command = rendezvous.slurm_command(command)
        lines = [
            "#!/bin/bash",
            f"# gpupool job {spec.name} (generated)",
            started,
            *environment_lines(spec, secrets_dir=self.secrets_dir),
            *exports,
            *(rendezvous.slurm_lines(spec.job_id, spec.workers) if meet else ()),
            # srun starts one task per worker; --kill-on-bad-exit ends the gang when one worker fails.
            f"srun --kill-on-bad-exit=1 {self._step_cpus(spec)}{self._step_gres(spec)}"
            f"/bin/bash -c {shlex.quote(command)}",
        ]
        return "\n".join(lines) + "\n"

    # ---- logs ------------------------------------------------------------------------------------

    def _output_file(self, name: str) -> tuple[Path | None, str]:
        """The newest job's output file, or None and why there is none."""
        if not JOB_NAME.match(name):
            raise BackendError(f"slurm: {name!r} is not a job name")
        workdir = self.jobs_dir / name
        try:
            files = [f.name for f in workdir.iterdir()]
        except FileNotFoundError:
            return None, "no job of this name was submitted here (or its directory was removed)"
        ids = _job_ids(files)
        if not ids:
            return None, NOT_STARTED
        newest = max(ids)
        path = workdir / f"slurm-{newest}.out"
        if path.exists():
            return path, ""
        # Slurm opens the output file before the script runs, so a started job had one.
        return None, REMOVED if (workdir / f"started-{newest}").exists() else NOT_STARTED

    # ---- lookups ---------------------------------------------------------------------------------

    def _unfinished(self, name: str) -> list[_Record]:
        """The jobs of that name Slurm has not finished, oldest first. The controller is authoritative
        for live jobs; accounting may lag behind it or hold stale rows after a crash."""
        return sorted((r for r in self._squeue([name]) if r.state not in FINISHED), key=lambda r: r.job_id)

    def _squeue(self, names: list[str]) -> list[_Record]:
        records = []
        for chunk in _chunks(names, NAMES_PER_CALL):
            out = self._run(
                ["squeue", "-h", "-t", "all", "--name=" + ",".join(chunk), "-o", "%i|%j|%T|%S|%e|%N|%r"]
            )
            for line in out.splitlines():
                if line.strip():
                    job_id, name, state, start, end, nodes, reason = line.split("|", 6)
                    active = PHASES.get(state) != PENDING  # a pending job's %S is a forecast
                    records.append(
                        _Record(
                            int(job_id),
                            name,
                            state,
                            _time(start) if active else None,
                            _time(end) if state in FINISHED else None,
                            expand_hostlist(nodes),
                            reason,
                        )
                    )
        return records

    def _finished(self, names: list[str], live: dict[str, _Record]) -> dict[str, _Record]:
        """Accounting's newest record per name. Without slurmdbd, jobs the controller still
        remembers are answered from squeue; any other name cannot be called lost: raise."""
        try:
            return _newest(self._sacct(names))
        except BackendError:
            if all(name in live for name in names):
                return {}
            raise

    def _sacct(self, names: list[str]) -> list[_Record]:
        # sacct starts at midnight by default: look back far enough for any job the portal tracks.
        since = (datetime.now(UTC) - self.sacct_lookback).strftime("%Y-%m-%dT%H:%M:%S")
        records = []
        for chunk in _chunks(names, NAMES_PER_CALL):
            out = self._run(
                [
                    "sacct",
                    "-X",
                    "-n",
                    "-P",
                    "-a",
                    "-S",
                    since,
                    "-E",
                    "now",
                    "--name=" + ",".join(chunk),
                    "-o",
                    "JobIDRaw,JobName,State,Start,End,ExitCode,NodeList,Reason",
                ]
            )
            for line in out.splitlines():
                if line.strip():
                    records.append(_sacct_record(line))
        return records

    def _with_exit_code(self, rec: _Record) -> _Record:
        """A job squeue already shows finished may not have reached accounting yet (slurmdbd gets
        it asynchronously): the controller still has its exit code for MinJobAge seconds."""
        out = self._run(["scontrol", "-o", "show", "job", str(rec.job_id)])
        match = re.search(r"\bExitCode=(\S+)", out)
        return replace(rec, exit_code=_exit_code(match.group(1))) if match else rec

    def _to_status(self, name: str, rec: _Record) -> JobStatus:
        phase = PHASES.get(rec.state, FAILED)
        message = rec.state if rec.reason in UNSET else f"{rec.state} ({rec.reason})"
        if phase in (SUCCEEDED, FAILED) and self._cancel_marked(name, rec.job_id):
            phase, message = CANCELLED, f"cancelled by the portal, ended {message}"
        return JobStatus(
            name=name,
            phase=phase,
            started_at=rec.start,
            finished_at=rec.end if phase in (SUCCEEDED, FAILED, CANCELLED) else None,
            exit_code=rec.exit_code,
            message=message,
            nodes=rec.nodes,
            node_failure=rec.state in NODE_FAILURES,
            time_source=TIME_SOURCE,
        )

    def _marker(self, name: str, job_id: int) -> Path:
        return self.jobs_dir / name / f"cancelled-{job_id}"

    def _mark_cancelled(self, name: str, job_id: int) -> None:
        marker = self._marker(name, job_id)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()

    def _cancel_marked(self, name: str, job_id: int) -> bool:
        return self._marker(name, job_id).exists()

    # ---- inventory -------------------------------------------------------------------------------

    def _node(self, line: str) -> NodeInfo:
        name, gres, state, features, reason = line.split("|", 4)
        gres_type, count = _gpu_gres(gres)
        levels = topology.from_slurm_features(features.split(","))
        zone, spine, leaf = levels.engine()
        return NodeInfo(
            name=name,
            flavor_hint=self._flavor_hint(gres_type),
            gpus=count,
            state=node_state(state),
            zone=zone,
            spine=spine,
            leaf=leaf,
            rack=levels.rack,
            problem=node_problem(state, reason),
        )

    def _flavor_hint(self, gres_type: str) -> str:
        if not gres_type:
            return CPU_HINT  # no GPU GRES: a CPU node (its units are set from its cores)
        for portal_name, cluster_gres in self.gres_map.items():
            if cluster_gres == gres_type:
                return portal_name
        return gres_type


# ---- parsing helpers (pure) --------------------------------------------------------------------------


def _with_cores(node: NodeInfo) -> NodeInfo:
    """A GPU-less node's units are its allocatable cores (0 where Slurm reports none)."""
    if node.flavor_hint != CPU_HINT:
        return node
    return replace(node, gpus=cpu_units(node.cpu_millicores, node.cpu_millicores_capacity))


def cores(millicores: int) -> int:
    """Whole cores for a request in thousandths (rounded up: Slurm allocates whole cores, and a
    job never gets less than it asked)."""
    return max(1, -(-millicores // 1000))


def scontrol_fields(line: str) -> dict[str, str]:
    """``Key=Value`` pairs of one ``scontrol show … -o`` line. A value may hold spaces (OS=Linux
    6.1.0 #1 SMP …, Reason=…): a word without ``=`` belongs to the value before it."""
    fields: dict[str, str] = {}
    key = None
    for word in line.split():
        name, eq, value = word.partition("=")
        if eq and re.fullmatch(r"[A-Za-z][A-Za-z0-9_/:.]*", name):
            key, fields[name] = name, value
        elif key is not None:
            fields[key] += " " + word
    return fields


def node_machine(fields: dict[str, str]) -> dict:
    """A node's CPU, memory and local disk as NodeInfo fields: capacity as configured (CPUTot,
    RealMemory, TmpDisk), allocatable less what Slurm keeps for the node itself (CPUEfctv: the CPUs
    left after CoreSpecCount/CpuSpecList; RealMemory − MemSpecLimit). Features ``driver-<v>`` and
    ``cuda-<v>`` name the node's driver and CUDA versions; all active features become labels."""
    cpus = _int(fields.get("CPUTot"))
    usable = _int(fields.get("CPUEfctv"))
    memory = _int(fields.get("RealMemory"))
    if memory == 1:  # Slurm's placeholder for a node whose memory is not configured
        memory = None
    spec_memory = _int(fields.get("MemSpecLimit")) or 0
    tmp = _int(fields.get("TmpDisk"))
    features = [f for f in fields.get("ActiveFeatures", "").split(",") if f and f != "(null)"]
    versions = dict(f.split("-", 1) for f in features if f.startswith(("driver-", "cuda-")))
    return {
        "cpu_millicores": (usable if usable is not None else cpus) * 1000 if cpus is not None else None,
        "memory_mib": max(0, memory - spec_memory) if memory is not None else None,
        "local_disk_gib": tmp // 1024 if tmp else None,
        "cpu_millicores_capacity": cpus * 1000 if cpus is not None else None,
        "memory_mib_capacity": memory,
        "local_disk_gib_capacity": tmp // 1024 if tmp else None,
        "driver_version": versions.get("driver", ""),
        "cuda_version": versions.get("cuda", ""),
        "labels": tuple(sorted((f, "") for f in features)),
    }


def _int(text: str | None) -> int | None:
    return int(text) if text and text.isdigit() else None


def shards_for(gpu_milli: int | None, shards_per_gpu: int) -> int:
    """How many shards a share of ``gpu_milli`` thousandths of a card asks for (rounded up: a job
    never gets less than it was granted), or 0 for a whole card or where the cluster has no shards."""
    if not gpu_milli or gpu_milli >= WHOLE or shards_per_gpu <= 0:
        return 0
    return max(1, -(-int(gpu_milli) * shards_per_gpu // WHOLE))


def node_state(sinfo_state: str) -> str:
    """sinfo's long node state (``idle``, ``mixed``, ``drained``, ``down*``, ``idle~``…) → ready |
    cordoned | down. A trailing ``*`` means the node does not answer."""
    state = sinfo_state.strip().lower()
    if state.endswith("*"):
        return "down"
    base = state.rstrip("~#%$@^-!+").split("+")[0]
    if base in {"down", "unknown", "inval", "future", "powered_down", "power_down", "powering_down"}:
        return "down"
    if base.startswith(("drain", "fail", "maint", "reboot")):
        return "cordoned"
    return "ready"


def node_problem(sinfo_state: str, reason: str) -> str:
    """A node DOWN, FAILing or DRAINed, with Slurm's reason (``sinfo %E``): a health signal
    (jobs.clusters.health); empty for a node in service or merely powered down."""
    state = sinfo_state.strip().lower()
    base = state.rstrip("~#%$@^-!+*").split("+")[0]
    if not (state.endswith("*") or base.startswith(("down", "fail", "drain"))):
        return ""
    why = " ".join(reason.split())
    # sinfo prints "none" where no reason is set
    return f"Slurm {state}" if why in UNSET or why.lower() == "none" else f"Slurm {state}: {why}"


def expand_hostlist(text: str) -> tuple[str, ...]:
    """``gpu-a100-[1-2,4],login1`` → (gpu-a100-1, gpu-a100-2, gpu-a100-4, login1)."""
    text = text.strip()
    if text in UNSET or text.startswith(("(", "None")):
        return ()
    hosts: list[str] = []
    for part in _split_top(text):
        hosts.extend(_expand_one(part))
    return tuple(hosts)


def _split_top(text: str) -> Iterable[str]:
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def _expand_one(pattern: str) -> list[str]:
    match = re.search(r"\[([^\]]*)\]", pattern)
    if not match:
        return [pattern] if pattern else []
    head, tail = pattern[: match.start()], pattern[match.end() :]
    out = []
    for item in match.group(1).split(","):
        lo, _, hi = item.partition("-")
        width = len(lo)  # zero padding, as in node[01-16]
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
    return out


def _gpu_gres(gres: str) -> tuple[str, int]:
    """``gpu:a100:8(S:0-1)`` → (``gpu:a100``, 8); several gpu entries are summed under the first type."""
    kind, total = "", 0
    for entry in _split_top(re.sub(r"\([^)]*\)", "", gres)):
        parts = entry.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        total += int(parts[-1])
        kind = kind or ":".join(parts[:-1])
    return kind, total


def _sacct_record(line: str) -> _Record:
    job_id, name, state, start, end, exit_code, nodes, reason = line.split("|", 7)
    state = state.split()[0] if state.strip() else "UNKNOWN"  # "CANCELLED by 0"
    return _Record(
        int(job_id),
        name,
        state,
        _time(start),
        _time(end),
        expand_hostlist(nodes),
        reason,
        _exit_code(exit_code),
    )


def _exit_code(text: str) -> int | None:
    """sacct's ``status:signal``: the exit status, or 128 + signal when a signal ended the job."""
    status, _, signal = text.partition(":")
    if not status.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(status)


def _time(text: str) -> datetime | None:
    """A time as the clients print it: epoch seconds (SLURM_TIME_FORMAT=%s), or — from a client
    that ignores the format — ISO 8601 without zone, in the clients' TZ=UTC."""
    text = text.strip()
    if text in UNSET:
        return None
    try:
        if text.isdigit():
            return datetime.fromtimestamp(int(text), UTC)
        return datetime.fromisoformat(text).replace(tzinfo=UTC)
    except (ValueError, OverflowError, OSError):
        return None


def _newest(records: Iterable[_Record]) -> dict[str, _Record]:
    """The most recent job per name (a requeued portal job reuses its name)."""
    newest: dict[str, _Record] = {}
    for rec in records:
        if rec.name not in newest or rec.job_id > newest[rec.name].job_id:
            newest[rec.name] = rec
    return newest


def _pick(live: _Record | None, done: _Record | None) -> _Record | None:
    """squeue for live jobs; sacct for finished ones (it has the exit code) when it knows that job."""
    if live is None:
        return done
    if live.state in FINISHED and done is not None and done.job_id == live.job_id:
        # sacct's Reason is often just "None" where the controller still says why (e.g. NodeDown).
        return done if done.reason not in UNSET else replace(done, reason=live.reason)
    return live


def _job_ids(file_names: Iterable[str]) -> list[int]:
    """The Slurm job ids a job's directory knows of (markers and output files)."""
    ids = []
    for name in file_names:
        match = ID_FILE.fullmatch(name)
        if match:
            ids.append(int(match.group(1) or match.group(2)))
    return ids


def _chunks(items: list[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _minutes(seconds: int) -> int:
    return max(1, -(-int(seconds) // 60))  # Slurm time limits have minute resolution: round up


def _safe(value: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.@-]", "_", str(value))


def _natural_key(name: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
