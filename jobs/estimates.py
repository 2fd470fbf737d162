"""Money in the submission form's cost estimate. Prices live in ``billing``, which ``jobs`` may
not import; billing registers a function here (e.g. in its ``AppConfig.ready()``), like the
budget checks of ``jobs.approvals``. Until one is registered the form shows card-hours only and
claims nothing about money.

A price list is ``pricer(flavors, at) -> {flavor id: price}`` where ``price(card_hours) -> (amount,
currency)``: the standard rates of many flavors, looked up at once and each applied to many
quantities (the approval inbox estimates a page of requests with one look-up for all its flavors);
a flavor without a rate is left out.

An estimator is ``estimate(flavor, card_hours, at) -> (amount, currency) | None``: the price of
``card_hours`` whole-card hours of ``flavor`` at the standard rate in force at ``at``, or None
when the flavor has no rate."""

from __future__ import annotations

from collections.abc import Callable, Collection
from datetime import datetime
from decimal import Decimal

from quotas.models import Flavor

Estimator = Callable[[Flavor, Decimal, datetime], tuple[Decimal, str] | None]
cost_estimators: list[Estimator] = []


def _first(providers: list[Callable], *args):
    """The first registered answer that is not None (billing registers one of each kind)."""
    for provider in providers:
        found = provider(*args)
        if found is not None:
            return found
    return None


def cost_estimate(flavor: Flavor, card_hours: Decimal, at: datetime) -> tuple[Decimal, str] | None:
    return _first(cost_estimators, flavor, card_hours, at)


Price = Callable[[Decimal], tuple[Decimal, str]]
PriceList = Callable[[Collection[Flavor], datetime], dict[int, Price] | None]
price_lists: list[PriceList] = []


def cost_pricers(flavors: Collection[Flavor], at: datetime) -> dict[int, Price]:
    """The standard rate of each of ``flavors`` at ``at`` as a function of card-hours (flavors
    without one are left out; nothing registered: an empty dict)."""
    return _first(price_lists, flavors, at) or {}


# The job page's cost so far (issue 24): billing registers ``job_cost(job, now) -> JobCost | None``
# (an object with ``amount``, ``metered``, ``tail``, ``currency``, ``metered_through`` and
# ``unpriced``). Until one is registered the page shows no money.
JobCostProvider = Callable[[object, datetime], object | None]
job_cost_providers: list[JobCostProvider] = []


def job_cost(job, now: datetime):
    return _first(job_cost_providers, job, now)
