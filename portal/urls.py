"""The URL configuration composes every app (the only place besides the dashboard that does)."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularSwaggerSplitView

from billing import api as billing_api
from billing import api_fairshare as billing_fairshare_api
from billing import views_fairshare as billing_fairshare_views
from jobs import api as jobs_api
from jobs import api_approvals as jobs_approvals_api
from jobs import api_autoscale as jobs_autoscale_api
from jobs import api_idle_policy as jobs_idle_policy_api
from jobs import api_reservations as jobs_reservations_api
from jobs import api_templates as jobs_templates_api
from jobs import api_workflows as jobs_workflows_api
from jobs import views as jobs_views
from jobs import views_policies as policy_views
from jobs import views_reservations as jobs_reservation_views
from jobs import views_templates as job_template_views
from jobs import views_workflows as workflow_views
from jobs.clusters import api_logs as jobs_logs_api
from jobs.clusters import api_nodes as jobs_nodes_api
from jobs.clusters import views_logs as log_views
from jobs.clusters import views_nodes as node_views
from jobs.clusters.metrics_view import metrics
from jobs.native import api as jobs_external_api
from jobs.native import views as external_views
from jobs.whatif import api as jobs_advisor_api
from jobs.whatif import api_history as jobs_history_api
from jobs.whatif import views as advisor_views
from portal import api as portal_api
from portal import api_approvals as approvals_api
from portal import api_tokens as tokens_api
from portal import api_webhooks as webhooks_api
from portal import dashboard, oidc, oidc_logout, views
from portal import views_approvals as approval_views
from portal import views_directory as directory_views
from portal import views_tokens as token_views
from portal import views_webhooks as webhook_views
from portal.api_base import EnglishSchemaView
from portal.health import healthz
from quotas import api as quotas_api
from quotas import api_approvals as quotas_approvals_api
from quotas import api_baselines as quotas_baselines_api
from quotas import api_fair_share as quotas_fair_share_api
from quotas import views as quotas_views
from quotas import views_fair_share as quotas_fair_share_views

api_v1 = [
    path("me/", portal_api.MeApi.as_view(), name="me"),
    path("auth/token/", portal_api.TokenApi.as_view(), name="token"),
    # Personal API tokens (docs/identity.md "API tokens"): the caller's own.
    path("api-tokens/", tokens_api.ApiTokenListApi.as_view(), name="apitoken-list"),
    path("api-tokens/<int:pk>/", tokens_api.ApiTokenDetailApi.as_view(), name="apitoken-detail"),
    path("departments/", portal_api.DepartmentListApi.as_view(), name="department-list"),
    path("departments/<int:pk>/", portal_api.DepartmentDetailApi.as_view(), name="department-detail"),
    path("projects/", portal_api.ProjectListApi.as_view(), name="project-list"),
    path("projects/<int:pk>/", portal_api.ProjectDetailApi.as_view(), name="project-detail"),
    path("projects/<int:pk>/move/", portal_api.ProjectMoveApi.as_view(), name="project-move"),
    path("projects/<int:pk>/idle-policy/", jobs_idle_policy_api.ProjectIdlePolicyApi.as_view(),
         name="project-idle-policy"),
    path("memberships/", portal_api.MembershipListApi.as_view(), name="membership-list"),
    path("memberships/<int:pk>/", portal_api.MembershipDetailApi.as_view(), name="membership-detail"),
    path("directory-rules/", portal_api.DirectoryRuleListApi.as_view(), name="directoryrule-list"),
    path(
        "directory-rules/<int:pk>/", portal_api.DirectoryRuleDetailApi.as_view(), name="directoryrule-detail"
    ),
    path("flavors/", quotas_api.FlavorListApi.as_view(), name="flavor-list"),
    path("flavors/<int:pk>/", quotas_api.FlavorDetailApi.as_view(), name="flavor-detail"),
    path("clusters/", quotas_api.ClusterListApi.as_view(), name="cluster-list"),
    path("clusters/<int:pk>/", quotas_api.ClusterDetailApi.as_view(), name="cluster-detail"),
    path("nodes/", quotas_api.NodeListApi.as_view(), name="node-list"),
    path("nodes/<int:pk>/", quotas_api.NodeDetailApi.as_view(), name="node-detail"),
    # The software baseline (DESIGN §15): expected driver and CUDA per flavor, and the nodes off it.
    path("software-baselines/", quotas_baselines_api.BaselineListApi.as_view(), name="baseline-list"),
    path(
        "software-baselines/<int:pk>/",
        quotas_baselines_api.BaselineDetailApi.as_view(),
        name="baseline-detail",
    ),
    path("nodes/drift/", quotas_baselines_api.DriftReportApi.as_view(), name="node-drift"),
    path("quota-nodes/", quotas_api.QuotaNodeListApi.as_view(), name="quotanode-list"),
    path("quota-nodes/<int:pk>/", quotas_api.QuotaNodeDetailApi.as_view(), name="quotanode-detail"),
    path("quota-tree/", quotas_api.QuotaTreeApi.as_view(), name="quota-tree"),
    path("quota-tree/<str:kind>/<int:pk>/fair-share/", quotas_fair_share_api.FairShareApi.as_view(),
         name="quota-fair-share"),
    path("loans/", quotas_api.LoanListApi.as_view(), name="loan-list"),
    path("loans/<int:pk>/", quotas_api.LoanDetailApi.as_view(), name="loan-detail"),
    path("loans/<int:pk>/cancel/", quotas_api.LoanCancelApi.as_view(), name="loan-cancel"),
    path("quota-windows/", quotas_api.WindowListApi.as_view(), name="quotawindow-list"),
    path("quota-windows/<int:pk>/", quotas_api.WindowDetailApi.as_view(), name="quotawindow-detail"),
    path("quota-usage/", jobs_api.QuotaUsageApi.as_view(), name="quota-usage"),
    path("jobs/", jobs_api.JobListApi.as_view(), name="job-list"),
    path("jobs/<int:pk>/", jobs_api.JobDetailApi.as_view(), name="job-detail"),
    path("jobs/<int:pk>/cancel/", jobs_api.JobCancelApi.as_view(), name="job-cancel"),
    path("jobs/<int:pk>/scale/", jobs_api.JobScaleApi.as_view(), name="job-scale"),
    path("jobs/<int:pk>/autoscale/", jobs_autoscale_api.JobAutoscaleApi.as_view(), name="job-autoscale"),
    path("jobs/<int:pk>/events/", jobs_api.JobEventsApi.as_view(), name="job-events"),
    path("jobs/<int:pk>/explain/", jobs_api.JobExplainApi.as_view(), name="job-explain"),
    path("jobs/<int:pk>/dependencies/", jobs_workflows_api.JobDependenciesApi.as_view(),
         name="job-dependencies"),
    path("arrays/<int:pk>/", jobs_workflows_api.ArrayDetailApi.as_view(), name="array-detail"),
    path("arrays/<int:pk>/cancel/", jobs_workflows_api.ArrayCancelApi.as_view(), name="array-cancel"),
    path("jobs/<int:pk>/utilisation/", jobs_api.JobUtilisationApi.as_view(), name="job-utilisation"),
    path("jobs/<int:pk>/log/", jobs_logs_api.JobLogApi.as_view(), name="job-log"),
    path("jobs/<int:pk>/log/download/", jobs_logs_api.JobLogDownloadApi.as_view(), name="job-log-download"),
    path("jobs/<int:pk>/access/", jobs_logs_api.JobAccessApi.as_view(), name="job-access"),
    # The job's working environment for its users (DESIGN §13): templates, the project's storages
    # and the Secrets it declares.
    path("job-templates/", jobs_templates_api.JobTemplateListApi.as_view(), name="jobtemplate-list"),
    path(
        "job-templates/<int:pk>/",
        jobs_templates_api.JobTemplateDetailApi.as_view(),
        name="jobtemplate-detail",
    ),
    path(
        "job-templates/<int:pk>/submit/",
        jobs_templates_api.JobTemplateSubmitApi.as_view(),
        name="jobtemplate-submit",
    ),
    path(
        "projects/<int:pk>/storages/",
        jobs_templates_api.ProjectStorageListApi.as_view(),
        name="project-storages",
    ),
    path(
        "projects/<int:pk>/secrets/",
        jobs_templates_api.ProjectSecretListApi.as_view(),
        name="project-secrets",
    ),
    # External jobs' sources (DESIGN §11): Slurm accounts / Kubernetes namespaces → projects.
    path("external-sources/", jobs_external_api.ExternalSourceListApi.as_view(), name="externalsource-list"),
    path(
        "external-sources/<int:pk>/",
        jobs_external_api.ExternalSourceDetailApi.as_view(),
        name="externalsource-detail",
    ),
    path(
        "external-sources/<int:pk>/map/",
        jobs_external_api.ExternalSourceMapApi.as_view(),
        name="externalsource-map",
    ),
    # Billing (DESIGN §7): statements, the current-month estimate, the chargeback file.
    path("statements/", billing_api.StatementListApi.as_view(), name="statement-list"),
    path("statements/estimate/", billing_api.StatementEstimateApi.as_view(), name="statement-estimate"),
    path("statements/<int:pk>/", billing_api.StatementDetailApi.as_view(), name="statement-detail"),
    path("usage/", billing_api.UsageApi.as_view(), name="usage"),
    path("fair-share/", billing_fairshare_api.FairShareReportApi.as_view(), name="fair-share"),
    # History as a trace (issue 25): platform admins export a range of jobs and the pool.
    path("history/export/", jobs_history_api.HistoryExportApi.as_view(), name="history-export"),
    path("chargeback/", billing_api.ChargebackApi.as_view(), name="chargeback"),
    path("budgets/", billing_api.BudgetListApi.as_view(), name="budget-list"),
    path("manual-adjustments/", billing_api.ManualAdjustmentListApi.as_view(), name="manualadjustment-list"),
    path(
        "manual-adjustments/<int:pk>/",
        billing_api.ManualAdjustmentDetailApi.as_view(),
        name="manualadjustment-detail",
    ),
    path(
        "manual-adjustments/<int:pk>/decide/",
        billing_api.ManualAdjustmentDecideApi.as_view(),
        name="manualadjustment-decide",
    ),
    path("budgets/<int:pk>/", billing_api.BudgetDetailApi.as_view(), name="budget-detail"),
    # Approvals (DESIGN §6): the generic engine, its kinds, job policies, notifications.
    path("approvals/", approvals_api.ApprovalListApi.as_view(), name="approval-list"),
    path(
        "approvals/bulk-decide/", approvals_api.ApprovalBulkDecideApi.as_view(), name="approval-bulk-decide"
    ),
    path("approvals/<int:pk>/", approvals_api.ApprovalDetailApi.as_view(), name="approval-detail"),
    path("approvals/<int:pk>/decide/", approvals_api.ApprovalDecideApi.as_view(), name="approval-decide"),
    path("approvals/<int:pk>/cancel/", approvals_api.ApprovalCancelApi.as_view(), name="approval-cancel"),
    path("approvals/<int:pk>/comments/", approvals_api.ApprovalCommentApi.as_view(), name="approval-comment"),
    path("quota-requests/", quotas_approvals_api.QuotaRequestApi.as_view(), name="quota-request"),
    path("loan-requests/", quotas_approvals_api.LoanRequestApi.as_view(), name="loan-request"),
    path(
        "approval-policies/", jobs_approvals_api.ApprovalPolicyListApi.as_view(), name="approvalpolicy-list"
    ),
    path(
        "approval-policies/<int:pk>/",
        jobs_approvals_api.ApprovalPolicyDetailApi.as_view(),
        name="approvalpolicy-detail",
    ),
    # Reservations, maintenance windows and queue states (issue 35, DESIGN §17).
    path("reservations/", jobs_reservations_api.ReservationListApi.as_view(), name="reservation-list"),
    path("reservations/<int:pk>/cancel/", jobs_reservations_api.ReservationCancelApi.as_view(),
         name="reservation-cancel"),
    path("maintenance/", jobs_reservations_api.MaintenanceApi.as_view(), name="maintenance"),
    path("projects/<int:pk>/reservation-requests/",
         jobs_reservations_api.ProjectReservationRequestApi.as_view(), name="project-reservation-request"),
    path("projects/<int:pk>/queue-state/", jobs_reservations_api.ProjectQueueStateApi.as_view(),
         name="project-queue-state"),
    path("departments/<int:pk>/queue-state/", jobs_reservations_api.DepartmentQueueStateApi.as_view(),
         name="department-queue-state"),
    # The node / GPU map (issue 24).
    path("nodes/occupancy/", jobs_nodes_api.NodeOccupancyApi.as_view(), name="node-occupancy"),
    path("nodes/<int:pk>/cordon/", jobs_nodes_api.NodeCordonApi.as_view(), name="node-cordon"),
    path("nodes/<int:pk>/drain/", jobs_nodes_api.NodeDrainApi.as_view(), name="node-drain"),
    path("nodes/<int:pk>/uncordon/", jobs_nodes_api.NodeUncordonApi.as_view(), name="node-uncordon"),
    path("notifications/", approvals_api.NotificationListApi.as_view(), name="notification-list"),
    path(
        "notifications/read-all/",
        approvals_api.NotificationReadAllApi.as_view(),
        name="notification-read-all",
    ),
    path(
        "notifications/<int:pk>/read/", approvals_api.NotificationReadApi.as_view(), name="notification-read"
    ),
    # The policy advisor (issue 25): platform admins only (everyone else 404).
    path("advisor/searches/", jobs_advisor_api.AdvisorSearchListApi.as_view(), name="advisorsearch-list"),
    path("advisor/searches/<int:pk>/", jobs_advisor_api.AdvisorSearchDetailApi.as_view(),
         name="advisorsearch-detail"),
    path("advisor/searches/<int:pk>/cancel/", jobs_advisor_api.AdvisorSearchCancelApi.as_view(),
         name="advisorsearch-cancel"),
    path("advisor/candidates/<int:pk>/apply/", jobs_advisor_api.AdvisorCandidateApplyApi.as_view(),
         name="advisorcandidate-apply"),
    # Webhooks (issue 24 item 7): a user's own and their projects' (docs/notifications.md).
    path("webhooks/", webhooks_api.WebhookListApi.as_view(), name="webhook-list"),
    path("webhooks/<int:pk>/", webhooks_api.WebhookDetailApi.as_view(), name="webhook-detail"),
    path("webhooks/<int:pk>/test/", webhooks_api.WebhookTestApi.as_view(), name="webhook-test"),
    path(
        "webhooks/<int:pk>/deliveries/",
        webhooks_api.WebhookDeliveriesApi.as_view(),
        name="webhook-deliveries",
    ),
]

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics, name="metrics"),
    path("api/v1/", include((api_v1, "api"), namespace="api")),
    path("api/schema/", EnglishSchemaView.as_view(), name="schema"),
    # Swagger UI from our static files (SPECTACULAR_SETTINGS); the split view serves its start-up
    # script from /api/docs/?script, not inline, so the site's policy holds here too.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    path("accounts/login/", views.LoginView.as_view(), name="login"),
    path("accounts/logout/", views.LogoutView.as_view(), name="logout"),
    # Sign-in with the centre's OpenID Connect provider (portal/oidc.py); 404 unless it is on.
    path("oidc/authenticate/", oidc.OIDCStartView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc.OIDCCallbackView.as_view(), name="oidc_authentication_callback"),
    # OpenID Connect Back-Channel Logout 1.0: the provider's server ends sessions (portal/oidc_logout.py).
    path("oidc/backchannel-logout/", oidc_logout.backchannel_logout, name="oidc-backchannel-logout"),
    # A user's own API tokens (docs/identity.md "API tokens"), from the user menu.
    path("account/api-tokens/", token_views.api_token_list, name="api-token-list"),
    path("account/api-tokens/<int:pk>/revoke/", token_views.api_token_revoke, name="api-token-revoke"),
    path("", dashboard.dashboard, name="dashboard"),
    path("quotas/", jobs_views.quota_tree, name="quota-tree"),
    # Fair share (DESIGN §16): the sshare-like report and a node's weight.
    path("quotas/fair-share/", billing_fairshare_views.fair_share_report_page, name="fair-share-report"),
    path("quotas/fair-share/<str:kind>/<int:pk>/weight/", quotas_fair_share_views.fair_share_weight,
         name="fair-share-weight"),
    path("quotas/nodes/<int:pk>/borrowers/", jobs_views.quota_borrowers_view, name="quota-borrowers"),
    path("inventory/", quotas_views.inventory, name="inventory"),
    path("inventory/baselines/", quotas_views.baseline_list, name="baseline-list"),
    path("inventory/baselines/<int:pk>/", quotas_views.baseline_list, name="baseline-edit"),
    path("inventory/baselines/<int:pk>/delete/", quotas_views.baseline_delete, name="baseline-delete"),
    path("nodes/drift/", quotas_views.drift_report, name="node-drift"),
    # The node / GPU map and a node's page (cordon, drain, return to service: issue 24).
    path("nodes/", node_views.node_map_page, name="node-map"),
    path("nodes/<int:pk>/", node_views.node_page, name="node-page"),
    # Job pages (issue 5); "jobs/new/" and "jobs/queue/" come before "jobs/<int:pk>/".
    path("jobs/", jobs_views.job_list, name="job-list"),
    path("jobs/new/", jobs_views.job_new, name="job-new"),
    path("jobs/new/validate/", jobs_views.job_new_validate, name="job-new-validate"),
    path("jobs/queue/", jobs_views.job_queue, name="job-queue"),
    path("jobs/templates/", job_template_views.template_list, name="job-template-list"),
    path("jobs/templates/<int:pk>/delete/", job_template_views.template_delete, name="job-template-delete"),
    path("jobs/queue/table/", jobs_views.job_queue_table, name="job-queue-table"),
    path("jobs/<int:pk>/", jobs_views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/cancel/", jobs_views.job_cancel, name="job-cancel"),
    # An array of tasks (DESIGN §17): its tasks' states, and cancel all.
    path("arrays/<int:pk>/", workflow_views.array_detail, name="array-detail"),
    path("arrays/<int:pk>/cancel/", workflow_views.array_cancel, name="array-cancel"),
    path("jobs/<int:pk>/idle-exemption/", jobs_views.job_idle_exemption, name="job-idle-exemption"),
    path("jobs/<int:pk>/autoscale/", jobs_views.job_autoscale, name="job-autoscale-form"),
    # The job's log and a dev job's port (DESIGN §13, issue 22).
    path("jobs/<int:pk>/log/", log_views.job_log, name="job-log"),
    path("jobs/<int:pk>/log/download/", log_views.job_log_download, name="job-log-download"),
    path("jobs/<int:pk>/open/", log_views.job_open, name="job-open"),
    # ingress-nginx's auth-url for a dev job's ingress (jobs/clusters/views_logs.py says why 401/403).
    path("jobs/<int:pk>/access/auth/", log_views.job_access_auth, name="job-access-auth"),
    path("jobs/<int:pk>/save-template/", job_template_views.template_from_job, name="job-template-from-job"),
    path("quotas/loans/", quotas_views.loan_list, name="loan-list"),
    path("reservations/", jobs_reservation_views.reservations_page, name="reservations"),
    path("external-sources/", external_views.external_source_list, name="external-source-list"),
    path("external-sources/<int:pk>/map/", external_views.external_source_map, name="external-source-map"),
    path("priority-classes/", jobs_views.priority_class_list, name="priority-class-list"),
    path("priority-classes/new/", jobs_views.priority_class_edit, name="priority-class-new"),
    path("priority-classes/<int:pk>/edit/", jobs_views.priority_class_edit, name="priority-class-edit"),
    # Approval pages (issue 5); "approvals/bulk/" comes before "approvals/<int:pk>/".
    path("approvals/", approval_views.approval_inbox, name="approval-inbox"),
    path("approvals/bulk/", approval_views.approval_bulk_decide, name="approval-bulk-decide"),
    path("approvals/<int:pk>/", approval_views.approval_detail, name="approval-detail"),
    path("approvals/<int:pk>/decide/", approval_views.approval_decide, name="approval-decide"),
    path("approvals/<int:pk>/cancel/", approval_views.approval_cancel, name="approval-cancel"),
    path("approvals/<int:pk>/comment/", approval_views.approval_comment, name="approval-comment"),
    path("quotas/requests/new/", quotas_views.quota_request_new, name="quota-request-new"),
    path("quotas/loans/request/", quotas_views.loan_request_new, name="loan-request-new"),
    path("projects/<int:pk>/move/", quotas_views.project_move_page, name="project-move"),
    path("approval-policies/", policy_views.policy_list, name="approval-policy-list"),
    # The policy advisor (issue 25, docs/advisor.md): platform admins only.
    path("advisor/", advisor_views.advisor, name="advisor"),
    path("advisor/<int:pk>/", advisor_views.advisor_search, name="advisor-search"),
    path("advisor/<int:pk>/progress/", advisor_views.advisor_progress, name="advisor-progress"),
    path("advisor/<int:pk>/cancel/", advisor_views.advisor_cancel, name="advisor-cancel"),
    path("advisor/candidates/<int:pk>/apply/", advisor_views.advisor_apply, name="advisor-apply"),
    path("approval-policies/new/", policy_views.policy_edit, name="approval-policy-new"),
    path("approval-policies/<int:pk>/edit/", policy_views.policy_edit, name="approval-policy-edit"),
    path("approval-policies/<int:pk>/delete/", policy_views.policy_delete, name="approval-policy-delete"),
    path("notifications/", approval_views.notification_list, name="notification-list"),
    path("notifications/read-all/", approval_views.notification_read_all, name="notification-read-all"),
    path("notifications/<int:pk>/read/", approval_views.notification_read, name="notification-read"),
    path("notifications/webhooks/", webhook_views.webhook_list, name="webhook-list"),
    path("notifications/webhooks/new/", webhook_views.webhook_edit, name="webhook-new"),
    path("notifications/webhooks/<int:pk>/", webhook_views.webhook_edit, name="webhook-edit"),
    path("notifications/webhooks/<int:pk>/delete/", webhook_views.webhook_delete, name="webhook-delete"),
    path("notifications/webhooks/<int:pk>/test/", webhook_views.webhook_test, name="webhook-test"),
    # Directory rules and users (issue 21): platform admins and auditors only.
    path("directory-rules/", directory_views.directory_rule_list, name="directory-rule-list"),
    path("directory-rules/new/", directory_views.directory_rule_edit, name="directory-rule-new"),
    path("directory-rules/<int:pk>/edit/", directory_views.directory_rule_edit, name="directory-rule-edit"),
    path(
        "directory-rules/<int:pk>/delete/",
        directory_views.directory_rule_delete,
        name="directory-rule-delete",
    ),
    path("users/", directory_views.user_list, name="user-list"),
    path("users/<int:pk>/", directory_views.user_detail, name="user-detail"),
    path("memberships/<int:pk>/remove/", directory_views.membership_remove, name="membership-remove"),
    # Billing pages (issue 6): reports, statements, budgets.
    path("", include("billing.urls")),
]
