"""Software baselines on the pages (DESIGN §15): platform admins manage them beside the inventory
(everyone else 403, nothing changed), bad input is a form error, the node map flags a node off
its baseline in English and Chinese, the node page shows expected against reported, and the
drift report is for platform admins and auditors; the Django admin refuses what the API refuses."""

from __future__ import annotations

import pytest

from quotas.models import Node, SoftwareBaseline

pytestmark = pytest.mark.django_db

NOT_ADMINS = ["auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member", "pb_member", "outsider"]


@pytest.fixture
def off_baseline(world):
    """n0 runs CUDA 12.2 where F expects 12.4 on every cluster; n1 is on the baseline."""
    Node.objects.filter(name="n0").update(driver_version="535.104.05", cuda_version="12.2")
    Node.objects.filter(name="n1").update(driver_version="535.104.05", cuda_version="12.4")
    return SoftwareBaseline.objects.create(flavor=world.F, driver_version="535.104.05", cuda_version="12.4")


def test_only_platform_admins_manage_baselines(world, page_client, off_baseline):
    urls = ["/inventory/baselines/", f"/inventory/baselines/{off_baseline.pk}/"]
    for persona in NOT_ADMINS:
        client = page_client(persona)
        for url in urls:
            assert client.get(url).status_code == 403, (persona, url)
            assert client.post(url, {"flavor": world.F.pk, "cuda_version": "12.6"}).status_code == 403
        assert client.post(f"/inventory/baselines/{off_baseline.pk}/delete/").status_code == 403
        assert 'href="/inventory/baselines/"' not in client.get("/inventory/").content.decode()
    off_baseline.refresh_from_db()
    assert SoftwareBaseline.objects.count() == 1 and off_baseline.cuda_version == "12.4"


def test_a_platform_admin_adds_changes_and_deletes_a_baseline(world, page_client, off_baseline):
    admin = page_client("platform")
    assert 'href="/inventory/baselines/"' in admin.get("/inventory/").content.decode()
    cluster = Node.objects.get(name="n0").cluster
    added = admin.post("/inventory/baselines/", {"flavor": world.F.pk, "cluster": cluster.pk,
                                                 "driver_version": "550.54.15", "cuda_version": ""})
    assert added.status_code == 302
    own = SoftwareBaseline.objects.get(cluster=cluster)
    assert (own.driver_version, own.cuda_version) == ("550.54.15", "")
    changed = admin.post(f"/inventory/baselines/{own.pk}/", {
        "flavor": world.F.pk, "cluster": cluster.pk, "driver_version": "550.54.15", "cuda_version": "12.4"})
    assert changed.status_code == 302
    own.refresh_from_db()
    assert own.cuda_version == "12.4"
    assert admin.post(f"/inventory/baselines/{own.pk}/delete/").status_code == 302
    assert list(SoftwareBaseline.objects.all()) == [off_baseline]


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"driver_version": "535.x", "cuda_version": ""}, "A driver version such as 535.104.05."),
        ({"driver_version": "", "cuda_version": "12"}, "A CUDA version such as 12.4."),
        ({"driver_version": "", "cuda_version": ""},
         "Give the expected driver version, the CUDA version, or both."),
        ({"driver_version": "", "cuda_version": "12.6"}, "F already has a baseline for every cluster"),
    ],
)
def test_bad_baseline_input_is_a_form_error_that_saves_nothing(world, page_client, off_baseline, data, error):
    response = page_client("platform").post("/inventory/baselines/", {"flavor": world.F.pk, **data})
    assert response.status_code == 400
    assert error in response.content.decode()
    assert list(SoftwareBaseline.objects.all()) == [off_baseline]
    off_baseline.refresh_from_db()
    assert off_baseline.cuda_version == "12.4"


def test_the_node_map_flags_a_node_off_its_baseline_in_both_languages(world, page_client, off_baseline):
    english = page_client("pb_member").get("/nodes/").content.decode()
    assert english.count("Off baseline:") == 1
    assert "Off baseline: older than baseline</mark>" in english
    assert "Expected: driver 535.104.05, CUDA 12.4; reported: driver 535.104.05, CUDA 12.2" in english
    chinese = page_client("pb_member", "zh-hans").get("/nodes/").content.decode()
    assert chinese.count("偏离基线：") == 1 and "偏离基线：低于基线</mark>" in chinese
    only = page_client("pb_member").get("/nodes/", {"cluster": "c1", "off_baseline": "on"}).content.decode()
    assert 'data-node="n0"' in only and 'data-node="n1"' not in only
    Node.objects.filter(name="n0").update(cuda_version="12.4")
    assert "Off baseline:" not in page_client("pb_member").get("/nodes/").content.decode()


def test_the_node_page_shows_expected_against_reported(world, page_client, off_baseline):
    node = Node.objects.get(name="n0")
    page = page_client("platform").get(f"/nodes/{node.pk}/").content.decode()
    table = page[page.index('id="node-software"'):page.index("</table>", page.index('id="node-software"'))]
    assert 'id="node-drift">older than baseline</mark>' in table
    assert "<th scope=\"row\">Expected</th><td>535.104.05</td><td>12.4</td>" in table
    assert "<th scope=\"row\">Reported by the node</th><td>535.104.05</td><td>12.2</td>" in table


def test_the_drift_report_lists_nodes_off_for_admins_and_auditors_only(world, page_client, off_baseline):
    Node.objects.filter(name="n1").update(driver_version="", cuda_version="")
    for persona in ("platform", "auditor"):
        response = page_client(persona).get("/nodes/drift/")
        assert response.status_code == 200
        page = response.content.decode()
        assert "2 of 2 nodes with a baseline are off it." in page
        assert "older than baseline: 1" in page and "version not reported: 1" in page
        assert 'data-node="n0"' in page and 'data-node="n1"' in page
        # The node page and the baselines are platform admins' only: linked for them alone.
        n0 = Node.objects.get(name="n0")
        assert (f'href="/nodes/{n0.pk}/"' in page) == (persona == "platform")
        assert ('href="/inventory/baselines/"' in page) == (persona == "platform")
        assert 'href="/nodes/drift/"' in page_client(persona).get("/nodes/").content.decode()
    for persona in NOT_ADMINS[1:]:
        assert page_client(persona).get("/nodes/drift/").status_code == 403, persona
        assert 'href="/nodes/drift/"' not in page_client(persona).get("/nodes/").content.decode()


def test_the_django_admin_refuses_what_the_api_refuses(world, page_client, off_baseline):
    admin = page_client("platform")
    url = "/admin/quotas/softwarebaseline/add/"
    assert admin.get(url).status_code == 200
    for data, error in [
        ({"driver_version": "535.x"}, "A driver version such as 535.104.05."),
        ({"cuda_version": "12.6"}, "F already has a baseline for every cluster"),
    ]:
        response = admin.post(url, {"flavor": world.F.pk, "cluster": "", "driver_version": "",
                                    "cuda_version": "", **data})
        assert response.status_code == 200 and error in response.content.decode()
    assert SoftwareBaseline.objects.count() == 1
    assert page_client("auditor").get(url).status_code in (302, 403)
