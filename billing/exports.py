"""The chargeback file finance imports (DESIGN §7): CSV or XLSX, one row per statement line of
a closed month. The columns are a published interface — add at the end, never rename, remove
or reorder (docs/billing.md; ``tests/billing/test_exports.py`` pins them).

The CSV is UTF-8 with a byte order mark by default: without one, Excel on a Chinese Windows
desktop reads the file as GBK and shows every non-ASCII name as mojibake. ``bom=False`` leaves
it out for programs that do not expect one. The column ``covers`` says which departments the
file covers (``*``: the whole centre), so a file limited to a scope is never mistaken for the
centre's total — a department in it without lines had none; the file name says it too
(``filename``), and the XLSX's title. ``reason`` and ``attachment`` are filled on manual lines;
``normalised_card_hours`` (标准卡时, DESIGN §14) on lines drawn from the ledger. ``resource`` says
what a line bills (DESIGN §15): ``card`` (card-hours), ``core`` or ``gib`` — CPU or memory asked
beyond the share the cards include, its quantity in ``core_hours`` or ``gib_hours`` (the line's
``card_hours`` is 0 then), priced by ``rate`` per core-hour or GiB-hour.
The XLSX adds number formats, a frozen header and a total row (the CSV stays one header row and
data, for importers)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from datetime import date
from decimal import Decimal

from django.db import connection
from django.http import HttpResponse
from django.utils.translation import gettext as _

from portal.models import Department

from .periods import month_label
from .usage import range_days

COLUMNS = (
    "month",
    "department_code",
    "cost_centre",
    "project",
    "user",
    "flavor",
    "tier",
    "card_hours",
    "rate",
    "amount",
    "currency",
    "line_type",
    "original_month",
    "covers",
    "reason",
    "attachment",
    "normalised_card_hours",
    "resource",
    "core_hours",
    "gib_hours",
)
ALL_DEPARTMENTS = "*"  # ``covers`` of a file of the whole centre; no department code can be "*"
BOM = "\ufeff"
FORMATS = ("csv", "xlsx")
CONTENT_TYPES = {
    "csv": "text/csv; charset=utf-8",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}


def cost_centres() -> dict[int, str]:
    """Each department's cost centre, or its nearest ancestor's when it has none of its own."""
    rows = {
        pk: (parent, cc)
        for pk, parent, cc in Department.objects.values_list("id", "parent_id", "cost_centre")
    }
    found: dict[int, str] = {}
    for pk in rows:
        node, seen = pk, set()
        while node is not None and node not in seen and not rows[node][1]:
            seen.add(node)
            node = rows[node][0]
        found[pk] = rows[node][1] if node is not None and node in rows else ""
    return found


_ROWS = """
SELECT s.month, d.code, d.id, p.code, u.username, f.name, l.tier, l.card_hours, l.unit_price, l.amount,
       s.currency, l.kind, l.original_month, m.reason, m.attachment, l.normalised_card_hours, l.resource,
       l.core_hours, l.gib_hours
FROM billing_statementline l
JOIN billing_statement s ON s.id = l.statement_id
JOIN portal_department d ON d.id = s.department_id
LEFT JOIN quotas_flavor f ON f.id = l.flavor_id
LEFT JOIN billing_manualadjustment m ON m.id = l.manual_id
LEFT JOIN portal_project p ON p.id = l.project_id
LEFT JOIN portal_user u ON u.id = l.user_id
WHERE s.month = %(month)s AND (%(departments)s::bigint[] IS NULL OR s.department_id = ANY(%(departments)s))
ORDER BY d.code COLLATE "C",
         CASE l.kind WHEN 'usage' THEN 0 WHEN 'adjustment' THEN 1 WHEN 'reserved' THEN 2
                     WHEN 'lender_credit' THEN 3 ELSE 4 END,
         l.original_month NULLS FIRST, p.code COLLATE "C" NULLS FIRST, u.username COLLATE "C" NULLS FIRST,
         f.name COLLATE "C", l.tier, l.period_start,
         CASE l.resource WHEN 'card' THEN 0 WHEN 'core' THEN 1 ELSE 2 END, l.id
