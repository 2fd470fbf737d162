"""Extension points through which the apps above ``jobs`` (``jobs.clusters``, ``jobs.native``,
``jobs.whatif``, ``billing``) take part in its pages without ``jobs`` importing them.

``job_page_panels``: callables ``panel(job, user) -> dict`` whose dicts the job page merges into
its context (``jobs.clusters`` adds the Log, Environment and Access panels in
``ClustersConfig.ready``).
"""

from collections.abc import Callable
from typing import Any

job_page_panels: list[Callable[[Any, Any], dict]] = []


def job_page_context(job, user) -> dict:
    context: dict = {}
    for panel in job_page_panels:
        context.update(panel(job, user))
    return context
