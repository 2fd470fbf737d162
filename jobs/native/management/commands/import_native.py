import json
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from jobs.native.native_slurm import import_slurm, importable_clusters


class Command(BaseCommand):
    help = ("Import the jobs users submitted to Slurm directly (sbatch) as external jobs; "
            "--since back-fills history from accounting (sacct).")

    def add_arguments(self, parser):
        parser.add_argument("--cluster", help="one cluster by name (default: every active Slurm cluster)")
        parser.add_argument("--since", help="read accounting from this instant (ISO 8601 with a zone)")

    def handle(self, *args, **options):
        since = _instant(options["since"]) if options["since"] else None
        clusters = importable_clusters()
        if options["cluster"]:
            clusters = [c for c in clusters if c.name == options["cluster"]]
            if not clusters:
                raise CommandError(f"no active real Slurm cluster named {options['cluster']!r}")
        for cluster in clusters:
            outcome = import_slurm(cluster, since=since)
            self.stdout.write(f"{cluster.name}: {json.dumps(outcome, sort_keys=True)}")


def _instant(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError as exc:
        raise CommandError(f"--since: not an ISO 8601 time: {text!r}") from exc
    if value.tzinfo is None:
        raise CommandError("--since needs a zone (e.g. 2026-11-01T00:00+08:00)")
    return value
