"""``seed_demo``: a believable centre for the demo and for trying the portal.

Each app contributes its part in an optional ``<app>.demo`` module with ``seed(stdout)``,
run in INSTALLED_APPS order (portal, quotas, jobs, billing), so ``portal`` composes the
seed without importing the apps above it. Every part is idempotent: a second run finds
what the first made and changes nothing.
"""

from importlib import import_module
from importlib.util import find_spec

from django.apps import apps
from django.core.management.base import BaseCommand
from django.db import transaction


class Command(BaseCommand):
    help = "Create (or bring up to date) the demo compute centre. Idempotent."

    def handle(self, *args, **options):
        with transaction.atomic():
            for config in apps.get_app_configs():
                name = f"{config.name}.demo"
                if config.name.startswith("django") or find_spec(name) is None:
                    continue
                import_module(name).seed(self.stdout)
        self.stdout.write(self.style.SUCCESS("demo centre ready"))
