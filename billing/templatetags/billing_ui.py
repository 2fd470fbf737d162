"""Billing's words on pages, as the chargeback file writes them."""

from django import template
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _

register = template.Library()

# What each tier of the chargeback file means (docs/billing.md "Exports"). The file's values are
# a contract finance imports; the pages show that value, explained (issue 32 item 9: the page
# said "In quota" where the file says ``standard``).
TIER_MEANS = {
    "standard": _("in quota"),
    "on_loan": _("on loan"),
    "reserved": _("reserved quota"),
}


@register.filter
def tier(value: str | None):
    """``standard`` → <code>standard</code> in quota; an empty tier (a manual line) → —."""
    if not value:
        return "—"
    return format_html('<code class="tier">{}</code> <small class="muted">{}</small>', value,
                       TIER_MEANS.get(value, ""))
