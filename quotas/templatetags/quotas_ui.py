"""Quota pages: which request buttons a user is offered (the rules live in ``quotas.forms``)."""

from django import template

from portal.selectors import scope_for
from quotas import baselines
from quotas.forms import can_request_any_quota, can_request_loan, can_request_quota

register = template.Library()


@register.simple_tag(takes_context=True)
def may_request_quota(context, node) -> bool:
    request = context.get("request")
    return request is not None and can_request_quota(scope_for(request.user), node)


@register.simple_tag(takes_context=True)
def may_request_loan(context) -> bool:
    request = context.get("request")
    return request is not None and can_request_loan(scope_for(request.user))


@register.simple_tag(takes_context=True)
def may_request_any_quota(context) -> bool:
    request = context.get("request")
    return request is not None and can_request_any_quota(scope_for(request.user))


@register.filter
def drift_label(state: str) -> str:
    """A node's state against its software baseline, in the reader's language."""
    return baselines.drift_label(state)
