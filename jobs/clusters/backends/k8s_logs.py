"""Pod logs for the Kubernetes backend (DESIGN §13): which pod's log is the job's, why there is
none, and the end of a log read in pieces. Pure functions over the official client's models; the
backend reads ``GET /api/v1/namespaces/{ns}/pods/{name}/log`` with them.

Tail: the API's ``limitBytes`` keeps the *beginning* of a log, so the tail is asked for by lines
(``tailLines``, :func:`tail_lines`) and the answer, streamed, is trimmed to its last ``max_bytes``
(:class:`Tail`). Memory stays within ``max_bytes`` plus one piece; what crosses the network is at
most that many lines (a log of very long lines can make it more than ``max_bytes``).
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
from typing import Any

CONTAINER = "main"  # the container of every pod the backend builds (sidecars may be added by others)
LINE_BYTES = 16  # the shortest average line the tail request plans for
# Where controllers write the worker's index (batch/v1 Indexed Job; Volcano's task index).
INDEX_KEYS = ("batch.kubernetes.io/job-completion-index", "volcano.sh/task-index")

NOT_SCHEDULED = "the pod has not been scheduled"
NOT_STARTED = "container not started"
DELETED = "the pod was deleted: its log went with it"


class LogMissing(Exception):
    """There is no log to read; the message says why (one of the reasons above)."""


def tail_lines(max_bytes: int) -> int:
    """Lines to ask for: enough for ``max_bytes`` of lines of :data:`LINE_BYTES`, plus one that
    tells whether earlier output exists."""
    return max(1, max_bytes // LINE_BYTES) + 1


def _index(pod: Any) -> str | None:
    meta = pod.metadata
    for source in (meta.labels or {}, meta.annotations or {}):
        for key in INDEX_KEYS:
            if key in source:
                return str(source[key])
    return None


def _created(pod: Any) -> datetime | str:
    return pod.metadata.creation_timestamp or ""


def first_pod(pods: list[Any]) -> Any | None:
    """The job's first worker: the pod of index 0 where the controller numbers them (the newest
    one, should it have been replaced), else the oldest pod (a Deployment's, a dev job's one)."""
    if not pods:
        return None
    zero = [p for p in pods if _index(p) == "0"]
    if zero:
        return max(zero, key=lambda p: (str(_created(p)), p.metadata.name))
    return min(pods, key=lambda p: (str(_created(p)), p.metadata.name))


def not_started(pod: Any) -> str:
    """Why the pod's container has no log yet ("" when it has one)."""
    status = pod.status
    if not (pod.spec and pod.spec.node_name):
        return NOT_SCHEDULED
    for cs in (status.container_statuses if status else None) or []:
        if cs.name != CONTAINER:
            continue
        state = cs.state
        if state and (state.running or state.terminated):
            return ""
        reason = state.waiting.reason if state and state.waiting else ""
        return f"{NOT_STARTED}: {reason}" if reason else NOT_STARTED
    return NOT_STARTED


class Tail:
    """The last ``max_bytes`` of a byte stream fed in pieces, and whether bytes before them (or
    a line before the ``lines`` asked for) exist."""

    def __init__(self, max_bytes: int, lines: int):
        self.max_bytes = max(0, max_bytes)
        self.lines = lines
        self.pieces: deque[bytes] = deque()
        self.kept = 0
        self.dropped = False
        self.newlines = 0
        self.last = b""

    def feed(self, piece: bytes) -> None:
        if not piece:
            return
        self.newlines += piece.count(b"\n")
        self.last = piece[-1:]
        self.pieces.append(piece)
        self.kept += len(piece)
        # Whole pieces go once the rest still holds max_bytes; result() cuts within the first.
        while self.pieces and self.kept - len(self.pieces[0]) >= self.max_bytes:
            self.kept -= len(self.pieces.popleft())
            self.dropped = True

    def result(self) -> tuple[str, bool]:
        data = b"".join(self.pieces)
        truncated = self.dropped
        if len(data) > self.max_bytes:
            data, truncated = data[len(data) - self.max_bytes :], True
        received = self.newlines + (1 if self.last not in (b"", b"\n") else 0)
        if received >= self.lines:
            # As many lines as asked for: earlier output exists. The first line is the extra one.
            truncated = True
            if not self.dropped and len(data) == self.kept:
                data = data.split(b"\n", 1)[1] if b"\n" in data else b""
        return _decode(data), truncated


def _decode(data: bytes) -> str:
    # A cut may land inside a UTF-8 character: its continuation bytes are dropped, not replaced.
    start = 0
    while start < len(data) and start < 3 and 0x80 <= data[start] < 0xC0:
        start += 1
    return data[start:].decode("utf-8", errors="replace")
