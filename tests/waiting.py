"""One way for tests to wait for something that happens in another process or thread.

The timeout is a hang guard, never a performance bound: on a loaded 2-core CI machine a worker
may need many times its usual time, and a test must not turn red for that (issue 18, item 19).
So the default is generous, and a test that wants "fast" belongs in bench/, not here.

What a test waits for must be durable: a state the thing cannot leave during the wait (a final
state, a running job that lasts 10⁶ simulated seconds), an event row (append-only), or "this
state or any later one". Waiting for a transient state (``admitted``) races with whatever moves
the job on, and a busy machine loses that race.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 180.0  # s


def wait_until(
    check: Callable[[], T],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = 0.1,
    retry_on: type[BaseException] | tuple[type[BaseException], ...] = (),
    about: Callable[[], str] | None = None,
) -> T:
    """Call ``check`` until it returns something truthy, and return that value.

    ``retry_on``: exceptions that mean "not yet" (a service being restarted); any other is a
    failure at once. ``about`` describes the state when the guard fires."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except retry_on:
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f"\n{about()}" if about else ""
            raise AssertionError(f"gave up after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)


def settle(cluster, job, states: set[str], *, timeout: float = TIMEOUT):
    """Sync ``cluster`` (a Cluster or its id) with its backend until ``job`` is in one of
    ``states``; the job, refreshed. Wait only for states the job stays in: a final state, or
    ``running`` for a job that lasts far longer than any wait (10⁶ simulated seconds)."""
    from jobs.clusters import dispatch

    cluster_id = getattr(cluster, "pk", cluster)

    def reached() -> bool:
        dispatch.sync_cluster(cluster_id)
        job.refresh_from_db()
        return job.state in states

    wait_until(
        reached,
        f"job {job.pk} to be {' or '.join(sorted(states))}",
        timeout=timeout,
        interval=0.05,
        about=lambda: f"it is {job.state}",
    )
    return job
