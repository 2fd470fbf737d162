"""``export_chargeback YYYY-MM --format csv|xlsx [--out PATH] [--encoding utf-8-sig|utf-8] [--no-bom]``:
the chargeback file of a closed month (the whole centre, ``chargeback-YYYY-MM-all.<format>``; CSV
with a UTF-8 byte order mark unless ``--encoding utf-8`` or ``--no-bom``)."""

from django.core.management.base import BaseCommand, CommandError

from billing import exports
from billing.periods import month_label, parse_month
from billing.selectors import is_closed


class Command(BaseCommand):
    help = "Write the chargeback file (one row per statement line) of a closed month as CSV or XLSX."

    def add_arguments(self, parser):
        parser.add_argument("month", help="YYYY-MM")
        parser.add_argument("--format", default="csv", help="csv (default) or xlsx")
        parser.add_argument(
            "--out", help="File to write; default chargeback-YYYY-MM-all.<format> (CSV: '-' for stdout)."
        )
        parser.add_argument(
            "--encoding",
            choices=list(exports.ENCODINGS),
            help="CSV: utf-8-sig (default: with the byte order mark Excel needs) or utf-8 (plain).",
        )
        parser.add_argument(
            "--no-bom",
            action="store_true",
            help="CSV without the UTF-8 byte order mark, as --encoding utf-8.",
        )

    def handle(self, *args, **options):
        fmt = options["format"].lower()
        if fmt not in exports.FORMATS:
            raise CommandError(f"Unknown format {options['format']!r}: use csv or xlsx.")
        try:
            month = parse_month(options["month"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        if not is_closed(month):
            raise CommandError(
                f"{month_label(month)} is not closed: run close_month {month_label(month)} first."
            )
        bom = exports.csv_bom(bom="0" if options["no_bom"] else None, encoding=options["encoding"])
        if bom is None:
            raise CommandError("--no-bom contradicts --encoding utf-8-sig.")
        out = options["out"] or exports.filename(month, fmt)
        rows = exports.chargeback_rows(month)
        if out == "-":
            if fmt != "csv":
                raise CommandError("Only CSV can be written to stdout.")
            exports.write_csv(rows, self.stdout, bom=bom)
            return
        if fmt == "csv":
            with open(out, "w", encoding="utf-8", newline="") as handle:
                exports.write_csv(rows, handle, bom=bom)
        else:
            with open(out, "wb") as handle:
                exports.write_xlsx(rows, handle, title=exports.scope_text(month, None))
        self.stderr.write(f"wrote {out}")
