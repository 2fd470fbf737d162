"""The dashboard composes what every app shows about the signed-in user's world. Like the
URL configuration, it is allowed to import every app."""

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from jobs import charts
from jobs import selectors as job_selectors
from jobs.stranding import stranded_by_flavor
from portal.models import Role
from portal.selectors import scope_for, visible_departments, visible_projects
from quotas import selectors as quota_selectors
from quotas.models import Flavor

RECENT_JOBS = 8


@login_required
def dashboard(request):
    user = request.user
    capacity = quota_selectors.capacity_by_flavor()
    held = job_selectors.holding_usage()  # one aggregate for the pool and the quota rows
    in_use = job_selectors.gpus_in_use_by_flavor(held)
    flavors = Flavor.objects.filter(active=True).order_by("name")
    stranded = stranded_by_flavor()
    pool = [(f, capacity.get(f.pk, 0), in_use.get(f.pk, 0), stranded.get(f.pk, 0)) for f in flavors]
    return render(
        request,
        "portal/dashboard.html",
        {
            "role_labels": [Role(role).label for role in sorted(scope_for(user).roles)],
            "departments": visible_departments(user).select_related("parent").order_by("code"),
            "projects": visible_projects(user).select_related("department").order_by("code"),
            "quota_rows": job_selectors.quota_usage_rows(user, held),
            "pool": pool,
            "pool_chart": charts.pool_usage([(f.name, float(used), float(cap)) for f, cap, used, _s in pool])
            if pool
            else None,
            "my_jobs": job_selectors.visible_jobs(user)
            .filter(submitted_by=user)
            .select_related("cluster")[:RECENT_JOBS],
            "counts": job_selectors.job_state_counts(user),
            "can_submit": job_selectors.submittable_projects(user).exists(),
        },
    )
