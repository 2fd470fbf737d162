"""Retries and the start timeout (DESIGN §17; docs/operator-guide.md "Retries and start timeout").

A failed run with retries left goes back to the queue (running → queued, never through the
terminal ``failed``) and waits out its backoff: it is not admitted before ``Job.not_before``. An
admitted job its backend has not started within the start timeout is requeued the same way
(``jobs.clusters.start_timeout``). Requeues after a preemption or a node failure are not retries:
they never come here. The policy (the most retries a job may ask, the final exit codes, the
timeout) is the centre's ``RetryPolicy`` row."""

from __future__ import annotations

from datetime import datetime, timedelta

from jobs.retry_models import RetryPolicy

BACKOFF_BASE_SECONDS = 60
BACKOFF_CAP_SECONDS = 3600


def backoff(attempt: int) -> timedelta:
    """The wait before the ``attempt``-th retry (1, 2, …): 60 s × 2^(attempt−1), at most an hour."""
    if attempt < 1:
        raise ValueError("attempts count from 1")
    # 2^6 minutes already passes the cap: no huge powers for a large attempt number.
    return timedelta(seconds=min(BACKOFF_BASE_SECONDS * 2 ** min(attempt - 1, 6), BACKOFF_CAP_SECONDS))


def retry_policy() -> RetryPolicy:
    """The centre's row (made with the defaults the first time it is read)."""
    return RetryPolicy.objects.get_or_create(pk=1)[0]


def retryable(job, exit_code: int | None, policy: RetryPolicy) -> bool:
    """Whether a failed run of ``job`` is retried: it has retries left and its exit code is not one
    the centre marks final. No exit code (killed, lost container): not final."""
    if job.retries >= job.max_retries:
        return False
    return exit_code is None or exit_code not in (policy.final_exit_codes or ())


def start_timeout(cluster, policy: RetryPolicy) -> timedelta:
    """The cluster's own ``start_timeout_seconds`` (its configuration) when it sets one, else the
    centre's: an image pull from a slow registry may need longer on one cluster than another."""
    own = (cluster.config or {}).get("start_timeout_seconds") if cluster is not None else None
    if isinstance(own, int) and not isinstance(own, bool) and own > 0:
        return timedelta(seconds=own)
    return timedelta(seconds=policy.start_timeout_seconds)


def waiting_out_backoff(job, now: datetime) -> bool:
    return job.not_before is not None and job.not_before > now
