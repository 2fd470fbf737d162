"""``/api/v1/quota-tree/{kind}/{id}/fair-share/`` (DESIGN §16) for every persona: who sees a node's
shares (404 otherwise), only platform admins set or clear a weight, bad weights are a 400 that
changes nothing, DELETE returns to the default (the quota in normalised cards)."""

from decimal import Decimal

import pytest
from django.urls import reverse

from quotas.models import FairShareWeight, Flavor, QuotaNode

pytestmark = pytest.mark.django_db


def _url(kind, pk):
    return reverse("api:quota-fair-share", args=[kind, pk])


def test_the_default_is_the_quota_in_normalised_cards(world, api):
    h = Flavor.objects.create(name="H", vendor="nvidia", model="H", memory_mib=1, k8s_resource_name="x",
                              relative_throughput=Decimal("2.5"))
    QuotaNode.objects.create(flavor=h, project=world.pb, quota=Decimal(2))
    r = api(world.users["platform"]).get(_url("project", world.pb.pk))
    assert r.status_code == 200, r.content
    body = r.json()
    assert (body["default_shares"], body["shares"]) == (13.0, 13.0)
    assert (body["weight"], body["weighted"]) == (None, False)
    assert (body["kind"], body["id"], body["code"]) == ("project", world.pb.pk, "pb")


@pytest.mark.parametrize("persona, kind, code, status", [
    ("platform", "department", "A", 200), ("auditor", "project", "pb", 200),
    ("a_admin", "department", "A1", 200), ("a_admin", "project", "pa1", 200),
    ("a_admin", "department", "B", 404), ("a_admin", "project", "pb", 404),
    ("pa1_member", "project", "pa1", 200), ("pa1_member", "project", "pb", 404),
    ("outsider", "department", "A", 404), ("platform", "team", "A", 404),
])
def test_a_node_is_seen_only_through_the_visibility_selector(world, api, persona, kind, code, status):
    owner = getattr(world, code) if kind != "team" else world.A
    assert api(world.users[persona]).get(_url(kind, owner.pk)).status_code == status


@pytest.mark.parametrize("persona", ["auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"])
def test_only_platform_admins_set_or_clear_a_weight(world, api, persona):
    client = api(world.users[persona])
    assert client.put(_url("project", world.pa1.pk), {"weight": 3}, format="json").status_code == 403
    FairShareWeight.objects.create(project=world.pa1, weight=2, set_at="2026-12-01T00:00Z")
    assert client.delete(_url("project", world.pa1.pk)).status_code == 403
    assert FairShareWeight.objects.get().weight == 2


def test_an_admin_sets_a_weight_and_delete_returns_to_the_default(world, api):
    client = api(world.users["platform"])
    r = client.put(_url("department", world.B.pk), {"weight": "2.5"}, format="json")
    assert r.status_code == 200, r.content
    assert (r.json()["shares"], r.json()["weight"], r.json()["weighted"], r.json()["set_by"]) == (
        2.5, "2.500", True, "platform")
    assert client.get(_url("department", world.B.pk)).json()["shares"] == 2.5
    r = client.delete(_url("department", world.B.pk))
    assert r.status_code == 200 and r.json()["shares"] == 8.0 and r.json()["weight"] is None
    assert not FairShareWeight.objects.exists()


@pytest.mark.parametrize("weight", [0, -1, "0", "abc", "NaN", "Infinity", "1e7", 1000001, "0.0001", True,
                                    None, [], {"w": 1}, ""])
def test_bad_weights_are_a_400_and_change_nothing(world, api, weight):
    FairShareWeight.objects.create(project=world.pb, weight=4, set_at="2026-12-01T00:00Z")
    r = api(world.users["platform"]).put(_url("project", world.pb.pk), {"weight": weight}, format="json")
    assert r.status_code == 400, (weight, r.content)
    assert "weight" in r.json()
    assert FairShareWeight.objects.get().weight == 4


def test_a_missing_weight_is_a_400(world, api):
    r = api(world.users["platform"]).put(_url("project", world.pb.pk), {}, format="json")
    assert r.status_code == 400 and "weight" in r.json()
