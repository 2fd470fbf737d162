"""A job's log and a dev job's exposed port, read through its cluster's backend (DESIGN §13).

The portal stores no logs: the tail and the whole log come from the backend each time (the
simulator's log file, Slurm's output file, the pod's logs). Whoever can see the job may read
them — the views and the API look the job up through ``selectors.visible_jobs`` first.

Nothing here raises for a log that is not there: a job never dispatched, an external job, or a
backend that cannot be reached is a ``LogTail`` with ``missing`` saying why — the job page shows
that sentence, never a 500.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

from django.utils.translation import gettext as _

from jobs.clusters.backends.base import Access, BackendError, LogTail
from jobs.clusters.dispatch import backend_of
from jobs.models import Job, JobKind, backend_name
from jobs.states import JobState
from quotas.models import Node

log = logging.getLogger(__name__)
MAX_TAIL_BYTES = 1024 * 1024  # the most one tail request reads (the API's bound too)
REASON_CHARS = 300  # a backend's error is shown, cut: it may quote a long answer


class LogUnavailable(Exception):
    """There is no log to stream; the message says why (in the reader's language)."""


def _missing_reason(job: Job) -> str:
    """Why the portal has no log to ask for without calling a backend, or ''."""
    if job.kind == JobKind.EXTERNAL:
        return _("This job was submitted to its cluster directly: its log stays there, unread by the portal.")
    if job.cluster_id is None:
        # The cluster is set at the first dispatch and kept when the job is requeued, so a job
        # that ran once still shows its earlier run's log while it waits again.
        return _("Not started yet: the job has a log once it has been sent to its cluster.")
    return ""


def _backend(job: Job):
    """The job's cluster backend; a configuration it cannot start from (a missing setting, a
    kubeconfig that is not there) is a BackendError too, so the page says so instead of a 500."""
    try:
        return backend_of(job.cluster)
    except (KeyError, ValueError, TypeError, OSError) as exc:
        raise BackendError(
            f"the cluster's configuration is not usable ({type(exc).__name__}: {exc})"
        ) from exc


def _unreachable(job: Job, exc: BackendError) -> str:
    log.warning("log of job %s: backend error: %s", job.pk, exc)
    return _("Cluster %(cluster)s could not be read: %(reason)s") % {
        "cluster": job.cluster.name,
        "reason": str(exc)[:REASON_CHARS],
    }


def job_log_tail(job: Job, *, max_bytes: int) -> LogTail:
    """The last ``max_bytes`` (1 … MAX_TAIL_BYTES) of the job's log, or why there is none."""
    max_bytes = max(1, min(int(max_bytes), MAX_TAIL_BYTES))
    missing = _missing_reason(job)
    if missing:
        return LogTail(text="", missing=missing)
    try:
        tail = _backend(job).log_tail(backend_name(job.pk), max_bytes=max_bytes)
    except BackendError as exc:
        return LogTail(text="", missing=_unreachable(job, exc))
    if tail.missing:
        return LogTail(text="", missing=_("No log: %(reason)s") % {"reason": tail.missing[:REASON_CHARS]})
    return tail


def job_log_stream(job: Job) -> Iterator[bytes]:
    """The whole log as the backend streams it (pieces of at most LOG_CHUNK_BYTES, never all in
    memory). LogUnavailable before the first byte when there is none: the first piece is read
    here, so a download either starts with the log or is refused with the reason — it never
    becomes a 200 that breaks off at once."""
    missing = _missing_reason(job)
    if missing:
        raise LogUnavailable(missing)
    try:
        chunks = iter(_backend(job).log_stream(backend_name(job.pk)))
        first = next(chunks, b"")
    except BackendError as exc:
        raise LogUnavailable(_reason_of_stream(job, exc)) from exc
    return _guarded(job, itertools.chain([first] if first else [], chunks))


def _reason_of_stream(job: Job, exc: BackendError) -> str:
    """A backend says "no log" with a BackendError too: ask its tail, which says why in words."""
    tail = job_log_tail(job, max_bytes=1)
    return tail.missing or _unreachable(job, exc)


def _guarded(job: Job, chunks: Iterator[bytes]) -> Iterator[bytes]:
    # Once the response has started its status is sent: a backend that breaks off mid-log can
    # only end the body early. The log line says which download was cut.
    try:
        yield from chunks
    except BackendError as exc:
        log.warning("log download of job %s broke off: %s", job.pk, exc)


def owns(user, job: Job) -> bool:
    """A dev job's port is its owner's workspace (a notebook, a shell as that user): seeing the
    job — a project viewer, a department admin — gives its log, never a way into it."""
    return user.is_authenticated and user.is_active and job.submitted_by_id == user.pk


def job_access(job: Job, user) -> Access | None:
    """How ``user`` reaches the dev job's exposed port, or None when it exposes nothing to them
    now (not a dev job, no port, not running, not theirs). A backend that cannot be reached is
    an Access with only a ``note`` saying so."""
    if job.kind != JobKind.DEV or not job.expose_port or job.state != JobState.RUNNING:
        return None
    if not owns(user, job):
        return None
    if job.cluster_id is None:
        return None
    node_ids = [slot[0] for worker in job.placement or [] for slot in worker]
    names = dict(Node.objects.filter(pk__in=set(node_ids)).values_list("id", "name"))
    nodes = tuple(dict.fromkeys(names[n] for n in node_ids if n in names))  # worker order, once each
    try:
        return _backend(job).access(backend_name(job.pk), job.expose_port, nodes=nodes, user=user.unix_name)
    except BackendError as exc:
        return Access(note=_unreachable(job, exc))
