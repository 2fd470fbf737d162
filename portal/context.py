from django.conf import settings

from .selectors import scope_for


def site(request):
    user = getattr(request, "user", None)
    scope = scope_for(user) if user is not None and user.is_authenticated else None
    return {"site_time_zone": settings.TIME_ZONE, "scope": scope}
