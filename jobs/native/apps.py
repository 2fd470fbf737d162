from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class NativeConfig(AppConfig):
    name = "jobs.native"
    label = "native"
    verbose_name = _("Native workloads")

    def ready(self):
        # Quota, loan, window and membership writes carry over to the clusters' own queues,
        # accounts and ResourceQuotas after they commit.
        from jobs.native.native_k8s import connect_signals as connect_quota_signals
        from jobs.native.queue_sync import connect_signals as connect_queue_signals
        from jobs.native.slurm_accounts import connect_signals as connect_slurm_accounts

        connect_queue_signals()
        connect_slurm_accounts()
        connect_quota_signals()
