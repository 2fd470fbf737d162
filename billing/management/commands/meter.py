"""``meter``: bring the usage ledger up to date (the periodic task does the same)."""

import json
from dataclasses import asdict
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from billing.meter import usage_meter
from portal.daterange import in_range


def _instant(text: str, option: str) -> datetime:
    try:
        found = parse_datetime(text)
    except ValueError:  # well-formed but no such date-time, e.g. month 13
        found = None
    if found is None:
        raise CommandError(f"{option}: {text!r} is not a date-time (ISO 8601, e.g. 2026-11-01T00:00+08:00).")
    found = found if timezone.is_aware(found) else timezone.make_aware(found)
    if not in_range(found):
        raise CommandError(f"{option}: {text!r} is out of range: give a date from 2000-01-01 to 2100-12-31.")
    return found


class Command(BaseCommand):
    help = (
        "Meter job events into the usage ledger up to the last full hour (minus the meter lag). "
        "Safe to run twice and to kill: a re-run adds exactly what is missing. Prints a JSON report."
    )

    def add_arguments(self, parser):
        parser.add_argument("--until", help="Meter only up to this instant (rounded down to the hour).")
        parser.add_argument(
            "--rescan-from",
            help=(
                "Re-derive the ledger from this instant on: rows the facts no longer support are reversed, "
                "missing ones added. Not needed for late facts (every run finds what was recorded since "
                "the last); for repairs, e.g. after events were restored from a backup."
            ),
        )
        parser.add_argument("--batch-size", type=int, default=None, help="Jobs per transaction.")
        parser.add_argument(
            "--pause",
            type=float,
            default=0.0,
            help="Seconds to sleep between batches (go easy on a busy DB).",
        )

    def handle(self, *args, **options):
        if options["batch_size"] is not None and options["batch_size"] < 1:
            raise CommandError("--batch-size must be at least 1.")
        if options["pause"] < 0:
            raise CommandError("--pause cannot be negative.")
        report = usage_meter(
            until=_instant(options["until"], "--until") if options["until"] else None,
            rescan_from=_instant(options["rescan_from"], "--rescan-from") if options["rescan_from"] else None,
            batch_size=options["batch_size"],
            pause=options["pause"],
        )
        self.stdout.write(json.dumps(asdict(report), default=str))