"""


def covers(departments: frozenset[int] | None) -> str:
    """The ``covers`` column: ``*`` for the whole centre, else the department codes, sorted and
    joined by ``|`` (codes never contain it)."""
    if departments is None:
        return ALL_DEPARTMENTS
    codes = Department.objects.filter(pk__in=departments).values_list("code", flat=True)
    return "|".join(sorted(codes))


def chargeback_rows(month: date, departments: frozenset[int] | None = None) -> Iterator[tuple]:
    """Rows in column order, for the statements of ``month`` (of ``departments`` only, when given):
    departments by code, then usage, adjustments, fees, credits. One query, no model objects —
    a month has tens of thousands of lines."""
    centres = cost_centres()
    scope = covers(departments)
    with connection.cursor() as cursor:
        cursor.execute(
            _ROWS, {"month": month, "departments": None if departments is None else sorted(departments)}
        )
        found = cursor.fetchall()
    for (
        statement_month,
        code,
        dept,
        project,
        user,
        flavor,
        tier,
        hours,
        rate,
        amount,
        currency,
        kind,
        original,
        reason,
        attachment,
        normalised_hours,
        resource,
        core_hours,
        gib_hours,
    ) in found:
        yield (
            month_label(statement_month),
            code,
            centres.get(dept, ""),
            project or "",
            user or "",
            flavor or "",
            tier,
            hours,
            rate,
            amount,
            currency,
            kind,
            month_label(original) if original else "",
            scope,
            reason or "",
            attachment or "",
            normalised_hours,
            resource,
            core_hours,
            gib_hours,
        )


def _text(value) -> str:
    return "" if value is None else str(value)


def write_csv(rows: Iterable[tuple], out: io.TextIOBase, *, bom: bool = True) -> None:
    writer = csv.writer(out, lineterminator="\n")
    # The mark goes out with the header line: a management command's stdout would end a write
    # of the mark alone with a newline.
    writer.writerow([BOM + COLUMNS[0], *COLUMNS[1:]] if bom else COLUMNS)
    for row in rows:
        writer.writerow([_text(v) for v in row])


# Column positions of the numbers (XLSX number formats, the total row).
CARD_HOURS, RATE, AMOUNT, CURRENCY, NORMALISED, CORE_HOURS, GIB_HOURS = (
    COLUMNS.index(c)
    for c in ("card_hours", "rate", "amount", "currency", "normalised_card_hours", "core_hours", "gib_hours")
)
NUMBER_FORMATS = {
    CARD_HOURS: "0.000000", RATE: "0.0000", AMOUNT: "0.00", NORMALISED: "0.000000", CORE_HOURS: "0.000000",
    GIB_HOURS: "0.000000",
}
TOTAL_LABEL = "total"


def write_xlsx(rows: Iterable[tuple], out, *, title: str = "") -> None:
    """Write-only mode streams rows without building the sheet in memory. Decimals stay exact
    numbers in the cell (openpyxl writes them as numbers, not text) with number formats (money
    0.00, card-hours 6 decimals, rates 4); the header row is frozen; the last row is the total
    (``total`` in the first column, Σ card-hours, core-hours, GiB-hours and Σ amount of the lines
    above). ``title`` —
    the month and the departments covered — goes into the workbook's title and subject."""
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font

    book = Workbook(write_only=True)
    book.properties.title = book.properties.subject = title or None
    sheet = book.create_sheet("chargeback")
    sheet.freeze_panes = "A2"
    bold = Font(bold=True)
    sheet.append([_styled(WriteOnlyCell(sheet, value=name), font=bold) for name in COLUMNS])
    summed = (CARD_HOURS, NORMALISED, AMOUNT, CORE_HOURS, GIB_HOURS)
    sums, currency = dict.fromkeys(summed, Decimal(0)), ""
    sums[AMOUNT] = Decimal("0.00")
    for row in rows:
        for index in summed:
            sums[index] += row[index] or 0
        currency = currency or row[CURRENCY]
        sheet.append([_xlsx_cell(sheet, i, v) for i, v in enumerate(row)])
    total = [TOTAL_LABEL, *[""] * (len(COLUMNS) - 1)]
    for index in summed:
        total[index] = sums[index]
    total[CURRENCY] = currency
    sheet.append([_styled(_xlsx_cell(sheet, i, v), font=bold) for i, v in enumerate(total)])
    book.save(out)


