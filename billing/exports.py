"""The chargeback file finance imports (DESIGN §7): CSV or XLSX, one row per statement line of
a closed month. The columns are a published interface — add at the end, never rename, remove
or reorder (docs/billing.md; ``tests/billing/test_exports.py`` pins them).

The CSV is UTF-8 with a byte order mark by default: without one, Excel on a Chinese Windows
desktop reads the file as GBK and shows every non-ASCII name as mojibake. ``bom=False`` leaves
it out for programs that do not expect one. The last column, ``covers``, says which departments
the file covers (``*``: the whole centre), so a file limited to a scope is never mistaken for
the centre's total — a department in it without lines had none."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from datetime import date

from django.db import connection

from portal.models import Department

from .periods import month_label

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
       s.currency, l.kind, l.original_month
FROM billing_statementline l
JOIN billing_statement s ON s.id = l.statement_id
JOIN portal_department d ON d.id = s.department_id
JOIN quotas_flavor f ON f.id = l.flavor_id
LEFT JOIN portal_project p ON p.id = l.project_id
LEFT JOIN portal_user u ON u.id = l.user_id
WHERE s.month = %(month)s AND (%(departments)s::bigint[] IS NULL OR s.department_id = ANY(%(departments)s))
ORDER BY d.code COLLATE "C",
         CASE l.kind WHEN 'usage' THEN 0 WHEN 'adjustment' THEN 1 WHEN 'reserved' THEN 2 ELSE 3 END,
         l.original_month NULLS FIRST, p.code COLLATE "C" NULLS FIRST, u.username COLLATE "C" NULLS FIRST,
         f.name COLLATE "C", l.tier, l.period_start, l.id
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
    ) in found:
        yield (
            month_label(statement_month),
            code,
            centres.get(dept, ""),
            project or "",
            user or "",
            flavor,
            tier,
            hours,
            rate,
            amount,
            currency,
            kind,
            month_label(original) if original else "",
            scope,
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


def write_xlsx(rows: Iterable[tuple], out) -> None:
    """Write-only mode streams rows without building the sheet in memory. Decimals stay exact
    numbers in the cell (openpyxl writes them as numbers, not text)."""
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet("chargeback")
    sheet.append(list(COLUMNS))
    for row in rows:
        sheet.append(["" if v is None else v for v in row])
    book.save(out)


def render(rows: Iterable[tuple], fmt: str, *, bom: bool = True) -> bytes:
    if fmt == "csv":
        buffer = io.StringIO()
        write_csv(rows, buffer, bom=bom)
        return buffer.getvalue().encode("utf-8")
    if fmt == "xlsx":
        binary = io.BytesIO()
        write_xlsx(rows, binary)
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


def filename(month: date, fmt: str) -> str:
    return f"chargeback-{month_label(month)}.{fmt}"
