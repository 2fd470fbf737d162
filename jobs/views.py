from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from quotas.models import Flavor
from quotas.selectors import healthy_capacity

from . import selectors


@login_required
def quota_tree(request):
    """The quota tree of one flavor with usage: quota, effective quota, used (in-quota and
    borrowed) and lent per visible node."""
    flavors = list(Flavor.objects.filter(active=True))
    wanted = request.GET.get("flavor")
    chosen = next((f for f in flavors if f.name == wanted), flavors[0] if flavors else None)
    rows = selectors.quota_usage(request.user, chosen.pk) if chosen else []
    return render(
        request,
        "quotas/tree.html",
        {
            "flavors": flavors,
            "flavor": chosen,
            "rows": rows,
            "capacity": healthy_capacity(chosen.pk) if chosen else 0,
        },
    )
