"""``close_month YYYY-MM``: meter to the month's end, build the statements and close them."""

import json
from dataclasses import asdict

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from billing.periods import parse_month
from billing.services import statement_close_month, statement_draft_month


def validation_text(error: ValidationError) -> str:
    """With the field names: the command's output is read by operators and scripts."""
    if hasattr(error, "error_dict"):
        return "; ".join(
            f"{field}: {' '.join(m for e in errs for m in e.messages)}"
            for field, errs in error.error_dict.items()
        )
    return " ".join(error.messages)


class Command(BaseCommand):
    help = (
        "Close a month (YYYY-MM, site time zone): meter up to its end, build one statement per "
        "department and close them. Idempotent: a closed month is reported, never rebuilt. "
        "--draft builds reviewable draft statements instead and closes nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("month", help="YYYY-MM")
        parser.add_argument("--draft", action="store_true", help="Build draft statements only.")

    def handle(self, *args, **options):
        try:
            month = parse_month(options["month"])
        except ValueError as error:
            raise CommandError(str(error)) from None
        try:
            if options["draft"]:
                statements, lines, total = statement_draft_month(month=month)
                result = {
                    "month": options["month"],
                    "draft": True,
                    "statements": statements,
                    "lines": lines,
                    "total": str(total),
                }
            else:
                result = asdict(statement_close_month(month=month))
        except ValidationError as error:
            raise CommandError(validation_text(error)) from None
        self.stdout.write(json.dumps(result, default=str))
