"""The external jobs' API (DESIGN §11; issue 20 item 4): jobs say they are external with their
backend user and cluster; explain answers with the cluster's reason, never a 500; quota usage
names the external part; and external sources — listed by visibility, mapped by platform admins
only, every bad input a 400."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from jobs.models import Job, JobKind
from jobs.native.models import ExternalSource
from jobs.scheduling.cycle import explain_job
from tests.api.test_personas import ALL
from tests.external_world import external_world
from tests.factories import priority

pytestmark = pytest.mark.django_db


@pytest.fixture
def ext(world):
    priority()
    return external_world(world)


def test_job_list_and_detail_mark_external_jobs_with_backend_user_and_cluster(world, ext, api):
    client = api(world.users["pa1_member"])
    listed = client.get(reverse("api:job-list"), {"kind": "external"}).json()["results"]
    assert {j["id"] for j in listed} == {ext.pending.pk, ext.running.pk, ext.finished.pk}
    pending = next(j for j in listed if j["id"] == ext.pending.pk)
    assert (pending["kind"], pending["cluster"], pending["backend_id"], pending["external_user"]) == (
        "external", "hpc", "1234", "alice")
    detail = client.get(reverse("api:job-detail", args=[ext.running.pk])).json()
    assert (detail["external_user"], detail["submitted_by"], detail["cluster"]) == (
        "pa1_member", "pa1_member", "hpc")
    url = reverse("api:job-detail", args=[ext.running.pk])
    assert api(world.users["pb_member"]).get(url).status_code == 404


def test_explain_of_an_external_job_gives_the_clusters_reason_and_no_engine_position(world, ext, api):
    body = api(world.users["pa1_member"]).get(reverse("api:job-explain", args=[ext.pending.pk])).json()
    assert (body["reason"], body["position"], body["message"]) == ("external", None, "AssocGrpGRES")
    assert "its cluster's own queue" in body["text"] and "AssocGrpGRES" in body["text"]
    Job.objects.filter(pk=ext.pending.pk).update(message="")
    ext.pending.refresh_from_db()
    assert explain_job(ext.pending)["reason"] == "external"
    body = api(world.users["pa1_member"]).get(reverse("api:job-explain", args=[ext.pending.pk])).json()
    assert "gave no reason" in body["text"]
    for job in (ext.running, ext.finished):  # not waiting: as any job that does not wait
        response = api(world.users["platform"]).get(reverse("api:job-explain", args=[job.pk]))
        assert response.status_code == 200 and response.json()["reason"] == job.state


def test_an_external_job_is_neither_cancelled_nor_scaled_through_the_api(world, ext, api):
    client = api(world.users["platform"])
    cancel = client.post(reverse("api:job-cancel", args=[ext.running.pk]))
    assert cancel.status_code == 400 and "on its cluster" in cancel.json()["detail"]
    scale = client.post(reverse("api:job-scale", args=[ext.running.pk]), {"replicas": 1}, format="json")
    assert scale.status_code == 400
    assert Job.objects.get(pk=ext.running.pk).state == "running"


def test_quota_usage_names_the_external_part_of_each_level(world, ext, api):
    body = api(world.users["platform"]).get(reverse("api:quota-usage"), {"flavor": "F"}).json()
    rows = {(r["kind"], r["owner_id"]): r for r in body["nodes"]}
    # The running external job holds 2 GPUs of pa1: counted in pa1, A1 and A, and said to be external.
    for key in (("project", world.pa1.pk), ("department", world.A1.pk), ("department", world.A.pk)):
        assert Decimal(rows[key]["external"]) == 2 and Decimal(rows[key]["used"]) >= 2, key
    assert Decimal(rows[("project", world.pb.pk)]["external"]) == 0


def test_unmapped_sources_are_listed_with_what_was_seen_from_them(world, ext, api):
    client = api(world.users["platform"])
    unmapped = client.get(reverse("api:externalsource-list"), {"mapped": "false"}).json()["results"]
    assert [s["name"] for s in unmapped] == ["acct-stray"]
    stray = unmapped[0]
    assert (stray["cluster"], stray["kind"], stray["project"], stray["observed_jobs"]) == (
        "hpc", "slurm_account", None, 2)
    assert stray["observed_card_hours"] == "4.00" and stray["unknown_resource_jobs"] == 0
    mapped = client.get(reverse("api:externalsource-list"), {"mapped": "true"}).json()["results"]
    assert [(s["name"], s["project_code"]) for s in mapped] == [("acct-pa1", "pa1")]
    assert client.get(reverse("api:externalsource-list"), {"mapped": "maybe"}).status_code == 400


# Mapping the unmapped source: platform admins only. The auditor sees it (403); nobody else does (404).
MAP_STATUS = {p: 404 for p in ALL} | {"platform": 200, "auditor": 403}


@pytest.mark.parametrize("persona", ALL)
def test_mapping_follows_visibility_then_the_platform_admin_rule(world, ext, api, persona):
    client = api(world.users[persona])
    response = client.post(reverse("api:externalsource-map", args=[ext.stray.pk]), {"project": world.pa.pk},
                           format="json")
    assert response.status_code == MAP_STATUS[persona], (persona, response.content)
    ext.stray.refresh_from_db()
    assert (ext.stray.project_id is not None) == (persona == "platform")
    # A mapped source the persona sees: still theirs to read only (403), or not seen (404).
    other = client.post(reverse("api:externalsource-map", args=[ext.mapped.pk]), {"project": world.pa.pk},
                        format="json")
    sees = persona in ("platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member")
    expected = 400 if persona == "platform" else 403 if sees else 404  # platform: already mapped
    assert other.status_code == expected, (persona, other.content)


def test_anonymous_mapping_is_refused(world, ext, api):
    url = reverse("api:externalsource-map", args=[ext.stray.pk])
    response = api(None).post(url, {"project": world.pa.pk})
    assert response.status_code in (401, 403)


def test_mapping_records_the_history_and_answers_the_counts(world, ext, api):
    client = api(world.users["platform"])
    response = client.post(reverse("api:externalsource-map", args=[ext.stray.pk]), {"project": world.pa.pk},
                           format="json")
    body = response.json()
    assert response.status_code == 200
    assert (body["jobs_recorded"], body["unknown_resource"]) == (2, 0)
    assert (body["source"]["project"], body["source"]["project_code"], body["source"]["mapped_by"]) == (
        world.pa.pk, "pa", "platform")
    jobs = Job.objects.filter(project=world.pa, kind=JobKind.EXTERNAL)
    assert sorted(jobs.values_list("backend_id", "state")) == [("2001", "succeeded"), ("2002", "queued")]
    listed = api(world.users["a_admin"]).get(reverse("api:job-list"), {"project": world.pa.pk}).json()
    assert {j["backend_id"] for j in listed["results"]} == {"2001", "2002"}


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "project"), ({"project": 999999}, "project"), ({"project": "pa"}, "project"),
     ({"project": None}, "project"), ({"project": [1]}, "project")],
)
def test_bad_input_is_a_400_and_maps_nothing(world, ext, api, body, field):
    response = api(world.users["platform"]).post(
        reverse("api:externalsource-map", args=[ext.stray.pk]), body, format="json")
    assert response.status_code == 400 and field in response.json(), response.content
    assert ExternalSource.objects.get(pk=ext.stray.pk).project_id is None


def test_an_inactive_project_an_already_mapped_source_or_no_such_source_is_refused(world, ext, api):
    client = api(world.users["platform"])
    world.pb.active = False
    world.pb.save(update_fields=["active"])
    inactive = client.post(reverse("api:externalsource-map", args=[ext.stray.pk]), {"project": world.pb.pk},
                           format="json")
    assert inactive.status_code == 400 and "not active" in inactive.json()["project"][0]
    again = client.post(reverse("api:externalsource-map", args=[ext.mapped.pk]), {"project": world.pa.pk},
                        format="json")
    assert again.status_code == 400 and "already mapped" in again.json()["detail"]
    missing = client.post(reverse("api:externalsource-map", args=[999999]), {"project": world.pa.pk},
                          format="json")
    assert missing.status_code == 404
    assert ExternalSource.objects.get(pk=ext.stray.pk).project_id is None
