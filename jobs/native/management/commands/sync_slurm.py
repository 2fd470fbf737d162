import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from jobs.clusters.backends.base import BackendError
from jobs.native.slurm_accounts import accounts_clusters, dump, sync_cluster_accounts


class Command(BaseCommand):
    help = (
        "Bring Slurm's accounts, user associations and QOS in line with the quota tree, memberships and "
        "priority classes (docs/backends.md, 'Native Slurm users'), on every Slurm cluster the sync "
        "manages or the one named; prints the sacctmgr commands and the drift found. --dry-run runs "
        "nothing; --dump FILE writes the desired state as a 'sacctmgr load' flat file instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("--dry-run", action="store_true", help="print the commands, change nothing")
        parser.add_argument("--dump", metavar="FILE", help="write the sacctmgr load flat file ('-': stdout)")
        parser.add_argument("--cluster", metavar="NAME", help="only this cluster")
        parser.add_argument("--json", action="store_true", help="print each run as one JSON object")

    def handle(self, *args, **options):
        clusters = accounts_clusters()
        if options["cluster"]:
            clusters = [c for c in clusters if c.name == options["cluster"]]
            if not clusters:
                raise CommandError(f"no active Slurm cluster synced is named {options['cluster']!r}")
        if not clusters:
            raise CommandError("no active Slurm cluster to sync")
        if options["dump"]:
            self._dump(clusters, options["dump"])
            return
        failed = False
        for cluster in clusters:
            run = sync_cluster_accounts(cluster, dry_run=options["dry_run"])
            failed |= bool(run.error)
            self._report(run, as_json=options["json"])
        if failed:
            raise CommandError("the sync did not complete: see the errors above")

    def _dump(self, clusters, target: str) -> None:
        if len(clusters) > 1:
            raise CommandError("--dump writes one cluster: name it with --cluster")
        try:
            text = dump(clusters[0])
        except BackendError as exc:
            raise CommandError(str(exc)) from exc
        if target == "-":
            self.stdout.write(text, ending="")
        else:
            Path(target).write_text(text)
            self.stdout.write(f"{clusters[0].name}: wrote {target}")

    def _report(self, run, *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps({
                "cluster": run.cluster.name, "dry_run": run.dry_run, "commands": run.commands,
                "drift": run.drift, "notes": run.notes, "error": run.error,
            }))
            return
        verb = "would run" if run.dry_run else "ran"
        counts = f"{len(run.drift)} difference(s); {verb} {len(run.commands)} command(s)"
        self.stdout.write(f"{run.cluster.name}: {counts}")
        for command in run.commands:
            self.stdout.write(f"  sacctmgr -i {command}")
        for note in run.notes:
            self.stdout.write(f"  note: {note}")
        if run.error:
            self.stderr.write(f"  error: {run.error}")
