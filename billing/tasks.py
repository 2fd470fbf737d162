"""Thin Celery tasks: safe to run twice and to kill (the meter's rows and the budget alerts have
natural keys)."""

from dataclasses import asdict

from celery import shared_task

from .meter import usage_meter


@shared_task(name="billing.meter", ignore_result=True)
def meter() -> dict | None:
    # A plain run: facts recorded since the last run are found and corrected whatever their time.
    # wait=False: a run already in progress meters the same window; this one would only queue.
    report = usage_meter(wait=False)
    if report is not None and (report.rows or report.reversed):
        budget_alerts.delay()  # new ledger rows may cross a budget threshold
    return None if report is None else asdict(report)


@shared_task(name="billing.budget_alerts", ignore_result=True)
def budget_alerts() -> int:
    """Alert budget owners at 80 % and 100 % of this month's budget (once per threshold)."""
    from .budgets import budget_alerts_run

    return len(budget_alerts_run())


@shared_task(name="billing.what_if", ignore_result=True)
def what_if(run_id: int) -> str:
    """Replay a month twice for a what-if (``billing.whatif.execute``: claims the run first, so
    a second delivery of the same id does nothing)."""
    from .whatif import execute

    return execute(run_id)


@shared_task(name="billing.close_month", ignore_result=True)
def close_month(run_id: int) -> str:
    """Close the month of a ``MonthCloseRun`` asked for on the Statements page
    (``billing.closing.month_close_execute``: claims the run first, so a second delivery of the
    same id does nothing; the close itself is idempotent)."""
    from .closing import month_close_execute

    return month_close_execute(run_id)
