"""``manage.py export_history --weeks N | --since T [--until T] --out DIR`` (issue 25 item 1).

Writes trace.csv, cluster.json, recorded.csv and manifest.json (``jobs.whatif.history``; docs/replay.md,
"History as a trace"). Arguments only."""


from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from jobs.whatif import history


class Command(BaseCommand):
    help = "Export the recorded jobs of a range as a replayable trace with its cluster SPEC."

    def add_arguments(self, parser):
        parser.add_argument("--weeks", type=int, help="the last N weeks up to now")
        parser.add_argument(
            "--since", help="range start, ISO date-time with offset (e.g. 2026-11-02T00:00+08:00)"
        )
        parser.add_argument("--until", help="range end (exclusive), default now")
        parser.add_argument("--out", required=True, help="folder to write the four files into")

    def handle(self, *args, **o):
        try:
            start, end = history.history_range(weeks=o["weeks"], since=o["since"], until=o["until"])
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"--{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from exc
        export = history.history_export(start=start, end=end)
        written = history.write_dir(export, o["out"])
        m = export.manifest
        self.stdout.write(
            f"{m['jobs']} jobs ({m['external_jobs']} external, "
            f"{m['skipped_never_ran']} never ran and left out) "
            f"from {m['start']} to {m['end']}; {m['nodes']} nodes, {m['quota_entries']} quota entries, "
            f"{m['windows']} windows, {m['loans']} loans"
        )
        for path in written:
            self.stdout.write(f"  {path}")
