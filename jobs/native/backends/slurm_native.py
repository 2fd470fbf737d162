"""Jobs users submit to Slurm directly (DESIGN §11), as Slurm's clients print them. Plain Python.

``jobs.native.native_slurm`` runs the commands (through :class:`jobs.clusters.backends.slurm.SlurmBackend`'s
runner and environment: ``SLURM_TIME_FORMAT=%s``, so every time is epoch seconds) and hands the
text to these parsers; :func:`to_record` turns a job into an :class:`ExternalRecord`.

* ``squeue`` (:data:`SQUEUE_ARGS`) lists the live jobs: pending ones with Slurm's reason, running
  ones with their start; ``sacct -X`` (:func:`sacct_args`) the finished ones (one line per
  allocation, ``AllocTRES`` for what it held; a job cancelled before it started has none, and the
  Start Slurm gives it is its cancel time: it is read as never started, with its ``ReqTRES``);
  ``scontrol -d -o show job`` which GPU indices a running job holds
  on each node (``GRES=gpu:a100:2(IDX:0-1)``).
* The job name is the last column of both, so a name containing the separator ``|`` stays whole.
* Job ids: the backend id is Slurm's *raw* id (squeue ``JobID`` in ``-O`` format, sacct
  ``JobIDRaw``, scontrol ``JobId``), unique per allocation. An array task (``123_4``) and a
  heterogeneous job's component (``123+0``) each have their own raw id, allocation, GPUs and
  times, so each is one external job; the display id (``123_4``) is kept in the name. The
  unstarted tasks of a pending array (``123_[5-9]``) are one pending line with the array's raw
  id: they show as one queued job until they start, each under its own raw id.
* A job without ``gres/gpu`` in its TRES holds no accelerator: not a GPU job, skipped — unless it
  holds GPU shards (``gres/shard``, Slurm 22.05 GPU sharing): then it holds a share of one card
  per node, ``gpu_milli`` = shards per node × 1000 / ``shards_per_gpu`` (:func:`shard_tres`).
* Jobs the portal submitted itself are told apart by the service (:func:`portal_job_id` reads
  the ``gp-<id>`` name; ``jobs.native.native_slurm`` also checks the submitting Unix user and the
  portal's own backend ids), never by the name alone, which anyone may choose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from jobs.clusters.backends.base import PENDING, RUNNING
from jobs.clusters.backends.slurm import (
    PHASES,
    SHARDS_PER_GPU,
    UNSET,
    WHOLE,
    _exit_code,
    _time,
    expand_hostlist,
)
from jobs.native.backends.external import ENDED, ExternalRecord

SQUEUE_FIELDS = (
    "JobID",
    "JobArrayID",
    "Account",
    "UserName",
    "State",
    "SubmitTime",
    "StartTime",
    "QOS",
    "tres-alloc",
    "NodeList",
    "Reason",
    "Name",
)
# -O with an empty width and "|" as suffix: fields unpadded and untruncated.
SQUEUE_ARGS = ["squeue", "--all", "-h", "-O", ",".join(f"{f}:|" for f in SQUEUE_FIELDS)]
SACCT_FIELDS = (
    "JobIDRaw",
    "JobID",
    "Account",
    "User",
    "State",
    "Submit",
    "Start",
    "End",
    "AllocTRES",
    "ReqTRES",
    "NodeList",
    "QOS",
    "ExitCode",
    "Reason",
    "JobName",
)
SCONTROL_ARGS = ["scontrol", "-d", "-o", "show", "job"]
_PORTAL_NAME = re.compile(r"gp-(\d+)")


@dataclass(frozen=True, slots=True)
class NativeJob:
    """One Slurm allocation as squeue or sacct printed it."""

    job_id: str  # raw id
    display_id: str  # 123, 123_4, 123+0
    name: str
    account: str
    user: str
    state: str  # first word of Slurm's long state ("CANCELLED by 0" → CANCELLED)
    submitted: datetime | None
    started: datetime | None
    ended: datetime | None
    gres_type: str  # "gpu:a100"; "gpu" when the TRES names no type; "" when no GPU
    devices: int
    nodes: tuple[str, ...]
    qos: str = ""
    reason: str = ""
    exit_code: int | None = None
    # A shard job's share of each of its ``devices`` cards, in thousandths; None for whole cards.
    gpu_milli: int | None = None
    # The CPU and memory it holds in all (its TRES ``cpu=`` and ``mem=``); None: not in the TRES.
    cpu_millicores: int | None = None
    memory_mib: int | None = None

    @property
    def phase(self) -> str | None:
        return PHASES.get(self.state)


def sacct_args(
    *, since: datetime | None = None, until: datetime | None = None, job_ids: list[str] | None = None
) -> list[str]:
    """``sacct`` over a window (jobs running or ending in it), or for given job ids."""
    args = ["sacct", "-X", "-P", "-n", "--allusers", "--format=" + ",".join(SACCT_FIELDS)]
    if job_ids:
        args += ["-j", ",".join(job_ids)]
    if since is not None:
        args += ["-S", _slurm_time(since)]
    if until is not None:
        args += ["-E", _slurm_time(until)]
    return args


def _slurm_time(at: datetime) -> str:
    # The clients run with TZ=UTC: an ISO time without zone, in UTC, is read as that instant.
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def gpu_tres(tres: str) -> tuple[str, int]:
    """``billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2`` → (``gpu:a100``, 2); (``gpu``, n) when only
    the untyped count is there; ("", 0) without GPUs. A job holding two GPU types is recorded
    under the type it holds most of, with all its devices (Slurm's total)."""
    total, typed = 0, {}
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if not key.startswith("gres/gpu") or not value.isdigit():
            continue
        if key == "gres/gpu":
            total = int(value)
        elif key.startswith("gres/gpu:"):
            typed["gpu:" + key.removeprefix("gres/gpu:")] = int(value)
    total = total or sum(typed.values())
    if total <= 0:
        return "", 0
    kind = max(sorted(typed), key=lambda k: typed[k]) if typed else "gpu"
    return kind, total


def shard_tres(tres: str, nodes: int, shards_per_gpu: int = SHARDS_PER_GPU) -> tuple[str, int, int | None]:
    """A shard job's TRES → (``gpu:<type>``, cards, thousandths of each card): Slurm 22.05 takes a
    job's shards on a node from one GPU, so it holds one card per node, shared. ``gres/shard=4`` on
    one node with 8 shards per GPU → (``gpu``, 1, 500); typed ``gres/shard:a100=4`` → ``gpu:a100``.
    ("", 0, None) without shards."""
    total, kind = 0, "gpu"
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if key == "gres/shard" and value.isdigit():
            total = int(value)
        elif key.startswith("gres/shard:") and value.isdigit():
            kind = "gpu:" + key.removeprefix("gres/shard:")
            total = total or int(value)
    if total <= 0 or shards_per_gpu <= 0:
        return "", 0, None
    cards = max(nodes, 1)
    milli = min(WHOLE, -(-total * WHOLE // (cards * shards_per_gpu)))  # rounded up, as it was asked
    return kind, cards, None if milli >= WHOLE else milli


def held_tres(tres: str, nodes: int, shards_per_gpu: int = SHARDS_PER_GPU) -> tuple[str, int, int | None]:
    """Whole GPUs (:func:`gpu_tres`) or else GPU shards (:func:`shard_tres`): (type, cards, milli)."""
    kind, devices = gpu_tres(tres)
    if devices:
        return kind, devices, None
    return shard_tres(tres, nodes, shards_per_gpu)


# TRES memory: a number with Slurm's binary suffix (MiB without one).
_MEMORY = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)")
_MIB_PER = {"K": 1 / 1024, "": 1, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def machine_tres(tres: str) -> tuple[int | None, int | None]:
    """``cpu=24,mem=248G,node=2,gres/gpu=2`` → (24000 millicores, 253952 MiB): the cores and
    memory a job holds in all (``AllocTRES``, squeue's tres-alloc) or asked (``ReqTRES``)."""
    cpu = memory = None
    for item in tres.split(","):
        key, _, value = item.strip().partition("=")
        if key == "cpu" and value.isdigit():
            cpu = int(value) * 1000
        elif key == "mem":
            found = _MEMORY.fullmatch(value.strip())
            if found:
                memory = int(float(found["n"]) * _MIB_PER[found["unit"]])
    return cpu, memory


def _state(text: str) -> str:
    words = text.split()
    return words[0] if words else "UNKNOWN"


def _text(text: str) -> str:
    return "" if text.strip() in UNSET else text.strip()


def parse_squeue(text: str, shards_per_gpu: int = SHARDS_PER_GPU) -> list[NativeJob]:
    """The jobs ``SQUEUE_ARGS`` printed. A pending job's StartTime is a forecast: dropped."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.removesuffix("|").split("|", len(SQUEUE_FIELDS) - 1)
        if len(parts) != len(SQUEUE_FIELDS):
            continue
        raw, display, account, user, state, submit, start, qos, tres, nodes, reason, name = parts
        state = _state(state)
        live = PHASES.get(state) not in (None, PENDING)
        held_nodes = expand_hostlist(nodes) if live else ()
        gres, devices, milli = held_tres(tres, len(held_nodes), shards_per_gpu)
        cpu, memory = machine_tres(tres)
        jobs.append(
            NativeJob(
                job_id=raw.strip(),
                display_id=display.strip() or raw.strip(),
                name=name,
                account=account.strip(),
                user=user.strip(),
                state=state,
                submitted=_time(submit),
                started=_time(start) if live else None,
                cpu_millicores=cpu,
                memory_mib=memory,
                ended=None,
                gres_type=gres,
                devices=devices,
                nodes=held_nodes,
                qos=_text(qos),
                reason=_text(reason),
                gpu_milli=milli,
            )
        )
    return jobs


def parse_sacct(text: str, shards_per_gpu: int = SHARDS_PER_GPU) -> list[NativeJob]:
    """The lines ``sacct_args`` printed (``-X``: one per allocation)."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", len(SACCT_FIELDS) - 1)
        if len(parts) != len(SACCT_FIELDS):
            continue
        raw, display, account, user, state, submit, start, end, alloc, req, nodes, qos, code, reason, name = (
            parts
        )
        held_nodes = expand_hostlist(nodes)
        allocated = bool(alloc.strip())
        # Never allocated (cancelled while pending): it asked for ReqTRES and ran on nothing.
        # Slurm sets such a job's Start to its cancel time; it never started.
        gres, devices, milli = held_tres(alloc if allocated else req, len(held_nodes), shards_per_gpu)
        cpu, memory = machine_tres(alloc if allocated else req)
        jobs.append(
            NativeJob(
                job_id=raw.strip(),
                display_id=display.strip() or raw.strip(),
                name=name,
                account=account.strip(),
                user=user.strip(),
                state=_state(state),
                submitted=_time(submit),
                started=_time(start) if allocated else None,
                ended=_time(end),
                gres_type=gres,
                devices=devices,
                nodes=held_nodes,
                qos=_text(qos),
                reason=_text(reason),
                exit_code=_exit_code(code),
                gpu_milli=milli,
                cpu_millicores=cpu,
                memory_mib=memory,
            )
        )
    return jobs


# A shard job's GRES names the GPU its shards are on too (``shard:4(IDX:0)``).
_GPU_GRES = re.compile(r"(?:^|,)((?:gpu|shard)[^,(]*)((?:\([^)]*\))*)")


def gpu_indices(gres: str) -> list[int]:
    """``gpu:a100:2(IDX:0-1)`` → [0, 1]; ``gpu:a100(CNT:3)(IDX:0,2-3)`` → [0, 2, 3]; a shard job's
    ``shard:4(IDX:0)`` → [0], the GPU it shares; other GRES and ``IDX:N/A`` → []."""
    out: list[int] = []
    for _kind, groups in _GPU_GRES.findall(gres.strip()):
        for group in re.findall(r"\(IDX:([^)]*)\)", groups):
            for item in group.split(","):
                lo, _, hi = item.partition("-")
                if lo.isdigit() and (not hi or hi.isdigit()):
                    out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse_scontrol_gpus(text: str) -> dict[str, tuple[tuple[str, int], ...]]:
    """``scontrol -d -o show job`` (one line per job) → raw job id → (node, GPU index) it holds.
    The detail pairs are ``Nodes=<hostlist> CPU_IDs=… Mem=… GRES=<gres>``; one pair may cover
    several nodes given the same indices."""
    held: dict[str, tuple[tuple[str, int], ...]] = {}
    for line in text.splitlines():
        tokens = line.split()
        job_id, slots, nodes = None, [], ()
        for i, token in enumerate(tokens):
            if token.startswith("JobId=") and job_id is None:
                job_id = token.removeprefix("JobId=")
            elif token.startswith("Nodes=") and i + 1 < len(tokens) and tokens[i + 1].startswith("CPU_IDs="):
                nodes = expand_hostlist(token.removeprefix("Nodes="))
            elif token.startswith("GRES=") and nodes:
                idx = gpu_indices(token.removeprefix("GRES="))
                slots.extend((node, g) for node in nodes for g in idx)
                nodes = ()
        if job_id and slots:
            held[job_id] = tuple(slots)
    return held


def portal_job_id(name: str) -> int | None:
    """The portal job a Slurm job name claims to be (``gp-<id>``, SlurmBackend.submit), or None."""
    match = _PORTAL_NAME.fullmatch(name.strip())
    return int(match.group(1)) if match else None


def to_record(job: NativeJob, slots: tuple[tuple[str, int], ...] = ()) -> ExternalRecord | None:
    """The external record of a Slurm job, or None: not a GPU job, a state the portal does not
    know, or no time at all. ``slots`` (from scontrol) only count while it runs."""
    phase = job.phase
    if phase is None or job.devices < 1:
        return None
    submitted = job.submitted or job.started or job.ended
    if submitted is None:
        return None
    ended = phase in ENDED
    name = job.name if job.display_id == job.job_id else f"{job.name} {job.display_id}"
    array_id, array_index = array_task(job.display_id)
    return ExternalRecord(
        backend_id=job.job_id,
        name=name,
        source=job.account,
        user=job.user,
        resource=job.gres_type,
        devices=job.devices,
        phase=phase,
        submitted_at=submitted,
        started_at=job.started if phase != PENDING else None,
        finished_at=job.ended if ended else None,
        reason=job.reason if phase == PENDING else _why_ended(job) if ended else "",
        slots=tuple(slots) if phase == RUNNING else (),
        priority=job.qos,
        exit_code=job.exit_code,
        gpu_milli=job.gpu_milli if job.gpu_milli and job.gpu_milli < 1000 else None,
        cpu_millicores=job.cpu_millicores,
        memory_mib=job.memory_mib,
        array_id=array_id,
        array_index=array_index,
    )


_ARRAY_TASK = re.compile(r"(\d+)_(\d+)")
_ARRAY_PENDING = re.compile(r"(\d+)_\[.*\]")


def array_task(display_id: str) -> tuple[str, int | None]:
    """``123_4`` → ("123", 4); a pending array's unstarted tasks ``123_[5-9%2]`` → ("123", None);
    any other id (not an array task) → ("", None)."""
    match = _ARRAY_TASK.fullmatch(display_id.strip())
    if match:
        return match[1], int(match[2])
    match = _ARRAY_PENDING.fullmatch(display_id.strip())
    return (match[1], None) if match else ("", None)


_PLAIN_ENDS = {"COMPLETED", "FAILED", "CANCELLED"}


def _why_ended(job: NativeJob) -> str:
    """What the end reason adds to "completed"/"failed"/"cancelled": Slurm's state when it says
    more (TIMEOUT, NODE_FAIL, OUT_OF_MEMORY…) and its reason when it gives one."""
    parts = [job.state.lower()] if job.state not in _PLAIN_ENDS else []
    if job.reason:
        parts.append(job.reason)
    return ", ".join(parts)
