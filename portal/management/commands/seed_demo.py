"""``seed_demo``: a believable centre for the demo and for trying the portal.

Each app contributes its part in an optional ``<app>.demo`` module with ``seed(stdout)``,
run in INSTALLED_APPS order (portal, quotas, jobs, billing), so ``portal`` composes the
seed without importing the apps above it. ``make demo`` runs it at every start, so every part
creates only what is missing and never changes a row that exists: what users changed in the
demo (an approved quota, a moved department, an edited priority class) stands after a restart.
A missing row that no longer passes validation is left out with a warning (``portal.demo.
create_missing``, in a savepoint of the one transaction) instead of stopping the demo.
"""

from importlib import import_module
from importlib.util import find_spec

from django.apps import apps
from django.core.management.base import BaseCommand
from django.db import transaction


class Command(BaseCommand):
    help = "Create what is missing of the demo compute centre; never changes existing rows."

    def handle(self, *args, **options):
        with transaction.atomic():
            for config in apps.get_app_configs():
                name = f"{config.name}.demo"
                if config.name.startswith("django") or find_spec(name) is None:
                    continue
                import_module(name).seed(self.stdout)
        self.stdout.write(self.style.SUCCESS("demo centre ready"))
