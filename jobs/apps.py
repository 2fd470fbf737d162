from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = _("Jobs")

    def ready(self):
        from .approvals import register as register_approval_kinds

        register_approval_kinds()

        from .rule_change_kind import register as register_rule_change_kind

        register_rule_change_kind()

        from portal.approvals import context_providers

        from .approval_context import approval_context

        if approval_context not in context_providers:
            context_providers.append(approval_context)

        from .queue_sync import connect_signals

        connect_signals()

        from .slurm_accounts import connect_signals as connect_slurm_accounts

        connect_slurm_accounts()
        from .native_k8s import connect_signals as connect_quota_signals

        connect_quota_signals()

        from portal.hooks import user_deactivated_hooks

        from .services import stop_jobs_of_deactivated_user

        user_deactivated_hooks.append(stop_jobs_of_deactivated_user)

        from quotas.selectors import measured_throughput_providers

        from .throughput import measured_throughput

        if measured_throughput not in measured_throughput_providers:
            measured_throughput_providers.append(measured_throughput)
