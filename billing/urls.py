"""Billing pages, included by ``portal/urls.py``."""

from django.urls import path

from . import views, views_close

urlpatterns = [
    path("reports/", views.report_page, name="reports"),
    path("billing/usage/", views.usage_page, name="billing-usage"),
    path("billing/statements/", views.statement_list, name="billing-statements"),
    path("billing/statements/<int:pk>/", views.statement_detail, name="billing-statement"),
    path(
        "billing/statements/<int:pk>/download/", views.statement_download, name="billing-statement-download"
    ),
    path("billing/chargeback/", views.chargeback_download, name="billing-chargeback"),
    path("billing/close/", views_close.month_close_page, name="billing-close"),
    path("billing/close/runs/<int:pk>/", views_close.month_close_progress, name="billing-close-progress"),
    path("billing/adjustments/", views.adjustment_list, name="billing-adjustments"),
    path("billing/adjustments/<int:pk>/decide/", views.adjustment_decide, name="billing-adjustment-decide"),
    path("billing/budgets/", views.budget_list, name="billing-budgets"),
    path("billing/budgets/<int:pk>/delete/", views.budget_remove, name="billing-budget-delete"),
    path("what-if/", views.what_if, name="what-if"),
    path("what-if/<int:pk>/", views.what_if_run, name="what-if-run"),
    path("what-if/<int:pk>/progress/", views.what_if_progress, name="what-if-progress"),
]
