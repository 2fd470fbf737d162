"""Manual adjustments through the API and the billing pages (issue 19, item 5), including the
requests an attacker would send: self-approval, another tenant's department, hostile amounts."""

from datetime import date
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from billing.models import ManualAdjustment, ManualState, Statement
from billing.services import statement_close_month
from portal.models import Membership, Role, User

from .conftest import local, rates
from .ledger_rows import ledger

pytestmark = pytest.mark.django_db
NOV = date(2026, 11, 1)
LIST = "api:manualadjustment-list"


@pytest.fixture
def a_finance2(world):
    user = User.objects.create_user(username="a_finance2", password="pw-a_finance2")
    Membership.objects.create(user=user, role=Role.FINANCE, department=world.A)
    return user


def body(world, **kw):
    return {
        "department": world.A1.pk,
        "kind": "credit",
        "amount": "150.00",
        "reason": "GPU outage",
        "attachment": "OA-2026-1123.pdf",
        **kw,
    }


def test_propose_then_a_second_finance_user_approves(world, api, a_finance2):
    created = api(world.users["a_finance"]).post(
        reverse(LIST), body(world, project=world.pa1.pk), format="json"
    )
    assert created.status_code == 201, created.content
    data = created.json()
    assert (
        data["state"],
        data["amount"],
        data["signed_amount"],
        data["attachment"],
        data["proposed_by"],
    ) == ("proposed", "150.00", "-150.00", "OA-2026-1123.pdf", "a_finance")
    decide = reverse("api:manualadjustment-decide", args=[data["id"]])
    approved = api(a_finance2).post(decide, {"approve": True, "note": "checked"}, format="json")
    assert approved.status_code == 200, approved.content
    assert (approved.json()["state"], approved.json()["decided_by"]) == ("approved", "a_finance2")
    again = api(world.users["platform"]).post(decide, {"approve": False}, format="json")
    assert again.status_code == 409


@pytest.mark.parametrize("persona", ["a_finance", "platform"])
def test_the_proposer_cannot_approve_their_own(world, api, persona):
    """The request an attacker sends: the same token approves what it proposed — refused, also
    with a forged "decided_by" in the body."""
    client = api(world.users[persona])
    pk = client.post(reverse(LIST), body(world), format="json").json()["id"]
    decide = reverse("api:manualadjustment-decide", args=[pk])
    forged = {"approve": True, "decided_by": world.users["platform"].pk, "proposed_by": 0}
    response = client.post(decide, forged, format="json")
    assert response.status_code == 403
    assert ManualAdjustment.objects.get(pk=pk).state == ManualState.PROPOSED


def test_another_tenants_department_and_adjustment(world, api):
    b_client = api(world.users["b_finance"])
    response = b_client.post(reverse(LIST), body(world), format="json")  # A1 is not B's
    assert response.status_code == 400 and "department" in response.json()
    pk = api(world.users["a_finance"]).post(reverse(LIST), body(world), format="json").json()["id"]
    assert b_client.get(reverse("api:manualadjustment-detail", args=[pk])).status_code == 404
    decide = reverse("api:manualadjustment-decide", args=[pk])
    assert b_client.post(decide, {"approve": True}, format="json").status_code == 404
    assert b_client.get(reverse(LIST)).json()["count"] == 0
    # A project of another department under one's own department: refused too.
    response = api(world.users["a_finance"]).post(
        reverse(LIST), body(world, project=world.pb.pk), format="json"
    )
    assert response.status_code == 400 and "project" in response.json()
    # Readers of statements who are not finance cannot propose.
    assert api(world.users["a_admin"]).post(reverse(LIST), body(world), format="json").status_code == 400
    assert api(world.users["pa1_member"]).get(reverse(LIST)).json()["count"] == 0


@pytest.mark.parametrize(
    "amount",
    [
        "-0",
        "-0.00",
        "0",
        "-150",
        "NaN",
        "nan",
        "Infinity",
        "-Infinity",
        "1e400",
        "99999999999999999999",
        "100000000.01",
        "1.001",
        "1,5",
        "",
        " ",
        "0x10",
        None,
        True,
        [],
        {},
    ],
)
def test_hostile_amounts_are_400_and_write_nothing(world, api, amount):
    response = api(world.users["a_finance"]).post(reverse(LIST), body(world, amount=amount), format="json")
    assert response.status_code == 400, (amount, response.content)
    assert "amount" in response.json()
    assert not ManualAdjustment.objects.exists()


def test_a_json_nan_literal_is_400(world, api):
    raw = f'{{"department": {world.A1.pk}, "kind": "debit", "amount": NaN, "reason": "x"}}'
    response = api(world.users["a_finance"]).post(reverse(LIST), raw, content_type="application/json")
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", "refund"),
        ("reason", ""),
        ("reason", "x" * 501),
        ("attachment", "y" * 201),
        ("attachment", "a\x00b"),
        ("department", 999999),
        ("department", "A1"),
    ],
)
def test_other_bad_fields_are_400(world, api, field, value):
    response = api(world.users["a_finance"]).post(reverse(LIST), body(world, **{field: value}), format="json")
    assert response.status_code == 400 and field in response.json(), response.content


