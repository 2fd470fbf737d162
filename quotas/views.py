from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.shortcuts import render
from django.utils import timezone

from . import selectors
from .models import Flavor, Node


@login_required
def quota_tree(request):
    flavors = list(Flavor.objects.filter(active=True))
    chosen = next(
        (f for f in flavors if f.name == request.GET.get("flavor")), flavors[0] if flavors else None
    )
    rows = selectors.quota_tree(request.user, chosen.pk, timezone.now()) if chosen else []
    return render(
        request,
        "quotas/tree.html",
        {
            "flavors": flavors,
            "flavor": chosen,
            "rows": rows,
            "capacity": selectors.healthy_capacity(chosen.pk) if chosen else 0,
        },
    )


@login_required
def inventory(request):
    summary = (
        Node.objects.values("cluster__name", "flavor__name", "zone", "spine", "state")
        .annotate(nodes=Count("id"), gpus=Sum("gpu_count"))
        .order_by("cluster__name", "flavor__name", "zone", "spine", "state")
    )
    return render(request, "quotas/inventory.html", {"summary": summary})
