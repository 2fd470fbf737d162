import json
from dataclasses import asdict

from django.core.management.base import BaseCommand

from jobs.scheduling.cycle import schedule_once


class Command(BaseCommand):
    help = "Run one scheduling cycle now and print what it decided (JSON)."

    def handle(self, *args, **options):
        report = schedule_once()
        self.stdout.write(json.dumps(asdict(report)))
