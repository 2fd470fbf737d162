from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = _("Resources and quotas")

    def ready(self):
        from portal.hooks import tree_move_checks

        from .services import check_tree_move

        tree_move_checks.append(check_tree_move)

        from .approval_kinds import register as register_approval_kinds

        register_approval_kinds()
