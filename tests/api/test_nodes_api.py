"""The node / GPU map's API and pages (issue 24): occupancy with another tenant's job never
named, cordon / drain / uncordon for platform admins only (hostile POSTs change nothing), bad
input a 400, and the map and node pages in both languages."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from jobs.models import Job
from quotas.models import Node, NodeEvent
from tests import job_runs

pytestmark = pytest.mark.django_db

SEES_PA1 = {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}
NOT_ADMINS = ["auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member", "pb_member", "outsider"]


def _running(world, simserver) -> tuple[Job, Node]:
    job = job_runs.run(world, simserver)
    return job, Node.objects.get(pk=job.placement[0][0][0])


def test_the_list_names_a_job_only_to_those_who_see_it(world, simserver, api):
    job, node = _running(world, simserver)
    for persona in sorted(SEES_PA1 | {"pb_member", "outsider", "b_admin"}):
        response = api(world.users[persona]).get(reverse("api:node-occupancy"))
        assert response.status_code == 200, response.content
        body = response.json()["results"]
        assert [n["name"] for n in body] == ["n0", "n1"]
        mine = next(n for n in body if n["id"] == node.pk)
        held = [h for g in mine["occupancy"] for h in g["holders"]]
        assert len(held) == 1 and held[0]["milli"] == 1000 and mine["free"] == 7
        if persona in SEES_PA1:
            assert (held[0]["job"], held[0]["name"]) == (job.pk, "logged"), persona
        else:
            assert (held[0]["job"], held[0]["name"]) == (None, ""), persona
            assert "logged" not in str(body)
    client = api(world.users["pa1_member"])
    assert client.get(reverse("api:node-occupancy") + "?has_free=true&state=ready").json()["count"] == 2
    assert client.get(reverse("api:node-occupancy") + "?cluster=c1&flavor=F").status_code == 200
    for bad in ("?cluster=nope", "?flavor=nope", "?state=melted"):
        response = client.get(reverse("api:node-occupancy") + bad)
        assert response.status_code == 400, bad


def test_only_platform_admins_cordon_drain_or_uncordon(world, simserver, api):
    job_runs.cluster_on(simserver)
    node = Node.objects.get(name="n0")
    for persona in NOT_ADMINS:
        client = api(world.users[persona])
        for action in ("node-cordon", "node-drain", "node-uncordon"):
            url = reverse(f"api:{action}", args=[node.pk])
            response = client.post(url, {"reason": "mine"}, format="json")
            assert response.status_code == 403, (persona, action)
    anonymous = api(None).post(reverse("api:node-cordon", args=[node.pk]), {"reason": "x"})
    assert anonymous.status_code in (401, 403)
    node.refresh_from_db()
    assert node.state == "ready" and not NodeEvent.objects.exists()
    assert {n.state for n in simserver.backend().list_nodes()} == {"ready"}


def test_cordon_drain_uncordon_through_the_api(world, simserver, api):
    job, node = _running(world, simserver)
    admin = api(world.users["platform"])
    url = reverse("api:node-cordon", args=[node.pk])
    assert admin.post(url, {}, format="json").status_code == 400
    assert admin.post(url, {"reason": " "}, format="json").status_code == 400
    assert admin.post(url, {"reason": "x" * 301}, format="json").status_code == 400
    missing = admin.post(reverse("api:node-cordon", args=[99999]), {"reason": "x"}, format="json")
    assert missing.status_code == 404
    assert not NodeEvent.objects.exists()
    body = admin.post(url, {"reason": "fan failure"}, format="json").json()
    assert body["changed"] is True
    assert (body["node"]["state"], body["node"]["hold"]) == ("cordoned", "cordoned")
    assert body["event"]["jobs"] == [job.pk] and body["event"]["requeued"] == []
    assert admin.post(url, {"reason": "fan failure"}, format="json").json()["changed"] is False
    drain = admin.post(
        reverse("api:node-drain", args=[node.pk]), {"reason": "swap", "requeue": "maybe"}, format="json"
    )
    assert drain.status_code == 400
    drain = admin.post(
        reverse("api:node-drain", args=[node.pk]), {"reason": "swap", "requeue": True}, format="json"
    )
    assert drain.json()["event"]["requeued"] == [job.pk] and drain.json()["node"]["state"] == "draining"
    job.refresh_from_db()
    assert job.terminating_since is not None
    uncordon = reverse("api:node-uncordon", args=[node.pk])
    back = admin.post(uncordon, {"reason": "fixed"}, format="json").json()
    assert back["node"]["state"] == "ready" and back["node"]["hold"] == ""
    assert list(NodeEvent.objects.order_by("at", "id").values_list("action", flat=True)) == [
        "cordon", "drain", "return"]


def _page(user, path, language):
    client = Client()
    client.force_login(user)
    client.post("/i18n/setlang/", {"language": language, "next": path})
    return client, client.get(path)


@pytest.mark.parametrize("language", ["en", "zh-hans"])
def test_the_map_page_in_both_languages(world, simserver, language):
    job, node = _running(world, simserver)
    Job.objects.filter(pk=job.pk).update(idle_since=job.started_at)
    _client, response = _page(world.users["pa1_member"], reverse("node-map"), language)
    text = response.content.decode()
    assert response.status_code == 200
    assert ("节点图" if language == "zh-hans" else "Node map") in text
    assert f'href="/jobs/{job.pk}/"' in text and "gpu-idle" in text and text.count("gpu-free") >= 15
    assert f'href="/nodes/{node.pk}/"' not in text  # no actions for a member
    _client, other = _page(world.users["pb_member"], reverse("node-map") + "?cluster=c1&free=on", language)
    assert other.status_code == 200 and f'href="/jobs/{job.pk}/"' not in other.content.decode()
    assert "logged" not in other.content.decode()
    _client, bad = _page(world.users["pb_member"], reverse("node-map") + "?cluster=nope&state=x", language)
    assert bad.status_code == 200


def test_the_node_page_is_for_platform_admins_and_hostile_posts_change_nothing(world, simserver):
    job, node = _running(world, simserver)
    url = reverse("node-page", args=[node.pk])
    for persona in NOT_ADMINS:
        client, response = _page(world.users[persona], url, "en")
        assert response.status_code == 403, persona
        posted = client.post(url, {"action": "drain", "jobs": "requeue", "reason": "mine"})
        assert posted.status_code == 403, persona
    job.refresh_from_db()
    assert job.terminating_since is None and not NodeEvent.objects.exists()
    client, response = _page(world.users["platform"], url, "en")
    assert "1 job holds GPUs of this node now." in response.content.decode()
    assert f"logged #{job.pk}" in response.content.decode()
    for bad in ({"action": "melt", "reason": "x"}, {"action": "cordon", "reason": ""}):
        again = client.post(url, bad)
        assert again.status_code == 200 and 'class="error"' in again.content.decode()
    assert not NodeEvent.objects.exists()
    done = client.post(url, {"action": "cordon", "reason": "PSU"}, follow=True)
    assert done.status_code == 200 and "PSU" in done.content.decode()
    assert Node.objects.get(pk=node.pk).state == "cordoned"
    assert client.get(reverse("node-page", args=[99999])).status_code == 404
