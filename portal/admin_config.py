from django.contrib.admin.apps import AdminConfig


class PortalAdminConfig(AdminConfig):
    """The admin, gated by the platform_admin role (see ``portal.admin_site``)."""

    default_site = "portal.admin_site.PortalAdminSite"