def _xlsx_cell(sheet, index: int, value):
    """A number column's value as a cell with its format; anything else as it is."""
    if index not in NUMBER_FORMATS or value is None or value == "":
        return "" if value is None else value
    from openpyxl.cell import WriteOnlyCell

    return _styled(WriteOnlyCell(sheet, value=value), number_format=NUMBER_FORMATS[index])


def _styled(cell, **style):
    if isinstance(cell, str):
        return cell  # an empty cell: nothing to style
    for name, value in style.items():
        setattr(cell, name, value)
    return cell


def render(rows: Iterable[tuple], fmt: str, *, bom: bool = True, title: str = "") -> bytes:
    if fmt == "csv":
        buffer = io.StringIO()
        write_csv(rows, buffer, bom=bom)
        return buffer.getvalue().encode("utf-8")
    if fmt == "xlsx":
        binary = io.BytesIO()
        write_xlsx(rows, binary, title=title)
        return binary.getvalue()
    raise ValueError(f"unknown format {fmt!r}: use csv or xlsx")


def bom_flag(raw: str | None) -> bool | None:
    """``?bom=``: absent or ``1``/``true``/``yes`` → with a byte order mark, ``0``/``false``/``no``
    → without; anything else None (the caller answers 400)."""
    value = (raw or "1").strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("0", "false", "no"):
        return False
    return None


ENCODINGS = {"utf-8-sig": True, "utf-8": False}  # CSV encoding → with a byte order mark


def csv_bom(*, bom: str | None, encoding: str | None) -> bool | None:
    """The CSV's byte order mark from ``?bom=`` and/or ``?encoding=utf-8|utf-8-sig`` (default:
    with). None when a value is unknown or the two disagree (the caller answers 400)."""
    wanted = set()
    if bom not in (None, ""):
        wanted.add(bom_flag(bom))
    if encoding not in (None, ""):
        wanted.add(ENCODINGS.get(encoding.strip().lower()))
    if None in wanted or len(wanted) > 1:
        return None
    return wanted.pop() if wanted else True


def encoding_error() -> str:
    return _("Use encoding=utf-8-sig (the default, with a byte order mark) or utf-8, or bom=1 or 0.")


def scope_codes(departments: frozenset[int] | None) -> list[str] | None:
    """The codes of the departments a file covers, sorted (None: the whole centre)."""
    if departments is None:
        return None
    return sorted(Department.objects.filter(pk__in=departments).values_list("code", flat=True))


def scope_text(month: date, departments: frozenset[int] | None) -> str:
    """The XLSX title: the month and the departments covered, in English like the columns."""
    codes = scope_codes(departments)
    covered = "all departments" if codes is None else "departments " + ", ".join(codes)
    return f"Chargeback {month_label(month)}: {covered}"


def filename(month: date, fmt: str, departments: frozenset[int] | None = None) -> str:
    """``chargeback-2026-11-all.csv`` for the whole centre; for part of it ``…-dept-<code>``, the
    highest department covered (the root of the subtree, ties by code), ``+N`` when N more
    departments are in the file: ``chargeback-2026-11-dept-ai+2.xlsx``. Codes are letters,
    digits, ``.``, ``_`` and ``-``: safe in a file name."""
    if departments is None:
        return f"chargeback-{month_label(month)}-all.{fmt}"
    rows = dict(Department.objects.filter(pk__in=departments).values_list("code", "parent_id"))
    ids = dict(Department.objects.filter(pk__in=departments).values_list("id", "code"))
    roots = sorted(code for code, parent in rows.items() if parent not in ids) or sorted(rows) or ["none"]
    more = f"+{len(rows) - 1}" if len(rows) > 1 else ""
    return f"chargeback-{month_label(month)}-dept-{roots[0]}{more}.{fmt}"


