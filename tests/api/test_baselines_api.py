"""Software baselines (DESIGN §15, docs/resources.md "Software baseline") through the API: read
by everyone signed in, written by platform admins only (hostile writes change nothing), bad input a
400 naming the field, a cluster's baseline overriding the flavor's, the node API and the drift
report carrying each node's drift, and ``manage.py baseline_drift``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from quotas.models import Cluster, Node, SoftwareBaseline

pytestmark = pytest.mark.django_db

NOT_ADMINS = ["auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member", "pb_member", "outsider"]
LIST = reverse("api:baseline-list")
DRIVER_SHAPE = "A driver version such as 535.104.05."


def _versions(**nodes):
    for name, (driver, cuda) in nodes.items():
        Node.objects.filter(name=name).update(driver_version=driver, cuda_version=cuda)


def _drift_by_node(client) -> dict:
    body = client.get(reverse("api:node-occupancy")).json()["results"]
    return {n["name"]: n["drift"] for n in body}


def test_everyone_reads_baselines_and_only_platform_admins_write_them(world, api):
    made = SoftwareBaseline.objects.create(flavor=world.F, driver_version="535.104.05", cuda_version="12.2")
    detail = reverse("api:baseline-detail", args=[made.pk])
    for persona in NOT_ADMINS:
        client = api(world.users[persona])
        listed = client.get(LIST).json()["results"]
        assert listed == [{"id": made.pk, "flavor": "F", "cluster": None,
                           "driver_version": "535.104.05", "cuda_version": "12.2"}], persona
        body = {"flavor": "F", "cluster": "c1", "cuda_version": "12.4"}
        assert client.post(LIST, body, format="json").status_code == 403, persona
        assert client.patch(detail, {"cuda_version": "12.4"}, format="json").status_code == 403, persona
        assert client.delete(detail).status_code == 403, persona
    assert api(None).get(LIST).status_code in (401, 403)
    made.refresh_from_db()
    assert SoftwareBaseline.objects.count() == 1 and made.cuda_version == "12.2"
    admin = api(world.users["platform"])
    created = admin.post(LIST, {"flavor": "F", "cluster": "c1", "cuda_version": "12.4"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["cluster"] == "c1" and created.json()["driver_version"] == ""
    changed = admin.patch(detail, {"driver_version": "550.54.15"}, format="json")
    assert changed.status_code == 200 and changed.json()["driver_version"] == "550.54.15"
    assert admin.delete(detail).status_code == 204
    assert list(SoftwareBaseline.objects.values_list("cluster__name", flat=True)) == ["c1"]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"flavor": "F", "driver_version": "535.104"}, None, None),  # the one that is fine
        ({"flavor": "F", "driver_version": "535.x.05"}, "driver_version", DRIVER_SHAPE),
        ({"flavor": "F", "driver_version": "v535"}, "driver_version", DRIVER_SHAPE),
        ({"flavor": "F", "cuda_version": "12"}, "cuda_version", "A CUDA version such as 12.4."),
        ({"flavor": "F", "cuda_version": "12.4.1"}, "cuda_version", "A CUDA version such as 12.4."),
        ({"flavor": "F"}, "driver_version", "Give the expected driver version, the CUDA version, or both."),
        ({"flavor": "F", "cluster": "nope", "cuda_version": "12.4"}, "cluster",
         "Object with name=nope does not exist."),
        ({"flavor": "G", "cuda_version": "12.4"}, "flavor", "Object with name=G does not exist."),
        ({"flavor": "F", "cuda_version": 12.10}, "cuda_version", 'A version in quotes, e.g. "12.4".'),
    ],
)
def test_bad_baseline_input_is_a_400_on_its_field_and_creates_nothing(world, api, body, field, message):
    response = api(world.users["platform"]).post(LIST, body, format="json")
    if field is None:
        assert response.status_code == 201
        return
    assert response.status_code == 400, response.content
    assert response.json()[field] == [message]
    assert not SoftwareBaseline.objects.exists()


def test_a_second_baseline_for_the_same_flavor_and_place_is_a_400(world, api):
    admin = api(world.users["platform"])
    assert admin.post(LIST, {"flavor": "F", "cuda_version": "12.2"}, format="json").status_code == 201
    own = admin.post(LIST, {"flavor": "F", "cluster": "c1", "cuda_version": "12.4"}, format="json")
    assert own.status_code == 201
    for body in ({"flavor": "F", "cuda_version": "12.6"},
                 {"flavor": "F", "cluster": "c1", "cuda_version": "12.6"}):
        twin = admin.post(LIST, body, format="json")
        assert twin.status_code == 400, body
        assert "already has a baseline" in twin.json()["cluster"][0]
    # Moving the cluster's baseline onto "every cluster" collides with the one there.
    detail = reverse("api:baseline-detail", args=[own.json()["id"]])
    moved = admin.patch(detail, {"cluster": None}, format="json")
    assert moved.status_code == 400 and "every cluster" in moved.json()["cluster"][0]
    assert sorted(SoftwareBaseline.objects.values_list("cuda_version", flat=True)) == ["12.2", "12.4"]


def test_a_clusters_baseline_overrides_the_flavors_on_the_node_api(world, api):
    _versions(n0=("535.104.05", "12.2"), n1=("535.104.05", "12.4"))
    client = api(world.users["pb_member"])
    assert {n: d["state"] for n, d in _drift_by_node(client).items()} == {"n0": "none", "n1": "none"}
    SoftwareBaseline.objects.create(flavor=world.F, driver_version="535.104.05", cuda_version="12.4")
    drift = _drift_by_node(client)
    assert drift["n0"] == {"state": "older", "expected_driver": "535.104.05", "expected_cuda": "12.4",
                           "driver": "535.104.05", "cuda": "12.2"}
    assert drift["n1"]["state"] == "ok"
    c1 = Cluster.objects.get(name="c1")
    SoftwareBaseline.objects.create(flavor=world.F, cluster=c1, driver_version="535.104.05",
                                    cuda_version="12.2")
    drift = _drift_by_node(client)
    assert (drift["n0"]["state"], drift["n1"]["state"]) == ("ok", "cuda")
    assert drift["n1"]["expected_cuda"] == "12.2"
    only = client.get(reverse("api:node-occupancy") + "?off_baseline=true").json()["results"]
    assert [n["name"] for n in only] == ["n1"]
    # The inventory's node list and detail carry the same.
    listed = {n["name"]: n for n in client.get(reverse("api:node-list")).json()["results"]}
    assert (listed["n0"]["drift"]["state"], listed["n1"]["drift"]["state"]) == ("ok", "cuda")
    assert (listed["n1"]["driver_version"], listed["n1"]["cuda_version"]) == ("535.104.05", "12.4")
    one = client.get(reverse("api:node-detail", args=[listed["n1"]["id"]])).json()
    assert one["drift"] == drift["n1"]


def test_the_drift_report_groups_nodes_off_their_baseline_for_admins_and_auditors(world, api):
    _versions(n0=("550.54.15", "12.4"), n1=("", ""))
    SoftwareBaseline.objects.create(flavor=world.F, driver_version="535.104.05", cuda_version="12.4")
    url = reverse("api:node-drift")
    for persona in ("platform", "auditor"):
        (group,) = api(world.users[persona]).get(url).json()
        assert (group["flavor"], group["cluster"], group["nodes"], group["off"]) == ("F", "c1", 2, 2)
        assert group["counts"] == {"driver": 1, "unreported": 1}
        assert [(n["name"], n["drift"]["state"]) for n in group["off_nodes"]] == [
            ("n0", "driver"), ("n1", "unreported")]
    for persona in NOT_ADMINS[1:]:
        assert api(world.users[persona]).get(url).status_code == 403, persona
    _versions(n0=("535.104.05", "12.4"), n1=("535.104.05", "12.4"))
    (group,) = api(world.users["platform"]).get(url).json()
    assert (group["nodes"], group["off"], group["off_nodes"]) == (2, 0, [])


def test_the_baseline_drift_command_prints_the_nodes_off_their_baseline(world):
    _versions(n0=("535.98", "12.4"), n1=("535.104.05", "12.4"))
    SoftwareBaseline.objects.create(flavor=world.F, driver_version="535.104.05", cuda_version="12.4")
    out = StringIO()
    call_command("baseline_drift", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["FLAVOR", "CLUSTER", "NODE", "STATE", "DRIVER", "EXPECTED", "CUDA",
                                "EXPECTED"]
    assert lines[1].split() == ["F", "c1", "n0", "older", "535.98", "535.104.05", "12.4", "12.4"]
    assert lines[2] == "F @ c1: 1 of 2 nodes off (older 1)"
    out = StringIO()
    call_command("baseline_drift", "--json", stdout=out)
    (group,) = json.loads(out.getvalue())
    assert group["off_nodes"][0]["name"] == "n0" and group["counts"] == {"older": 1}
    with pytest.raises(SystemExit) as failed:
        call_command("baseline_drift", "--fail-on-drift", stdout=StringIO())
    assert failed.value.code == 1
    _versions(n0=("535.104.05", "12.4"))
    call_command("baseline_drift", "--fail-on-drift", stdout=StringIO())  # nothing off: no exit
