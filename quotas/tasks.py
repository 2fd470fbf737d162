"""Thin Celery tasks of the quota tree."""

from celery import shared_task


@shared_task(name="quotas.return_loans", ignore_result=True)
def return_loans() -> int:
    """Mark loans past their end as returned (idempotent conditional update)."""
    from .approvals import loans_return_expired

    return loans_return_expired()
