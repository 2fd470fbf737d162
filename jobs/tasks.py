"""Thin Celery tasks of the job life cycle: the scheduling cycle, the autoscaler's tick and the start
estimates. The backends' tasks live in ``jobs.clusters.tasks``, native imports and syncs in
``jobs.native.tasks``, the advisor's in ``jobs.whatif.tasks`` (task names unchanged: ``jobs.…``)."""

from celery import shared_task

from jobs.scheduling.cycle import schedule_once
from jobs.scheduling.start_estimates import start_estimates_refresh
from portal.enqueue import enqueue


@shared_task(name="jobs.schedule_cycle", ignore_result=True)
def schedule_cycle() -> None:
    # wait=False: if a cycle is running it will see whatever triggered this one.
    report = schedule_once(wait=False)
    if report is not None and (report.admitted or report.preempted):
        # By name (jobs.clusters.tasks): tasks are leaves, and the backends' work sits above jobs.
        enqueue("jobs.backend_work")


@shared_task(name="jobs.autoscale", ignore_result=True)
def autoscale() -> int:
    """Inference jobs follow their load (jobs.scheduling.autoscale); safe to run twice: a second pass sees
    the first one's change inside the cool-down."""
    from jobs.scheduling.autoscale import autoscale_tick

    return autoscale_tick()


@shared_task(name="jobs.estimate_starts", ignore_result=True)
def estimate_starts() -> None:
    """Estimated starts of the waiting jobs (issue 24), off the request path: idempotent (a
    second run overwrites the cache; one running already makes it return at once)."""
    start_estimates_refresh()


@shared_task(name="jobs.idle_policy", ignore_result=True)
def idle_policy() -> dict[str, int]:
    """The idle policy's pass (jobs.idle_service): warn idle jobs, then stop or make them preemptible.
    Safe to run twice or at once in two workers: every step is a conditional update."""
    from jobs.idle_service import run_idle_policy

    return run_idle_policy()
