"""Billing in the Django admin (platform admins): rates can be added, never edited — a new price
is a new rate; the ledger, month closes and statements are read-only here."""

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError

from portal.admin_site import PlatformModelAdmin

from .models import MonthClose, Rate, Statement, StatementLine, UsageRecord
from .services import rate_validate


class RateForm(forms.ModelForm):
    class Meta:
        model = Rate
        fields = ["flavor", "tier", "resource", "price", "valid_from", "note"]

    def clean(self):
        data = super().clean()
        if not self.errors:
            try:
                rate_validate(
                    flavor=data["flavor"],
                    tier=data["tier"],
                    price=data["price"],
                    valid_from=data["valid_from"],
                    currency=settings.GPUPOOL["CURRENCY"],
                    resource=data.get("resource") or "card",
                )
            except ValidationError as error:
                for field, messages in error.message_dict.items():
                    self.add_error(field if field in self.fields else None, messages)
        return data


@admin.register(Rate)
class RateAdmin(PlatformModelAdmin):
    form = RateForm
    list_display = ["flavor", "tier", "resource", "price", "currency", "valid_from", "note"]
    list_filter = ["flavor", "tier", "resource"]

    def has_change_permission(self, request, obj=None):
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        obj.created_by = request.user
        obj.currency = settings.GPUPOOL["CURRENCY"]
        super().save_model(request, obj, form, change)


class ReadOnlyAdmin(PlatformModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class LineInline(admin.TabularInline):
    model = StatementLine
    extra = 0
    fields = [
        "kind",
        "project",
        "user",
        "flavor",
        "tier",
        "original_month",
        "unit_price",
        "card_hours",
        "amount",
    ]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Statement)
class StatementAdmin(ReadOnlyAdmin):
    list_display = ["department", "month", "state", "total", "currency", "closed_at"]
    list_filter = ["state", "month"]
    inlines = [LineInline]


@admin.register(MonthClose)
class MonthCloseAdmin(ReadOnlyAdmin):
    list_display = ["month", "through_record", "closed_at", "closed_by"]


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = ["job", "hour_start", "tier", "gpu_count", "card_seconds", "revision", "reverses"]
    list_display += ["department", "project"]
    list_filter = ["month", "tier", "flavor"]
    list_select_related = ["job", "department", "project", "reverses"]
    show_full_result_count = False  # the ledger is large: no COUNT(*) on every page
