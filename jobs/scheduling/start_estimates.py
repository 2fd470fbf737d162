"""Estimated start times of waiting jobs (issue 24): ``jobs.scheduler.forecast`` over the cycle's snapshot,
computed off the request path and cached; pages, the API and the CLI read the cache.

``start_estimates_refresh`` (the beat task ``jobs.estimate_starts``) runs the forecast for the
whole queue and stores the answers in ONE cache key, packed like the queue ranking (a 30,000-job
dict would cost milliseconds to unpickle on every queue page). Readers get, per job::

    {"estimated_start": datetime | None, "unknown_reason": str | None, "computed_at": datetime | None}

``unknown_reason`` is one of ``jobs.scheduler.forecast.UNKNOWN`` or "not_computed" (no forecast has seen
the job yet: submitted since the last one, or none ran). A job pending approval is "approval"
whatever the cache says: it is not in the queue yet.
"""

from __future__ import annotations

import logging
import math
import time
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from uuid import uuid4

from django.core.cache import cache
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from redis.exceptions import RedisError

from jobs.models import Job, JobKind
from jobs.scheduler.engine.model import QueuedJob, Snapshot
from jobs.scheduler.footprint import Request
from jobs.scheduler.forecast import DEFAULT_HORIZON_SECONDS, DEFAULT_MAX_CYCLES, UNKNOWN, forecast
from jobs.scheduling.cache_keys import STARTS_KEY
from jobs.scheduling.settings import engine_flags
from jobs.scheduling.snapshot import build_forecast_input
from jobs.states import JobState

log = logging.getLogger(__name__)

STARTS_TTL = 600  # an estimate older than this is not shown ("not_computed")
STARTS_LOCK_KEY = "starts:running"
FORM_MAX_CYCLES = 100  # the submission form's estimate: a smaller bound, it runs per request
FORM_SNAPSHOT_SECONDS = 15  # the form's estimates reuse one snapshot this long (per process)
# Per process: each keeps its own snapshot, so their keys must not overwrite one another's.
_FORM_SNAPSHOT_KEY = f"starts:form-snapshot:{uuid4().hex}"
_form_input: tuple[str, Snapshot, dict[str, QueuedJob], dict] | None = None  # (its key's token, …, flags)
REASONS = (*UNKNOWN, "not_computed")
UNKNOWN_LABELS = {
    "unlimited": _("it waits for jobs without a maximum runtime"),
    "beyond_horizon": _("not within the next 7 days"),
    "budget": _("held by a spent budget until approved"),
    "approval": _("it waits for approval"),
    "not_computed": _("not estimated yet"),
    # DESIGN §17: held back before the engine, so the forecast never places it (explain says why).
    "dependency": _("it waits for another job to end"),
    "array_cap": _("it waits for a task of its array to end"),
}


@dataclass(frozen=True)
class StartEstimate:
    estimated_start: datetime | None
    unknown_reason: str | None  # None when there is an estimate
    computed_at: datetime | None
    # The start is the reservation the last cycle holds for the job (``with_reservation``),
    # not the forecast's.
    reserved: bool = False

    def as_dict(self) -> dict:
        """The API's form; ``unknown_text`` in the request's language."""
        return {
            "estimated_start": self.estimated_start.isoformat() if self.estimated_start else None,
            "unknown_reason": self.unknown_reason,
            "unknown_text": str(UNKNOWN_LABELS.get(self.unknown_reason, "")) if self.unknown_reason else "",
            "computed_at": self.computed_at.isoformat() if self.computed_at else None,
        }


