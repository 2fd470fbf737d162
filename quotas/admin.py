from django.contrib import admin

from portal.admin_site import PlatformModelAdmin

from .models import Cluster, Flavor, Loan, Node, QuotaNode, QuotaWindow


@admin.register(Flavor)
class FlavorAdmin(PlatformModelAdmin):
    list_display = ["name", "vendor", "model", "card_fraction", "shareable", "k8s_resource_name"]


@admin.register(Cluster)
class ClusterAdmin(PlatformModelAdmin):
    list_display = ["name", "kind", "active"]


@admin.register(Node)
class NodeAdmin(PlatformModelAdmin):
    list_display = ["name", "cluster", "flavor", "gpu_count", "state", "zone", "spine", "leaf"]
    list_filter = ["cluster", "flavor", "state", "zone"]


@admin.register(QuotaNode)
class QuotaNodeAdmin(PlatformModelAdmin):
    # Quota edits go through the API and UI, where the tree is validated; here it is read-only.
    list_display = ["__str__", "quota", "borrow_limit", "lend_limit", "overcommit_ratio"]
    list_filter = ["flavor"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Loan)
class LoanAdmin(PlatformModelAdmin):
    list_display = ["lender", "borrower", "amount", "starts_at", "ends_at", "state"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(QuotaWindow)
class QuotaWindowAdmin(PlatformModelAdmin):
    list_display = ["quota_node", "name", "weekdays", "start_time", "end_time", "quota", "lend_limit"]
