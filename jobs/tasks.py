"""Thin Celery tasks: take ids (or nothing), call a service, are safe to run twice."""

from celery import shared_task

from .scheduling import schedule_once


@shared_task(name="jobs.schedule_cycle", ignore_result=True)
def schedule_cycle() -> None:
    # wait=False: if a cycle is running it will see whatever triggered this one.
    schedule_once(wait=False)
