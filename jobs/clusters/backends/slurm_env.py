"""A Slurm job's working environment (DESIGN §13) as lines of its batch script.

Slurm jobs run on the nodes without containers, so storage is not mounted for them: a project's
storage is a path the nodes already see on the shared file system (``Mount.host_path``), and the
job learns it from ``GPUPOOL_MOUNT_<NAME>``. Every value is written with ``shlex.quote``, so the
shell exports it literally whatever it holds (quotes, ``$(…)``, backquotes, newlines). A secret is
never written at all: the script holds the path of a file on the nodes, read when the job starts.

Plain Python, no Django.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

from jobs.clusters.backends.base import BackendError, Checkpoint, EnvVar, JobSpec, Mount

# A shell variable name (POSIX): anything else cannot be exported, or would be code.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Project, secret and key name one path component each: no "/", and never "." or "..".
PATH_PART = re.compile(r"[A-Za-z0-9._-]+\Z")
MISSING_SECRET_EXIT = 78  # EX_CONFIG (sysexits.h): the job's configuration is wrong, not its program
NO_CHECKPOINT_DIR_EXIT = 73  # EX_CANTCREAT


def environment_lines(spec: JobSpec, *, secrets_dir: str) -> list[str]:
    """The user's variables (secrets first read, so a missing one fails the job before anything
    runs), then the storage and checkpoint variables — after the user's, so the portal's win."""
    return [
        *env_lines(spec.env, project=spec.labels.get("project", ""), secrets_dir=secrets_dir),
        *mount_lines(spec.mounts),
        *checkpoint_lines(spec.checkpoint),
    ]


def export(name: str, value: object) -> str:
    text = str(value)
    if "\0" in text:  # no environment can hold a NUL byte
        raise BackendError(f"slurm: the value of {name} contains a NUL byte")
    return f"export {name}={shlex.quote(text)}"


def env_key(key: str) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", key.upper())


def warn(text: str) -> str:
    """A line the job prints to its stderr (the output file): one line, whatever ``text`` holds."""
    one_line = re.sub(r"[^\x20-\x7e]", "?", text)
    return f"echo {shlex.quote('gpupool: warning: ' + one_line)} >&2"


# ---- environment variables ----------------------------------------------------------------------


def env_lines(env: Iterable[EnvVar], *, project: str, secrets_dir: str) -> list[str]:
    lines: list[str] = []
    for var in env:
        if not ENV_NAME.match(var.name):
            raise BackendError(f"slurm: {var.name!r} is not a valid environment variable name")
        if var.secret or var.key:
            lines += _secret_lines(var, secret_path(secrets_dir, project, var))
        else:
            lines.append(export(var.name, var.value))
    return lines


def secret_path(secrets_dir: str, project: str, var: EnvVar) -> str:
    """``<secrets_dir>/<project>/<secret>/<key>``: the file on the nodes that holds the value."""
    if var.value:
        raise BackendError(f"slurm: {var.name} has both a value and a secret reference")
    for what, part in (("project", project), ("secret", var.secret), ("key", var.key)):
        if not PATH_PART.match(part) or part in (".", ".."):
            raise BackendError(f"slurm: {var.name}: {what} {part!r} cannot name a secrets file")
    return f"{secrets_dir.rstrip('/')}/{project}/{var.secret}/{var.key}"


def _secret_lines(var: EnvVar, path: str) -> list[str]:
    # Read on the node when the job starts; `$(cat …)` drops trailing newlines, as files written
    # with `echo` end in one. The job ends before its command runs when the file is not there.
    quoted = shlex.quote(path)
    message = shlex.quote(
        f"gpupool: the secret file {path} for {var.name} is missing or unreadable on this node; "
        "the job cannot start (ask the centre to install it)"
    )
    read = f"[ -f {quoted} ] && {var.name}=$(cat -- {quoted} 2>/dev/null)"
    return [f"{read} || {{ echo {message} >&2; exit {MISSING_SECRET_EXIT}; }}", f"export {var.name}"]


# ---- storage and checkpoint ---------------------------------------------------------------------


def mount_lines(mounts: Iterable[Mount]) -> list[str]:
    """``GPUPOOL_MOUNT_<NAME>`` per storage the nodes see (``_RO=1`` when read-only), a warning for
    one they do not (a Kubernetes PVC), and ``GPUPOOL_WORKDIR``: the first writable storage."""
    lines: list[str] = []
    seen: set[str] = set()
    workdir = ""
    for mount in mounts:
        key = f"GPUPOOL_MOUNT_{env_key(mount.name)}"
        if key in seen:
            raise BackendError(f"slurm: two storages of the job share the variable {key}")
        seen.add(key)
        if not mount.host_path:
            lines.append(warn(f"storage {mount.name} ({mount.kind}) is not available on Slurm nodes"))
            continue
        _check_host_path(mount)
        lines.append(export(key, mount.host_path))
        if mount.read_only:
            lines.append(export(f"{key}_RO", 1))
        elif not workdir:
            workdir = mount.host_path
    if workdir:
        lines.append(export("GPUPOOL_WORKDIR", workdir))
    return lines


def checkpoint_lines(checkpoint: Checkpoint | None) -> list[str]:
    """``mkdir -p`` and ``GPUPOOL_CHECKPOINT_DIR``: the directory depends on the spec only, so a
    requeued job finds what its previous run saved."""
    if checkpoint is None:
        return []
    if not checkpoint.host_dir:
        name = checkpoint.mount.name
        return [warn(f"the checkpoint storage {name} is not available on Slurm nodes: no checkpoint dir")]
    _check_host_path(checkpoint.mount)
    path = checkpoint.host_dir
    message = shlex.quote(f"gpupool: cannot create the checkpoint directory {path}")
    return [
        f"mkdir -p -- {shlex.quote(path)} || {{ echo {message} >&2; exit {NO_CHECKPOINT_DIR_EXIT}; }}",
        export("GPUPOOL_CHECKPOINT_DIR", path),
    ]


def _check_host_path(mount: Mount) -> None:
    # A relative path would land in the job's directory, not on the project's storage.
    if not mount.host_path.startswith("/"):
        raise BackendError(f"slurm: storage {mount.name}: host path {mount.host_path!r} is not absolute")
