from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = _("Metering and billing")

    def ready(self):
        # jobs may not import billing (imports point portal ← quotas ← jobs ← billing): billing
        # plugs its budget check and its prices into the hooks jobs offers.
        from jobs.approvals import budget_checks
        from jobs.estimates import cost_estimators

        from .budgets import budget_reason
        from .selectors import standard_cost

        if budget_reason not in budget_checks:
            budget_checks.append(budget_reason)
        if standard_cost not in cost_estimators:
            cost_estimators.append(standard_cost)
