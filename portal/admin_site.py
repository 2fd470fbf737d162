"""The Django admin for platform admins: access follows the platform_admin role (a
membership), not Django's is_staff flag, so the one scope decides here too."""

from django.contrib import admin
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db import models
from django.urls import reverse

from .parsers import BoundedJSONFormField
from .selectors import scope_for


def is_platform_admin(request) -> bool:
    user = request.user
    return user.is_active and user.is_authenticated and scope_for(user).platform_admin


class PortalAdminSite(admin.AdminSite):
    site_header = "gpupool"

    def has_permission(self, request):
        return is_platform_admin(request)

    def login(self, request, extra_context=None):
        """One password form for the whole site: the portal's, with its lockout (portal/signin.py).
        Django's own admin form would check passwords with no limit at all."""
        if request.user.is_authenticated:
            # Signed in but not a platform admin: sending them to sign in again would loop.
            raise PermissionDenied
        return redirect_to_login(request.GET.get("next") or reverse("admin:index"), reverse("login"))


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
