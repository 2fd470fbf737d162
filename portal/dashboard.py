"""The dashboard composes what every app shows about the signed-in user's world. Like the
URL configuration, it is allowed to import every app."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from portal.models import Role
from portal.selectors import scope_for, visible_departments, visible_projects
from quotas import selectors as quota_selectors
from quotas.models import Flavor


@login_required
def dashboard(request):
    user = request.user
    nodes = list(quota_selectors.visible_quota_nodes(user).order_by("flavor__name"))
    limits = quota_selectors.effective_limits_map(nodes, timezone.now())
    capacity = quota_selectors.capacity_by_flavor()
    return render(
        request,
        "portal/dashboard.html",
        {
            "role_labels": [Role(role).label for role in sorted(scope_for(user).roles)],
            "departments": visible_departments(user).select_related("parent").order_by("code"),
            "projects": visible_projects(user).select_related("department").order_by("code"),
            "quota_rows": [(n, limits[n.pk]) for n in nodes],
            "pool": [(f, capacity.get(f.pk, 0)) for f in Flavor.objects.filter(active=True)],
        },
    )
