"""The Django admin for platform admins: access follows the platform_admin role (a
membership), not Django's is_staff flag, so the one scope decides here too."""

from django.contrib import admin
from django.db import models

from .parsers import BoundedJSONFormField
from .selectors import scope_for


def is_platform_admin(request) -> bool:
    user = request.user
    return user.is_active and user.is_authenticated and scope_for(user).platform_admin


class PortalAdminSite(admin.AdminSite):
    site_header = "gpupool"

    def has_permission(self, request):
        return is_platform_admin(request)


class PlatformModelAdmin(admin.ModelAdmin):
    # JSON typed into the admin (a cluster's configuration) is bounded like an API body.
    formfield_overrides = {models.JSONField: {"form_class": BoundedJSONFormField}}

    def has_module_permission(self, request):
        return is_platform_admin(request)

    def has_view_permission(self, request, obj=None):
        return is_platform_admin(request)

    def has_add_permission(self, request):
        return is_platform_admin(request)

    def has_change_permission(self, request, obj=None):
        return is_platform_admin(request)

    def has_delete_permission(self, request, obj=None):
        return is_platform_admin(request)
