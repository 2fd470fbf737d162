from datetime import datetime

import yaml
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobs.native.queue_sync import YUNIKORN, render_queues, render_yunikorn_config, sync_all
from portal.daterange import in_range
from quotas.models import Cluster, ClusterKind, Flavor
from quotas.queues import FORMATS, JOBS_NAMESPACE


class Command(BaseCommand):
    help = (
        "Print the quota tree as Kueue (ResourceFlavor, Cohort, ClusterQueue, LocalQueue) or Volcano "
        "(Queue) objects, one YAML document each, or as YuniKorn's queues.yaml for one --cluster (its "
        "flavors and mapped namespaces), at the effective quota of now or --at; --apply syncs every "
        "cluster configured for a scheduler integration instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("--format", choices=(*FORMATS, YUNIKORN), default="kueue")
        parser.add_argument("--cluster", help="yunikorn: the Kubernetes cluster to render for")
        parser.add_argument("--flavor", action="append", dest="flavors", help="only this flavor (repeatable)")
        parser.add_argument(
            "--namespace", default=JOBS_NAMESPACE, help="namespace of the LocalQueues (Kueue)"
        )
        parser.add_argument("--at", help="ISO date-time (with offset) to render the effective quota at")
        parser.add_argument("--apply", action="store_true", help="sync the integration clusters now")

    def handle(self, *args, **options):
        if options["apply"]:
            for name, counts in sync_all().items():
                self.stdout.write(f"{name}: {counts}")
            return
        if options["format"] == YUNIKORN:
            cluster, at = self._cluster(options["cluster"]), self._at(options["at"])
            self.stdout.write(render_yunikorn_config(cluster, at), ending="")
            return
        flavors = options["flavors"]
        if flavors:
            unknown = sorted(
                set(flavors) - set(Flavor.objects.filter(name__in=flavors).values_list("name", flat=True))
            )
            if unknown:
                raise CommandError(f"unknown flavor: {', '.join(unknown)}")
        objects = render_queues(
            options["format"],
            flavor_names=flavors,
            namespace=options["namespace"],
            now=self._at(options["at"]),
        )
        self.stdout.write(yaml.safe_dump_all(objects, sort_keys=False, allow_unicode=True), ending="")

    def _cluster(self, name: str | None) -> Cluster:
        if not name:
            raise CommandError("--format yunikorn needs --cluster NAME (its flavors and namespaces)")
        cluster = Cluster.objects.filter(name=name, kind=ClusterKind.KUBERNETES).first()
        if cluster is None:
            raise CommandError(f"no Kubernetes cluster named {name!r}")
        return cluster

    def _at(self, text: str | None) -> datetime:
        if not text:
            return timezone.now()
        try:
            at = datetime.fromisoformat(text)
        except ValueError as exc:
            raise CommandError(f"--at: not an ISO date-time: {text!r}") from exc
        if at.tzinfo is None:
            raise CommandError("--at needs a UTC offset, e.g. 2026-06-01T21:00+08:00")
        if not in_range(at):
            raise CommandError(f"--at: {text!r} is out of range: give a date from 2000-01-01 to 2100-12-31.")
        return at
