from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class BillingConfig(AppConfig):
    name = "billing"
    verbose_name = _("Metering and billing")

    def ready(self):
        # jobs may not import billing (imports point portal ← quotas ← jobs ← billing): billing
        # plugs its budget check, the scheduler's budget hold and its prices into the hooks
        # jobs offers.
        from jobs.approvals import budget_checks
        from jobs.estimates import cost_estimators, job_cost_providers, price_lists
        from jobs.scheduling.config import fair_usage_providers, over_budget_providers
        from portal.approvals import context_providers
        from portal.hooks import project_move_checks

        from .budgets import budget_context, budget_reason, over_budget_tenants
        from .fairshare import fair_usage
        from .project_moves import check_project_move
        from .selectors import standard_cost, standard_pricers
        from .usage import job_cost_so_far

        if budget_reason not in budget_checks:
            budget_checks.append(budget_reason)
        if over_budget_tenants not in over_budget_providers:
            over_budget_providers.append(over_budget_tenants)
        if fair_usage not in fair_usage_providers:
            fair_usage_providers.append(fair_usage)
        if standard_cost not in cost_estimators:
            cost_estimators.append(standard_cost)
        if standard_pricers not in price_lists:
            price_lists.append(standard_pricers)
        if budget_context not in context_providers:
            context_providers.append(budget_context)
        if job_cost_so_far not in job_cost_providers:
            job_cost_providers.append(job_cost_so_far)
        if check_project_move not in project_move_checks:
            project_move_checks.append(check_project_move)