def start_estimates_refresh(now: datetime | None = None) -> int | None:
    """Forecast the queue and cache the estimates; the number of jobs estimated, or None when
    another refresh is running (safe to run twice: the later one simply overwrites)."""
    if not cache.add(STARTS_LOCK_KEY, 1, timeout=STARTS_TTL):
        return None
    try:
        now = now or timezone.now()
        t0 = time.perf_counter()
        snapshot, requeue = build_forecast_input(now)
        found = forecast(snapshot, requeue=requeue, horizon_seconds=DEFAULT_HORIZON_SECONDS,
                         max_cycles=DEFAULT_MAX_CYCLES, **engine_flags())
        ids, starts, codes = array("q"), array("d"), array("b")
        for jid, at in found.starts.items():
            ids.append(int(jid))
            starts.append(at.timestamp())
            codes.append(-1)
        for jid, why in found.unknown.items():
            ids.append(int(jid))
            starts.append(math.nan)
            codes.append(UNKNOWN.index(why))
        cache.set(STARTS_KEY, {"at": now.isoformat(), "ids": ids.tobytes(), "starts": starts.tobytes(),
                               "codes": codes.tobytes()}, timeout=STARTS_TTL)
        log.info("start estimates: %d jobs, %d cycles, %.0f ms", len(ids), found.cycles,
                 (time.perf_counter() - t0) * 1e3)
        return len(ids)
    finally:
        cache.delete(STARTS_LOCK_KEY)


def cached_start_estimates(jobs: list[Job]) -> dict[int, StartEstimate]:
    """The estimates of ``jobs`` (waiting ones; others are left out), one cache read."""
    return cached_start_estimates_of([(j.pk, j.state, j.kind) for j in jobs])


def cached_start_estimates_of(jobs: Iterable[tuple[int, str, str]]) -> dict[int, StartEstimate]:
    """``cached_start_estimates`` for jobs given as ``(id, state, kind)`` — the job lists of the
    API read rows, not instances: one cache read for the whole page, no query."""
    waiting = [(pk, state) for pk, state, kind in jobs
               if state in (JobState.QUEUED, JobState.PENDING_APPROVAL) and kind != JobKind.EXTERNAL]
    if not waiting:
        return {}
    cached = _cache_get(STARTS_KEY) or {}
    at = datetime.fromisoformat(cached["at"]) if cached.get("at") else None
    ids, starts, codes = array("q"), array("d"), array("b")
    ids.frombytes(cached.get("ids", b""))
    starts.frombytes(cached.get("starts", b""))
    codes.frombytes(cached.get("codes", b""))
    wanted = {pk for pk, state in waiting if state == JobState.QUEUED}
    found = {}
    if wanted:
        for k, jid in enumerate(ids):
            if jid in wanted:
                found[jid] = k
    out = {}
    for pk, state in waiting:
        if state == JobState.PENDING_APPROVAL:
            out[pk] = StartEstimate(None, "approval", at)
            continue
        k = found.get(pk)
        if k is None:
            out[pk] = StartEstimate(None, "not_computed", at)
        elif codes[k] < 0:
            out[pk] = StartEstimate(datetime.fromtimestamp(starts[k], UTC), None, at)
        else:
            out[pk] = StartEstimate(None, UNKNOWN[codes[k]], at)
    return out


def start_estimate(job: Job) -> StartEstimate | None:
    """One job's estimate (None: the job is not waiting)."""
    return cached_start_estimates([job]).get(job.pk)


def with_reservation(
    estimate: StartEstimate | None, explain: dict | None, job_id: int
) -> StartEstimate | None:
    """The estimate, or — when it has no time — the reservation the last scheduling cycle holds
    for this very job (issue 32 item 7). The cycle reserves GPUs for the head job of a level at
    the earliest instant it fits; the forecast runs less often (beat) and may not have seen the
    job yet ("not estimated yet"), or stopped at its bound. A page showing "reserved · earliest
    start 14:00" above "Estimated start: unknown" contradicts itself: the reservation is a start
    the engine holds now, at the latest. A forecast time, when there is one, is kept."""
    if estimate is None or estimate.estimated_start is not None or not explain:
        return estimate
    if explain.get("reason") in ("dependency", "array_cap"):  # held back: no forecast can place it
        return StartEstimate(None, explain["reason"], estimate.computed_at)
    reservation = explain.get("reservation") or {}
    at = reservation.get("earliest_start")
    if reservation.get("job") != job_id or not at:
        return estimate
    if isinstance(at, str):
        at = datetime.fromisoformat(at)
    computed = explain.get("computed_at")
    computed = datetime.fromisoformat(computed) if isinstance(computed, str) else estimate.computed_at
    return StartEstimate(at, None, computed, reserved=True)


