from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = _("Resources and quotas")

    def ready(self):
        from portal.hooks import project_move_checks, project_move_hooks, tree_move_checks

        from .services import check_project_move, check_tree_move, move_project_quota

        if check_tree_move not in tree_move_checks:
            tree_move_checks.append(check_tree_move)
        if check_project_move not in project_move_checks:
            project_move_checks.append(check_project_move)
        if move_project_quota not in project_move_hooks:
            project_move_hooks.append(move_project_quota)

        from .approval_kinds import register as register_approval_kinds

        register_approval_kinds()
