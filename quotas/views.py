from django.contrib.auth.decorators import login_required
from django.db.models import Count, Sum
from django.shortcuts import render

from .models import Node


@login_required
def inventory(request):
    summary = (
        Node.objects.values("cluster__name", "flavor__name", "zone", "spine", "state")
        .annotate(nodes=Count("id"), gpus=Sum("gpu_count"))
        .order_by("cluster__name", "flavor__name", "zone", "spine", "state")
    )
    return render(request, "quotas/inventory.html", {"summary": summary})
