"""Thin Celery tasks of the policy advisor (issue 25; ``jobs.whatif.services``); names unchanged."""

from celery import shared_task


@shared_task(name="jobs.advisor_candidate", ignore_result=True)
def advisor_candidate(candidate_id: int) -> str:
    """One replay of one candidate; a second delivery (or a finished candidate) is skipped."""
    from jobs.whatif.services import advisor_candidate_run

    return advisor_candidate_run(candidate_id)


@shared_task(name="jobs.advisor_advance", ignore_result=True)
def advisor_advance(search_id: int) -> str:
    from jobs.whatif.services import advisor_search_advance

    return advisor_search_advance(search_id)


@shared_task(name="jobs.advisor_tick", ignore_result=True)
def advisor_tick() -> int:
    """Re-queue candidates whose worker died, re-send lost messages, advance running searches."""
    from jobs.whatif.services import advisor_reap

    return advisor_reap()
