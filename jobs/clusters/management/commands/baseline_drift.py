"""``manage.py baseline_drift``: every node off its software baseline (DESIGN §15), by flavor and
cluster — a table, or ``--json`` (the API's shape, GET /api/v1/nodes/drift/). Exits 1 with
``--fail-on-drift`` when any node is off, for a cron job or a monitoring check."""

import json

from django.core.management.base import BaseCommand

from quotas.api_baselines import drift_group_out
from quotas.baselines import drift_report


class Command(BaseCommand):
    help = "List the nodes whose driver or CUDA version is off their flavor's software baseline."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
        parser.add_argument("--fail-on-drift", action="store_true", help="Exit 1 when a node is off.")

    def handle(self, *args, **options):
        groups = drift_report()
        if options["json"]:
            self.stdout.write(json.dumps([drift_group_out(g) for g in groups], indent=2))
        else:
            self._table(groups)
        if options["fail_on_drift"] and any(g.off for g in groups):
            raise SystemExit(1)

    def _table(self, groups) -> None:
        rows = [("FLAVOR", "CLUSTER", "NODE", "STATE", "DRIVER", "EXPECTED", "CUDA", "EXPECTED")]
        for g in groups:
            for node, d in g.off:
                rows.append((g.flavor, g.cluster, node.name, d.state, d.driver or "-",
                             d.expected_driver or "-", d.cuda or "-", d.expected_cuda or "-"))
        widths = [max(len(r[k]) for r in rows) for k in range(len(rows[0]))]
        for row in rows:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
        for g in groups:
            counts = ", ".join(f"{state} {n}" for state, n in sorted(g.counts.items())) or "all on baseline"
            off = f"{len(g.off)} of {g.nodes_total} nodes off"
            self.stdout.write(f"{g.flavor} @ {g.cluster}: {off} ({counts})")

