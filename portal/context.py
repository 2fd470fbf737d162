from django.conf import settings
from django.db.models import F, Func, Subquery
from django.db.models.functions import Coalesce
from django.utils.functional import SimpleLazyObject

from .approvals.selectors import inbox_steps
from .models import User
from .notifications import unread_notifications
from .selectors import scope_for


def _count(queryset) -> Coalesce:
    # COUNT as a scalar subquery (no GROUP BY), so both counters come back in one query; a
    # queryset that can match nothing (no admin role) compiles to NULL, hence the 0.
    return Coalesce(Subquery(queryset.order_by().annotate(n=Func(F("id"), function="COUNT")).values("n")), 0)


def nav_counts(user: User) -> dict:
    """The header's counters: open approval steps waiting for the user, unread notifications.
    One query for both."""
    row = (
        User.objects.filter(pk=user.pk)
        .annotate(inbox=_count(inbox_steps(user)), unread=_count(unread_notifications(user)))
        .values("inbox", "unread")
        .first()
    )
    return row or {"inbox": 0, "unread": 0}


def site(request):
    user = getattr(request, "user", None)
    signed_in = user is not None and user.is_authenticated
    scope = scope_for(user) if signed_in else None
    # Lazy: pages without the header (htmx fragments) never run the query.
    nav = SimpleLazyObject(lambda: nav_counts(user)) if signed_in else None
    return {"site_time_zone": settings.TIME_ZONE, "scope": scope, "nav": nav}
