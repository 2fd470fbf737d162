from django.contrib import admin

from .admin_site import PlatformModelAdmin
from .models import Department, Membership, Project, User


@admin.register(User)
class UserAdmin(PlatformModelAdmin):
    list_display = ["username", "display_name", "email", "is_active", "last_login"]
    search_fields = ["username", "display_name", "email"]
    exclude = ["password", "user_permissions", "groups"]


@admin.register(Department)
class DepartmentAdmin(PlatformModelAdmin):
    list_display = ["code", "name", "parent", "cost_centre"]
    search_fields = ["code", "name"]


@admin.register(Project)
class ProjectAdmin(PlatformModelAdmin):
    list_display = ["code", "name", "department", "active"]
    list_filter = ["active", "department"]
    search_fields = ["code", "name"]


@admin.register(Membership)
class MembershipAdmin(PlatformModelAdmin):
    list_display = ["user", "role", "department", "project"]
    list_filter = ["role"]
