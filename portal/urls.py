"""The URL configuration composes every app (the only place besides the dashboard that does)."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from jobs import api as jobs_api
from jobs import views as jobs_views
from jobs.metrics_view import metrics
from portal import api as portal_api
from portal import dashboard, views
from portal.health import healthz
from quotas import api as quotas_api
from quotas import views as quotas_views

api_v1 = [
    path("me/", portal_api.MeApi.as_view(), name="me"),
    path("auth/token/", portal_api.TokenApi.as_view(), name="token"),
    path("departments/", portal_api.DepartmentListApi.as_view(), name="department-list"),
    path("departments/<int:pk>/", portal_api.DepartmentDetailApi.as_view(), name="department-detail"),
    path("projects/", portal_api.ProjectListApi.as_view(), name="project-list"),
    path("projects/<int:pk>/", portal_api.ProjectDetailApi.as_view(), name="project-detail"),
    path("memberships/", portal_api.MembershipListApi.as_view(), name="membership-list"),
    path("memberships/<int:pk>/", portal_api.MembershipDetailApi.as_view(), name="membership-detail"),
    path("flavors/", quotas_api.FlavorListApi.as_view(), name="flavor-list"),
    path("flavors/<int:pk>/", quotas_api.FlavorDetailApi.as_view(), name="flavor-detail"),
    path("clusters/", quotas_api.ClusterListApi.as_view(), name="cluster-list"),
    path("clusters/<int:pk>/", quotas_api.ClusterDetailApi.as_view(), name="cluster-detail"),
    path("nodes/", quotas_api.NodeListApi.as_view(), name="node-list"),
    path("nodes/<int:pk>/", quotas_api.NodeDetailApi.as_view(), name="node-detail"),
    path("quota-nodes/", quotas_api.QuotaNodeListApi.as_view(), name="quotanode-list"),
    path("quota-nodes/<int:pk>/", quotas_api.QuotaNodeDetailApi.as_view(), name="quotanode-detail"),
    path("quota-tree/", quotas_api.QuotaTreeApi.as_view(), name="quota-tree"),
    path("loans/", quotas_api.LoanListApi.as_view(), name="loan-list"),
    path("loans/<int:pk>/", quotas_api.LoanDetailApi.as_view(), name="loan-detail"),
    path("loans/<int:pk>/cancel/", quotas_api.LoanCancelApi.as_view(), name="loan-cancel"),
    path("quota-windows/", quotas_api.WindowListApi.as_view(), name="quotawindow-list"),
    path("quota-windows/<int:pk>/", quotas_api.WindowDetailApi.as_view(), name="quotawindow-detail"),
    path("quota-usage/", jobs_api.QuotaUsageApi.as_view(), name="quota-usage"),
    path("jobs/", jobs_api.JobListApi.as_view(), name="job-list"),
    path("jobs/<int:pk>/", jobs_api.JobDetailApi.as_view(), name="job-detail"),
    path("jobs/<int:pk>/cancel/", jobs_api.JobCancelApi.as_view(), name="job-cancel"),
    path("jobs/<int:pk>/events/", jobs_api.JobEventsApi.as_view(), name="job-events"),
    path("jobs/<int:pk>/explain/", jobs_api.JobExplainApi.as_view(), name="job-explain"),
    path("jobs/<int:pk>/utilisation/", jobs_api.JobUtilisationApi.as_view(), name="job-utilisation"),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    path("accounts/login/", views.LoginView.as_view(), name="login"),
    path("accounts/logout/", views.LogoutView.as_view(), name="logout"),
    path("", dashboard.dashboard, name="dashboard"),
    path("quotas/", jobs_views.quota_tree, name="quota-tree"),
    path("inventory/", quotas_views.inventory, name="inventory"),
]