def test_the_statement_json_and_page_show_the_reason_and_attachment(world, history, api, a_finance2):
    rates(world.F, "12", "9.6")
    ledger(history, world.pa1, world.F, local(2026, 11, 3, 10), 3600)
    pk = api(world.users["a_finance"]).post(reverse(LIST), body(world), format="json").json()["id"]
    api(a_finance2).post(reverse("api:manualadjustment-decide", args=[pk]), {"approve": True}, format="json")
    statement_close_month(month=NOV, now=local(2026, 12, 2))
    statement = Statement.objects.get(month=NOV, department=world.A1)
    detail = api(world.users["a_finance"]).get(reverse("api:statement-detail", args=[statement.pk])).json()
    assert detail["total"] == "-138.00"  # 12.00 of usage, a 150.00 credit: below zero
    manual_line = [line for line in detail["lines"] if line["kind"] == "manual"]
    assert manual_line == [
        {
            **manual_line[0],
            "amount": "-150.00",
            "reason": "GPU outage",
            "attachment": "OA-2026-1123.pdf",
            "manual": pk,
            "flavor": None,
            "card_hours": "0.000000",
            "unit_price": None,
        }
    ]
    page = Client(HTTP_ACCEPT_LANGUAGE="en")
    page.force_login(world.users["a_finance"])
    html = page.get(reverse("billing-statement", args=[statement.pk])).content.decode()
    assert "GPU outage" in html and "OA-2026-1123.pdf" in html and "-150.00" in html


# --- the page ------------------------------------------------------------------------------------


def _page(user, language="en"):
    client = Client(HTTP_ACCEPT_LANGUAGE=language)
    client.force_login(user)
    return client


def test_the_page_is_for_finance_and_platform_admins_only(world):
    url = reverse("billing-adjustments")
    for persona in ("a_finance", "platform"):
        assert _page(world.users[persona]).get(url).status_code == 200
    for persona in ("a_admin", "auditor", "pa1_member", "outsider"):
        assert _page(world.users[persona]).get(url).status_code == 404


def test_propose_and_decide_on_the_page(world, a_finance2):
    url = reverse("billing-adjustments")
    proposer = _page(world.users["a_finance"])
    form = {
        "department": world.A1.pk,
        "project": "",
        "kind": "debit",
        "amount": "20.5",
        "reason": "extra storage",
        "attachment": "OA-7.pdf",
    }
    assert proposer.post(url, form).status_code == 302
    adjustment = ManualAdjustment.objects.get()
    assert (adjustment.amount, adjustment.kind, adjustment.attachment) == (
        Decimal("20.50"),
        "debit",
        "OA-7.pdf",
    )
    html = proposer.get(url).content.decode()
    assert "extra storage" in html
    assert (
        reverse("billing-adjustment-decide", args=[adjustment.pk]) not in html
    )  # no buttons for the proposer
    decide = reverse("billing-adjustment-decide", args=[adjustment.pk])
    proposer.post(decide, {"decision": "approve"})  # the forged POST: refused
    assert ManualAdjustment.objects.get().state == ManualState.PROPOSED
    second = _page(a_finance2)
    assert decide in second.get(url).content.decode()
    assert second.post(decide, {"decision": "approve", "note": "ok"}).status_code == 302
    assert ManualAdjustment.objects.get().state == ManualState.APPROVED
    assert _page(world.users["b_finance"]).post(decide, {"decision": "reject"}).status_code == 404


@pytest.mark.parametrize("amount", ["-0", "NaN", "Infinity", "1e400", "-3", "1.001"])
def test_the_form_shows_bad_amounts_as_field_errors(world, amount):
    form = {"department": world.A1.pk, "kind": "credit", "amount": amount, "reason": "r"}
    response = _page(world.users["a_finance"]).post(reverse("billing-adjustments"), form)
    assert response.status_code == 200 and response.context["form"].errors["amount"]
    assert not ManualAdjustment.objects.exists()


def test_the_page_speaks_chinese(world):
    html = _page(world.users["a_finance"], "zh-hans").get(reverse("billing-adjustments")).content.decode()
    assert "手工调整" in html and "原因" in html


def test_item11_the_form_speaks_the_pages_language_and_names_what_no_project_means(world):
    """Issue 32 item 11: the amount's help text was translated once, at import, in the site
    language — the English page showed it in Chinese; the project's empty option read "None"."""
    url = reverse("billing-adjustments")
    english = _page(world.users["a_finance"]).get(url).content.decode()
    assert "In CNY, more than zero, at most two decimals" in english
    assert "— none: the whole department —" in english and ">None<" not in english
    chinese = _page(world.users["a_finance"], "zh-hans").get(url).content.decode()
    assert "单位 CNY，大于零" in chinese and "— 无：整个部门 —" in chinese
