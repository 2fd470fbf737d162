"""Issue 32 items 19 and 20: JSON that parses but holds no value of ours — a number beyond a double
(``1e999`` decodes to ``inf``) and an escaped lone surrogate (``"\\ud800"``, a string UTF-8 cannot
encode) — is a 400 saying so, on every endpoint, and writes nothing. Before: ``inf`` in an id
field was an ``OverflowError`` (500) on every write endpoint that takes an id, and a choice
field's error, which echoes the value, crashed while it was rendered (500). The generator over
the whole schema is tests/security/test_hostile_schema.py; these are the probe's own findings."""

from __future__ import annotations

import json

import pytest

from billing.models import Budget, ManualAdjustment
from jobs.models import Job, JobTemplate
from jobs.native.models import ExternalSource
from portal.models import DirectoryRule, Membership, Webhook
from portal.parsers import JsonNotRepresentable, json_loads_bounded
from quotas.models import Loan, QuotaNode, QuotaWindow

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]


def _counts():
    return tuple(m.objects.count() for m in (Job, JobTemplate, Membership, QuotaNode, Budget, Loan,
                                             QuotaWindow, DirectoryRule, ManualAdjustment, Webhook))


def _send(client, method: str, path: str, raw: str):
    return client.generic(method, path, raw, content_type="application/json")


# (persona, method, path, id field): every write endpoint the probe named that takes an id.
ID_FIELDS = [
    ("pa1_member", "POST", "/api/v1/jobs/", "project"),
    ("pa1_member", "POST", "/api/v1/job-templates/", "project"),
    ("platform", "POST", "/api/v1/memberships/", "project"),
    ("platform", "POST", "/api/v1/quota-nodes/", "department"),
    ("platform", "POST", "/api/v1/budgets/", "department"),
    ("platform", "POST", "/api/v1/loans/", "borrower"),
    ("a_admin", "POST", "/api/v1/loan-requests/", "borrower"),
    ("platform", "POST", "/api/v1/quota-windows/", "quota_node"),
    ("platform", "POST", "/api/v1/directory-rules/", "department"),
    ("platform", "POST", "/api/v1/manual-adjustments/", "department"),
    ("platform", "POST", "/api/v1/projects/{pa1}/move/", "department"),
    ("platform", "POST", "/api/v1/external-sources/{source}/map/", "project"),
]


@pytest.fixture
def source(world):
    from quotas.models import Cluster

    cluster = Cluster.objects.get(name="c1")
    return ExternalSource.objects.create(cluster=cluster, kind="slurm_account", name="x")


@pytest.mark.parametrize("number", ["1e999", "-1e999", "1E400"])
@pytest.mark.parametrize(("persona", "method", "path", "field"), ID_FIELDS, ids=lambda v: str(v))
def test_item19_a_number_beyond_a_double_in_an_id_is_a_400(world, api, source, persona, method, path,
                                                          field, number):
    before = _counts()
    url = path.format(pa1=world.pa1.pk, source=source.pk)
    response = _send(api(world.users[persona]), method, url, f'{{"{field}": {number}}}')
    assert response.status_code == 400, (response.status_code, response.content[:200])
    assert response.json() == {"detail": f"JSON parse error - the number {number} is out of range"}
    assert _counts() == before


# (persona, method, path, choice field): the probe's findings for lone surrogates.
CHOICE_FIELDS = [
    ("pa1_member", "POST", "/api/v1/webhooks/", "kind"),
    ("pa1_member", "POST", "/api/v1/webhooks/", "topics"),
    ("pa1_member", "POST", "/api/v1/jobs/", "kind"),
    ("platform", "POST", "/api/v1/memberships/", "role"),
    ("platform", "POST", "/api/v1/directory-rules/", "directory"),
    ("platform", "POST", "/api/v1/manual-adjustments/", "kind"),
]


@pytest.mark.parametrize(("persona", "method", "path", "field"), CHOICE_FIELDS, ids=lambda v: str(v))
@pytest.mark.parametrize("text", ['"\\ud800"', '"ok\\udfff"', '["\\ud83d"]'])
def test_item20_a_lone_surrogate_in_a_choice_field_is_a_400(world, api, persona, method, path, field, text):
    before = _counts()
    response = _send(api(world.users[persona]), method, path, f'{{"{field}": {text}}}')
    assert response.status_code == 400, (response.status_code, response.content[:200])
    detail = response.json()["detail"]  # valid UTF-8 JSON: the message names the escape, not the char
    assert detail.startswith("JSON parse error - \\ud")
    assert detail.endswith("is a lone surrogate, not a character")
    assert _counts() == before


def test_item20_a_pair_of_surrogates_is_one_character_and_accepted(world, api):
    """``\\ud83d\\ude80`` is the escape of 🚀: a real character, not refused by the parser."""
    assert json_loads_bounded('"\\ud83d\\ude80"') == "🚀"
    response = _send(api(world.users["pa1_member"]), "POST", "/api/v1/webhooks/",
                     json.dumps({"kind": "wecom", "name": "rocket \U0001f680", "url": "https://hooks.example.com/x"}))
    assert response.status_code == 201, response.content[:200]
    assert Webhook.objects.get().name == "rocket 🚀"


@pytest.mark.parametrize("text", ['{"a": 1e999}', '[1.5e308, 1e309]', '{"\\udc00": 1}', b'"\xed\xa0\x80"'])
def test_item19_20_the_bounded_loader_refuses_what_no_value_holds(text):
    with pytest.raises(JsonNotRepresentable):
        json_loads_bounded(text)
    with pytest.raises(ValueError):  # as every caller already catches for malformed JSON
        json_loads_bounded(text)


def test_item19_finite_numbers_still_parse():
    assert json_loads_bounded("[1e308, -1e308, 1.5, 12345678901234567890]") == [
        1e308, -1e308, 1.5, 12345678901234567890]