def chargeback_response(
    month: date, departments: frozenset[int] | None, fmt: str, *, bom: bool = True
) -> HttpResponse:
    """The chargeback file of ``month`` for ``departments`` (None: the whole centre) as a
    download; its name and the XLSX's title say which departments it covers."""
    rows = chargeback_rows(month, departments)
    body = render(rows, fmt, bom=bom, title=scope_text(month, departments))
    response = HttpResponse(body, content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{filename(month, fmt, departments)}"'
    return response


# --- the usage explorer's files (billing.usage) -----------------------------------------------------

USAGE_COLUMNS = (
    "card_hours",
    "normalised_card_hours",
    "cost",
    "currency",
    "sampled_card_hours",
    "effective_card_hours",
    "utilisation_pct",
    "jobs_started",
    "wait_mean_minutes",
    "wait_p95_minutes",
    "core_hours",  # issue 33: the CPU and memory the allocations held (added at the end)
    "gib_hours",
)
USAGE_FORMATS = {
    "card_hours": "0.000000",
    "normalised_card_hours": "0.000000",
    "cost": "0.00",
    "sampled_card_hours": "0.000000",
    "effective_card_hours": "0.000000",
    "utilisation_pct": "0.0",
    "jobs_started": "0",
    "wait_mean_minutes": "0.0",
    "wait_p95_minutes": "0.0",
    "core_hours": "0.000000",
    "gib_hours": "0.000000",
}


def _minutes(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(str(round(value, 1)))


def usage_values(row, report) -> list:
    """One row's numbers in USAGE_COLUMNS order (Decimals; None where there is no figure)."""
    return [
        row.card_hours,
        row.normalised_card_hours,
        row.cost if report.money else None,
        report.currency if report.money and row.cost is not None else None,
        row.sampled_card_hours,
        row.effective_card_hours,
        row.utilisation_pct,
        row.jobs_started,
        _minutes(row.wait_mean_minutes),
        _minutes(row.wait_p95_minutes),
        row.core_hours,
        row.gib_hours,
    ]


def usage_file(report, fmt: str, *, bom: bool = True) -> bytes:
    """The explorer's table as CSV (UTF-8, byte order mark by default, one header row and the
    rows) or XLSX (number formats, frozen header, a ``total`` row)."""
    header = [*report.query.group_by, *USAGE_COLUMNS]
    rows = [[*r.labels, *usage_values(r, report)] for r in report.rows]
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([BOM + header[0], *header[1:]] if bom else header)
        for row in rows:
            writer.writerow([_text(v) for v in row])
        return buffer.getvalue().encode("utf-8")
    if fmt != "xlsx":
        raise ValueError(f"unknown format {fmt!r}: use csv or xlsx")
    from openpyxl import Workbook
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font

    book = Workbook(write_only=True)
    book.properties.title = usage_title(report)
    sheet = book.create_sheet("usage")
    sheet.freeze_panes = "A2"
    bold = Font(bold=True)
    levels = len(report.query.group_by)

    def cells(values: list, **style) -> list:
        out = []
        for i, value in enumerate(values):
            if value is None or value == "":
                out.append("")
                continue
            cell = WriteOnlyCell(sheet, value=value)
            if i >= levels and header[i] in USAGE_FORMATS:
                cell.number_format = USAGE_FORMATS[header[i]]
            for name, setting in style.items():
                setattr(cell, name, setting)
            out.append(cell)
        return out

    sheet.append(cells(header, font=bold))
    for row in rows:
        sheet.append(cells(row))
    total = ["total", *[""] * (levels - 1), *usage_values(report.total, report)]
    sheet.append(cells(total, font=bold))
    binary = io.BytesIO()
    book.save(binary)
    return binary.getvalue()


def usage_title(report) -> str:
    first, last = range_days(report.query.start, report.query.end)
    groups = ", ".join(report.query.group_by)
    return f"Usage {first.isoformat()} to {last.isoformat()} by {groups}"


def usage_filename(report, fmt: str) -> str:
    # The days as the page's form shows them: the last one included (issue 32 item 3).
    first, last = range_days(report.query.start, report.query.end)
    return f"usage-{first.isoformat()}-{last.isoformat()}-{'-'.join(report.query.group_by)}.{fmt}"


def usage_response(report, fmt: str, *, bom: bool = True) -> HttpResponse:
    response = HttpResponse(usage_file(report, fmt, bom=bom), content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{usage_filename(report, fmt)}"'
    return response
