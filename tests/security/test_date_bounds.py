"""Issue 18 item 9: months and dates a user gives are bounded to 2000-01 … 2100-12. Outside that
span — ``9999-12``, whose month has no end in Python's calendar, or year 0 — the API answers 400
on the field, a page shows a field error, a command stops with a ``CommandError``; nothing is
clamped and nothing is a 500."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from billing.periods import FIRST_MONTH, LAST_MONTH, MonthOutOfRange, next_month, parse_month
from portal.daterange import END, FIRST, in_range
from portal.models import ApprovalRequest
from quotas.models import Loan

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

FAR = ["9999-12", "9999-11", "2101-01", "1999-12", "0000-01"]
MONTH_URLS = ["/api/v1/statements/estimate/", "/api/v1/statements/", "/api/v1/chargeback/"]
RANGE_MESSAGE = "Months run from 2000-01 to 2100-12."


def test_item9_the_month_and_date_spans_agree():
    assert (date(2000, 1, 1), date(2100, 12, 1)) == (FIRST_MONTH, LAST_MONTH)
    assert FIRST.date() == FIRST_MONTH and END.date() == next_month(LAST_MONTH)
    assert parse_month("2000-01") == FIRST_MONTH and parse_month("2100-12") == LAST_MONTH
    for text in FAR:
        with pytest.raises(MonthOutOfRange):
            parse_month(text)


@pytest.mark.parametrize("month", FAR)
@pytest.mark.parametrize("url", MONTH_URLS)
def test_item9_a_month_outside_the_span_is_a_400_on_the_api(world, api, url, month):
    response = api(world.users["platform"]).get(url, {"month": month})
    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert response.json() == {"month": [RANGE_MESSAGE]}


@pytest.mark.parametrize("month", ["2000-01", "2100-12"])
def test_item9_the_first_and_last_months_are_answered(world, api, month):
    client = api(world.users["platform"])
    assert client.get("/api/v1/statements/estimate/", {"month": month}).status_code == 200
    assert client.get("/api/v1/statements/", {"month": month}).status_code == 200


@pytest.mark.parametrize("month", FAR)
def test_item9_a_month_outside_the_span_is_a_field_error_on_the_pages(world, month):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users["platform"])
    report = client.get("/reports/", {"month": month})
    assert report.status_code == 200 and RANGE_MESSAGE in report.content.decode()
    what_if = client.post("/what-if/", {"month": month, "change": "overcommit"})
    assert what_if.status_code == 200 and RANGE_MESSAGE in what_if.content.decode()


@pytest.mark.parametrize("command", ["close_month", "export_chargeback"])
@pytest.mark.parametrize("month", ["9999-12", "2101-01", "1999-12"])
def test_item9_month_commands_stop_with_a_command_error(world, command, month):
    with pytest.raises(CommandError, match="months run from 2000-01 to 2100-12"):
        call_command(command, month)


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["meter", "--until", "9999-12-31T23:00+00:00"], "--until"),
        (["meter", "--rescan-from", "0001-01-01T00:00+08:00"], "--rescan-from"),
        (["meter", "--until", "2026-13-01T00:00"], "--until"),
        (["render_queues", "--at", "9999-12-31T23:00+00:00"], "--at"),
    ],
)
def test_item9_date_time_options_outside_the_span_stop_with_a_command_error(world, args, option):
    with pytest.raises(CommandError, match=option):
        call_command(*args)


def _loan(world, **times):
    return {"lender": world.quota["B"].pk, "borrower": world.quota["A"].pk, "amount": "1", **times}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ends_at", "9999-12-31T10:00:00Z"),
        ("starts_at", "9999-12-30T10:00:00Z"),
        ("starts_at", "1999-12-31T00:00:00Z"),
        ("ends_at", "2101-01-01T00:00:00Z"),
    ],
)
def test_item9_loan_times_outside_the_span_are_a_400(world, api, field, value):
    times = {"starts_at": "2026-01-01T00:00:00Z", "ends_at": "2026-02-01T00:00:00Z", field: value}
    if field == "starts_at" and value.startswith("9999"):
        times["ends_at"] = "9999-12-31T10:00:00Z"
    admin = api(world.users["platform"]).post("/api/v1/loans/", _loan(world, **times), format="json")
    assert admin.status_code == 400 and field in admin.json(), admin.content
    request = api(world.users["a_admin"]).post(
        "/api/v1/loan-requests/", {**_loan(world, **times), "lender": "B"}, format="json"
    )
    assert request.status_code == 400 and field in request.json(), request.content
    assert (Loan.objects.count(), ApprovalRequest.objects.count()) == (0, 0)


def test_item9_loan_request_form_times_outside_the_span_are_field_errors(world):
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users["a_admin"])
    response = client.post(
        "/quotas/loans/request/",
        {
            "owner": f"department:{world.A.pk}",
            "lender": "B",
            "flavor": world.F.pk,
            "amount": "1",
            "starts_at": "9999-12-30T10:00",
            "ends_at": "9999-12-31T10:00",
        },
    )
    assert response.status_code == 200
    assert response.content.decode().count("Give a date from 2000-01-01 to 2100-12-31.") == 2
    assert ApprovalRequest.objects.count() == 0


def test_item9_in_range_is_half_open():
    assert in_range(FIRST) and not in_range(FIRST - timedelta(microseconds=1))
    assert in_range(END - timedelta(microseconds=1)) and not in_range(END)
    assert in_range(datetime(2026, 6, 1, tzinfo=UTC))