def _form_forecast_input(now: datetime) -> tuple[Snapshot, dict[str, QueuedJob], dict]:
    """The snapshot the form's estimates forecast from, with the engine settings read with it:
    built at most once every FORM_SNAPSHOT_SECONDS per process, as someone filling in the form
    asks on every change.

    Sharing it is safe: a snapshot is frozen (frozen dataclasses and tuples; the engine builds its
    own state from it and only reads ``limits``), holds no answer for anybody (only the
    hypothetical job's estimate is shown), and is shifted to the request's ``now`` — it is the
    world up to FORM_SNAPSHOT_SECONDS older, which an estimate that already assumes "nothing
    changes" and the queue's own estimates (a minute old) tolerate. Its age is bounded by a key
    in the shared cache with that timeout: an expired (or cleared) key means build afresh."""
    global _form_input
    held = _form_input
    if held is not None and _cache_get(_FORM_SNAPSHOT_KEY) == held[0]:
        return replace(held[1], now=now), held[2], held[3]
    snapshot, requeue = build_forecast_input(now)
    flags = engine_flags()
    token = uuid4().hex
    try:
        cache.set(_FORM_SNAPSHOT_KEY, token, timeout=FORM_SNAPSHOT_SECONDS)
    except RedisError:
        return snapshot, requeue, flags  # no shared clock to bound its age: not kept
    _form_input = (token, snapshot, requeue, flags)
    return snapshot, requeue, flags


def _cache_get(key: str):
    """A cache read that a Redis outage turns into "nothing cached": the estimates are then
    "not computed yet" and the job pages and API still answer (the portal takes and lists jobs
    whatever the broker does — tests/faults/test_redis_restart.py)."""
    try:
        return cache.get(key)
    except RedisError:
        log.warning("start estimates: the cache is unreachable", exc_info=True)
        return None


def start_estimate_new(*, project_id: int, flavor: str, workers: int, min_workers: int | None,
                       gpus_per_worker: int, gpu_milli: int | None, priority: int, preemptible: bool,
                       max_runtime_seconds: int | None, needs_approval: bool,
                       request: Request | None = None, now: datetime | None = None) -> StartEstimate:
    """When a job of this shape would start if it were submitted now: the forecast of the queue
    with it added (submitted ``now``). Bounded: one snapshot and at most FORM_MAX_CYCLES cycles.

    ``request``: one worker's CPU, memory and disk as the engine gets them once it is queued
    (``jobs.requests.queued_request``; None: it asked none and holds its GPUs' share) — a worker
    asking more than its share cannot start on a node whose free GPUs its request would strand."""
    now = now or timezone.now()
    if needs_approval:
        return StartEstimate(None, "approval", now)
    request = request or Request()
    job = QueuedJob("0", f"p{project_id}", flavor, now, workers, min_workers, gpus_per_worker, gpu_milli,
                    priority, preemptible, max_runtime_seconds, False, cpu_millicores=request.cpu_millicores,
                    memory_mib=request.memory_mib, local_disk_gib=request.local_disk_gib)
    snapshot, requeue, flags = _form_forecast_input(now)
    found = forecast(snapshot, extra=[job], requeue=requeue, max_cycles=FORM_MAX_CYCLES, **flags)
    if "0" in found.starts:
        return StartEstimate(found.starts["0"], None, now)
    return StartEstimate(None, found.unknown.get("0", "beyond_horizon"), now)
