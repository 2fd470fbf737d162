"""``manage.py sshare [--json]``: the fair-share report of the whole tree, like Slurm's ``sshare``
(DESIGN §16) — the figures of ``/api/v1/fair-share/`` (``billing.fairshare_report``)."""

from __future__ import annotations

import json
import math

from django.core.management.base import BaseCommand
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from billing.api_fairshare import report_data
from billing.fairshare_report import fair_share_report

COLUMNS = ("Account", "RawShares", "NormShares", "RawUsage(h)", "DecayedUsage(s)", "NormUsage", "LevelFS",
           "Rank", "FairShare")


class Command(BaseCommand):
    help = "Print the fair-share tree like Slurm's sshare (shares, raw and decayed usage, factor, rank)."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="The API's JSON instead of a table.")

    def handle(self, *args, **options):
        report = fair_share_report(None, timezone.now())
        if options["json"]:
            self.stdout.write(json.dumps(report_data(report), cls=DjangoJSONEncoder, indent=2))
            return
        self.stdout.write(" ".join(f"{c:>15}" if i else f"{c:<24}" for i, c in enumerate(COLUMNS)))
        self.stdout.write(" ".join("-" * (15 if i else 24) for i in range(len(COLUMNS))))
        for r in report.rows:
            f = r.fair
            cells = (
                f"{f.shares:.3f}{'*' if r.weighted else ''}", f"{f.shares_norm:.6f}",
                f"{r.usage_card_hours:.2f}", f"{f.usage:.0f}", f"{f.usage_norm:.6f}",
                "inf" if math.isinf(f.level_fs) else f"{f.level_fs:.6f}",
                "" if f.rank is None else str(f.rank), "" if f.factor is None else f"{f.factor:.6f}",
            )
            name = f"{' ' * r.depth}{r.code}"
            self.stdout.write(f"{name:<24} " + " ".join(f"{c:>15}" for c in cells))
        self.stdout.write(f"(* a weight set by an admin; half-life {report.half_life_s} s)")
