from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = _("Jobs")

    def ready(self):
        from jobs.approvals import register as register_approval_kinds

        register_approval_kinds()

        from jobs.rule_change_kind import register as register_rule_change_kind

        register_rule_change_kind()

        from jobs.idle_exemption_kind import register as register_idle_exemption_kind

        register_idle_exemption_kind()

        from jobs.api_reservations import register as register_reservation_kind

        register_reservation_kind()

        from jobs.approval_context import approval_context
        from portal.approvals import context_providers

        if approval_context not in context_providers:
            context_providers.append(approval_context)

        from jobs.services import stop_jobs_of_deactivated_user
        from portal.hooks import user_deactivated_hooks

        user_deactivated_hooks.append(stop_jobs_of_deactivated_user)

        from jobs.throughput import measured_throughput
        from quotas.selectors import measured_throughput_providers

        if measured_throughput not in measured_throughput_providers:
            measured_throughput_providers.append(measured_throughput)
