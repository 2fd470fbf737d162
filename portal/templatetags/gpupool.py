from decimal import Decimal

from django import template

from portal.texts import render

register = template.Library()


@register.filter
def stored_text(value) -> str:
    """A stored message (``portal.texts``) in the page's language; plain text as it is."""
    return render(value)


@register.filter
def qty(value, none_label: str = "—") -> str:
    """A quantity without trailing zeros (8, 0.5), or ``none_label`` for "no limit"."""
    if value is None or value == "":
        return none_label
    if isinstance(value, Decimal):
        return f"{value.normalize():f}"
    return str(value)
