from decimal import Decimal

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from portal.admin_site import PlatformModelAdmin

from .baselines import baseline_check
from .models import (
    Cluster,
    Flavor,
    Loan,
    Node,
    QuotaNode,
    QuotaWindow,
    Rack,
    SlurmSyncRun,
    SoftwareBaseline,
)
from .selectors import measured_throughput
from .services import card_fraction_from_input


class FlavorAdminForm(forms.ModelForm):
    """The card fraction is typed as one value ("1/7", "3/7", "1") and stored exactly as
    numerator / denominator (``card_fraction`` itself is derived by the database)."""

    fraction = forms.CharField(
        label=_("card fraction"),
        initial="1",
        max_length=20,
        help_text=_("Share of one physical card: 1 for a whole card, 1/7 for an A100 1g.10gb MIG slice."),
    )

    class Meta:
        model = Flavor
        fields = [
            "name", "vendor", "model", "memory_mib", "fraction", "mig_profile", "shareable", "premium",
            "k8s_resource_name", "slurm_gres", "pool_overcommit_ratio", "active",
            # The profile (DESIGN §14): Flavor.clean() checks it (quotas.profiles).
            "sharing_mode", "relative_throughput", "relative_throughput_source", "relative_throughput_date",
            "operator_coverage", "board_watts",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial["fraction"] = self.instance.fraction_label
        # Left empty: the reference card's 1.0 (the model's default), as before profiles existed.
        self.fields["relative_throughput"].required = False

    def clean_relative_throughput(self):
        value = self.cleaned_data.get("relative_throughput")
        return Decimal(1) if value is None else value

    def clean_fraction(self):
        try:
            value = card_fraction_from_input(self.cleaned_data["fraction"])
        except ValidationError as exc:
            raise ValidationError(exc.message_dict["card_fraction"]) from None
        self.instance.fraction_numerator = value.numerator
        self.instance.fraction_denominator = value.denominator
        return value


@admin.register(Flavor)
class FlavorAdmin(PlatformModelAdmin):
    form = FlavorAdminForm
    list_display = [
        "name", "vendor", "model", "fraction_label", "shareable", "k8s_resource_name", "relative_throughput",
    ]
    readonly_fields = ["measured_throughput"]

    @admin.display(description=_("card fraction"))
    def fraction_label(self, obj):
        return obj.fraction_label

    @admin.display(description=_("measured throughput"))
    def measured_throughput(self, obj):
        """Next to the declared value: what job history says (jobs.throughput)."""
        found = measured_throughput([obj.pk]).get(obj.pk) if obj.pk else None
        if found is None:
            return _("no template has run on this flavor and the reference flavor")
        return _("%(ratio)s (median of %(templates)d templates, %(runs)d runs)") % {
            "ratio": found.ratio,
            "templates": found.templates,
            "runs": found.runs,
        }


@admin.register(Cluster)
class ClusterAdmin(PlatformModelAdmin):
    list_display = ["name", "kind", "active"]


@admin.register(Node)
class NodeAdmin(PlatformModelAdmin):
    list_display = ["name", "cluster", "flavor", "gpu_count", "state", "hold", "zone", "spine", "leaf",
                    "rack"]
    list_filter = ["cluster", "flavor", "state", "zone"]
    # Cordon, drain and return to service are the node map's (jobs.clusters.nodes): they reach the backend
    # and leave a NodeEvent; a hold edited here would do neither. Measured power is the metrics poll's.
    readonly_fields = ["hold", "measured_watts", "measured_at"]


@admin.register(Rack)
class RackAdmin(PlatformModelAdmin):
    """Racks come from the inventory (a rack label or feature); the admin sets their power cap.
    Lowering it stops new placements there at the next cycle; nothing running is stopped."""

    list_display = ["name", "cluster", "power_cap_kw"]
    list_filter = ["cluster"]


class SoftwareBaselineAdminForm(forms.ModelForm):
    """The same checks as the portal and the API (quotas.baselines): version shapes, one of the
    two versions at least, one baseline per flavor and cluster (or every cluster)."""

    class Meta:
        model = SoftwareBaseline
        fields = ["flavor", "cluster", "driver_version", "cuda_version"]

    def clean(self):
        data = super().clean()
        if data.get("flavor") is not None:
            try:
                baseline_check(
                    flavor=data["flavor"], cluster=data.get("cluster"),
                    driver_version=data.get("driver_version", ""), cuda_version=data.get("cuda_version", ""),
                    instance=self.instance if self.instance.pk else None,
                )
            except ValidationError as exc:
                for field, errors in exc.error_dict.items():
                    self.add_error(field, errors)
        return data


@admin.register(SoftwareBaseline)
class SoftwareBaselineAdmin(PlatformModelAdmin):
    form = SoftwareBaselineAdminForm
    list_display = ["flavor", "cluster", "driver_version", "cuda_version"]
    list_filter = ["flavor", "cluster"]


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


@admin.register(SlurmSyncRun)
class SlurmSyncRunAdmin(PlatformModelAdmin):
    """The record of the Slurm accounts sync: read-only (the sync writes it)."""

    list_display = ["cluster", "started_at", "finished_at", "dry_run", "changes", "has_error"]
    list_filter = ["cluster", "dry_run"]
    readonly_fields = [
        "cluster", "started_at", "finished_at", "dry_run", "commands", "drift", "notes", "error",
    ]

    @admin.display(description=_("changes"))
    def changes(self, obj):
        return len(obj.drift)

    @admin.display(description=_("error"), boolean=True)
    def has_error(self, obj):
        return bool(obj.error)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
