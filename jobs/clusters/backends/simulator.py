"""The simulated cluster as a :class:`~jobs.clusters.backends.base.Backend`, over the HTTP API of
``jobs.clusters.backends.simserver`` (stdlib ``urllib`` only, no Django).

Logs: ``GET /jobs/<name>/log?tail_bytes=N`` (the tail, JSON) and ``/log/raw`` (the whole file,
chunked); a dev job's exposed port is a small page the simulator itself serves.

Besides the backend protocol it offers the failure-injection calls the tests and the demo use:
``set_inventory``, ``set_node_state``, ``set_xid``, ``crash``, ``slow_start``, ``metrics``, and ``view`` (the
simulator's record of one job, placement and worker count included).
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jobs.clusters.backends.base import (
    LOG_CHUNK_BYTES,
    LOST,
    Access,
    BackendError,
    JobSpec,
    JobStatus,
    LogTail,
    NodeInfo,
)

# The simulator stamps each job's start and end on its own clock (real UTC instants, see
# jobs.clusters.backends.simserver): those are the job's times, however late the portal polls.
TIME_SOURCE = "simulator"
# Names per GET /jobs request: keeps the query string far below common URL length limits.
STATUS_BATCH = 200


class _Refused(BackendError):
    """The simulator answered with an HTTP error status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class SimulatorBackend:
    def __init__(self, base_url: str, timeout: float = 5):
        if urlsplit(base_url).scheme not in ("http", "https"):
            raise ValueError(f"simulator URL must be http(s): {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    # -- Backend protocol

    def submit(self, spec: JobSpec) -> str:
        # The server is idempotent by name, so a retried dispatch gets the job it already made.
        return self._call("POST", "/jobs", dataclasses.asdict(spec))["name"]

    def cancel(self, name: str, *, grace_seconds: int = 0) -> None:
        query = urlencode({"grace_seconds": grace_seconds})
        # Unknown to the simulator = nothing left to stop, which is what cancel promises.
        self._call("DELETE", f"/jobs/{quote(name, safe='')}?{query}", missing_ok=True)

    def status(self, names: list[str]) -> dict[str, JobStatus]:
        result: dict[str, JobStatus] = {}
        for i in range(0, len(names), STATUS_BATCH):
            batch = names[i : i + STATUS_BATCH]
            jobs = self._call("GET", "/jobs?" + urlencode({"names": ",".join(batch)}))["jobs"]
            result.update({n: _job_status(jobs[n]) if n in jobs else JobStatus(n, LOST) for n in batch})
        return result

    def resize(self, spec: JobSpec) -> None:
        # The simulated job runs on the new placement at once (no restart): 409 while a GPU it
        # gains is still used by another job, and the resize task retries.
        body = {"placement": dataclasses.asdict(spec)["placement"], "gpu_milli": spec.gpu_milli}
        self._call("POST", f"/jobs/{quote(spec.name, safe='')}/resize", body)

    def list_nodes(self) -> list[NodeInfo]:
        return [_node_info(n) for n in self._call("GET", "/nodes")["nodes"]]

    def log_tail(self, name: str, *, max_bytes: int) -> LogTail:
        d = self._call("GET", f"/jobs/{quote(name, safe='')}/log?" + urlencode({"tail_bytes": max_bytes}))
        return LogTail(
            text=d["text"],
            size=d.get("size"),
            truncated=bool(d.get("truncated")),
            missing=d.get("missing") or "",
        )

    def log_stream(self, name: str) -> Iterator[bytes]:
        # Opened here, not on the first next(): "no log" is a BackendError the caller sees at once.
        response = self._open("GET", f"/jobs/{quote(name, safe='')}/log/raw", None)
        return _chunks(response, f"simulator log of {name}")

    def access(self, name: str, port: int, *, nodes: tuple[str, ...], user: str) -> Access:
        # The simulator serves the dev job's page itself; no tunnel, whoever the user and nodes.
        return Access(
            url=f"{self.base_url}/jobs/{quote(name, safe='')}/port/{int(port)}/", note="simulated dev server"
        )

    def health(self) -> str:
        try:
            answer = self._call("GET", "/healthz")
        except BackendError as exc:
            return str(exc)
        return "ok" if answer.get("status") == "ok" else f"simulator says {answer!r}"

    # -- failure injection and helpers for tests and the demo

    def set_inventory(
        self, nodes: Iterable[NodeInfo | Mapping[str, Any]], *, keep_states: bool = False
    ) -> list[NodeInfo]:
        """Replace the node list; with ``keep_states`` the nodes it already has keep their state."""
        body = [dataclasses.asdict(n) if isinstance(n, NodeInfo) else dict(n) for n in nodes]
        path = "/inventory?keep_states=1" if keep_states else "/inventory"
        return [_node_info(n) for n in self._call("PUT", path, {"nodes": body})["nodes"]]

    def set_node_schedulable(self, name: str, schedulable: bool, *, reason: str = "") -> None:
        """Cordoned or ready in the simulator. A node it has down stays down (it does not answer;
        the portal's hold applies again when it is back)."""
        current = {n.name: n.state for n in self.list_nodes()}
        if name not in current:
            raise BackendError(f"simulator: no node {name}")
        if current[name] != "down":
            self.set_node_state(name, "ready" if schedulable else "cordoned")

    def set_node_state(self, name: str, state: str) -> NodeInfo:
        return _node_info(self._call("POST", f"/nodes/{quote(name, safe='')}/state", {"state": state}))

    def set_xid(self, node: str, gpu: int, xid: int) -> None:
        """Report XID ``xid`` as the last error of GPU ``gpu`` of ``node`` (0 clears it)."""
        self._call("POST", f"/nodes/{quote(node, safe='')}/xid", {"gpu": gpu, "xid": xid})

    def crash(self, name: str, exit_code: int = 137) -> JobStatus:
        """The job's program dies: by signal 9 (137), or exiting with ``exit_code``."""
        path = f"/jobs/{quote(name, safe='')}/crash"
        return _job_status(self._call("POST", path, {"exit_code": exit_code}))

    def slow_start(self, name: str, seconds: float) -> None:
        """Keep the job pending ``seconds`` (simulated); works before the job is submitted too."""
        self._call("POST", f"/jobs/{quote(name, safe='')}/slow_start", {"seconds": seconds})

    def set_load(self, name: str, rps: float) -> None:
        """The requests per second a simulated service receives from now on (its load series)."""
        self._call("POST", f"/jobs/{quote(name, safe='')}/load", {"rps": rps})

    def view(self, name: str) -> dict[str, Any]:
        return self._call("GET", f"/jobs/{quote(name, safe='')}")

    def metrics(self, node: str | None = None) -> str:
        path = "/metrics" + ("?" + urlencode({"node": node}) if node else "")
        return self._request("GET", path, None).decode()

    # -- transport

    def _call(self, method: str, path: str, body: Any = None, *, missing_ok: bool = False) -> Any:
        raw = self._request(method, path, body, missing_ok=missing_ok)
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise BackendError(f"simulator {method} {path}: answer is not JSON") from exc

    def _request(self, method: str, path: str, body: Any, *, missing_ok: bool = False) -> bytes | None:
        try:
            response = self._open(method, path, body)
        except BackendError as exc:
            if missing_ok and isinstance(exc, _Refused) and exc.status == 404:
                return None
            raise
        try:
            with response:
                return response.read()
        except (OSError, TimeoutError) as exc:
            raise BackendError(f"simulator at {self.base_url}: {method} {path} broke off: {exc}") from exc

    def _open(self, method: str, path: str, body: Any):
        """The open response; BackendError when there is none (_Refused: the simulator said no)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - the scheme is checked in __init__
            self.base_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            return urllib.request.urlopen(request, timeout=self.timeout)  # noqa: S310
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            raise _Refused(f"simulator {method} {path}: HTTP {exc.code} {detail}", exc.code) from exc
        except (OSError, TimeoutError) as exc:  # URLError, refused connections, resets, timeouts
            raise BackendError(f"simulator at {self.base_url} unreachable: {exc}") from exc


def _chunks(response, what: str) -> Iterator[bytes]:
    with response:
        while True:
            try:
                chunk = response.read(LOG_CHUNK_BYTES)
            except (OSError, TimeoutError) as exc:
                raise BackendError(f"{what} broke off: {exc}") from exc
            if not chunk:
                return
            yield chunk


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        return json.loads(exc.read()).get("detail", "")
    except (ValueError, AttributeError, OSError):
        return ""
    finally:
        exc.close()


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _job_status(d: Mapping[str, Any]) -> JobStatus:
    return JobStatus(
        name=d["name"],
        phase=d["phase"],
        started_at=_when(d.get("started_at")),
        finished_at=_when(d.get("finished_at")),
        exit_code=d.get("exit_code"),
        message=d.get("message") or "",
        nodes=tuple(d.get("nodes") or ()),
        node_failure=bool(d.get("node_failure")),
        time_source=TIME_SOURCE,
    )


def _node_info(d: Mapping[str, Any]) -> NodeInfo:
    return NodeInfo(
        name=d["name"],
        flavor_hint=d.get("flavor_hint", ""),
        gpus=int(d.get("gpus", 0)),
        state=d.get("state", "ready"),
        zone=d.get("zone", ""),
        spine=d.get("spine", ""),
        leaf=d.get("leaf", ""),
    )
