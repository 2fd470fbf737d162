"""Issue 18 item 8: deeply nested JSON, as an attacker sends it (``[`` × 2,000, 4 KB), is a 400
on every JSON-accepting endpoint — anonymous or signed in — and a form error in the admin; never
the 500 of a ``RecursionError`` escaping the parser."""

from __future__ import annotations

import pytest
from django.test import Client

from jobs.models import Job
from portal.models import ApprovalRequest, Department
from portal.parsers import MAX_JSON_DEPTH, JsonTooDeep, json_loads_bounded
from quotas.models import Cluster

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

# The bodies as they go over the wire: 2,000 opening brackets, balanced (4,000 bytes) or not,
# one with a NUL the NUL check must look for (it parses JSON too), and a modest 100 levels that
# Python would parse but no request of ours needs.
HOSTILE = {
    "balanced": ("[" * 2000 + "]" * 2000).encode(),
    "open": b"[" * 2000,
    "objects": b'{"a":' * 2000 + b"1" + b"}" * 2000,
    "nul-inside": ("[" * 2000 + '"\\u0000"' + "]" * 2000).encode(),
    "hundred": ("[" * 100 + "]" * 100).encode(),
}


def _post(client, method: str, path: str, body: bytes):
    return getattr(client, method)(path, data=body, content_type="application/json")


def _refused_with_a_message(response):
    assert response.status_code == 400, (response.status_code, response.content[:300])
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail, response.json()


def _writes():
    return (Job.objects.count(), ApprovalRequest.objects.count(), Department.objects.count())


@pytest.mark.parametrize("shape", sorted(HOSTILE))
def test_item8_deep_json_to_the_anonymous_token_endpoint_is_a_400(world, api, shape):
    response = _post(api(None), "post", "/api/v1/auth/token/", HOSTILE[shape])
    _refused_with_a_message(response)


@pytest.mark.parametrize("shape", sorted(HOSTILE))
@pytest.mark.parametrize(
    ("persona", "method", "path"),
    [
        ("pa1_member", "post", "/api/v1/jobs/"),
        ("platform", "post", "/api/v1/departments/"),
        ("platform", "patch", "/api/v1/projects/{pa1}/"),
        ("a_admin", "post", "/api/v1/approvals/bulk-decide/"),
        ("a_admin", "post", "/api/v1/loan-requests/"),
        ("platform", "post", "/api/v1/clusters/"),
    ],
)
def test_item8_deep_json_to_signed_in_endpoints_is_a_400_and_writes_nothing(
    world, api, shape, persona, method, path
):
    before = _writes()
    response = _post(api(world.users[persona]), method, path.format(pa1=world.pa1.pk), HOSTILE[shape])
    _refused_with_a_message(response)
    assert _writes() == before


def test_item8_the_message_names_the_nesting_limit(world, api):
    response = _post(api(None), "post", "/api/v1/auth/token/", HOSTILE["balanced"])
    assert response.json() == {"detail": f"JSON parse error: nested deeper than {MAX_JSON_DEPTH} levels."}


def test_item8_deep_json_in_the_admins_json_field_is_a_form_error(world):
    cluster = Cluster.objects.get(name="c1")
    client = Client(HTTP_ACCEPT_LANGUAGE="en")
    client.force_login(world.users["platform"])
    url = f"/admin/quotas/cluster/{cluster.pk}/change/"
    form = {"name": "c1", "kind": "simulator", "description": "", "active": "on"}
    for deep in ("[" * 2000, "[" * 2000 + "]" * 2000):
        response = client.post(url, {**form, "config": deep})
        assert response.status_code == 200, response.status_code  # the form again, with the error
        assert f"Nested deeper than {MAX_JSON_DEPTH} levels." in response.content.decode()
    cluster.refresh_from_db()
    assert cluster.config == {}
    shallow = client.post(url, {**form, "config": '{"url": "http://sim:9400"}'})
    assert shallow.status_code == 302
    cluster.refresh_from_db()
    assert cluster.config == {"url": "http://sim:9400"}


@pytest.mark.parametrize("depth", [1, MAX_JSON_DEPTH])
def test_item8_nesting_up_to_the_limit_parses(depth):
    assert json_loads_bounded("[" * depth + "]" * depth) is not None
    assert json_loads_bounded(('{"k":' * depth + "0" + "}" * depth).encode()) is not None


@pytest.mark.parametrize("text", ["[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "[" * 5000])
def test_item8_nesting_past_the_limit_is_a_value_error(text):
    with pytest.raises(JsonTooDeep):
        json_loads_bounded(text)
    with pytest.raises(ValueError):  # as every caller already catches for malformed JSON
        json_loads_bounded(text)


def test_item8_wide_bodies_with_many_brackets_are_not_deep():
    wide = "[" + ",".join(["[1]"] * 5000) + "]"
    assert len(json_loads_bounded(wide)) == 5000
