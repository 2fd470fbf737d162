"""An inference job's page shows its autoscaling (query, target, the last decision and why, in
the reader's language) and lets its owner or a project admin change it; a teammate sees it but
gets no form and a refused POST; the API gives the same with GET and PUT."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from jobs.models import Job
from jobs.scheduling.autoscale import QUOTA_SOME, _reason
from jobs.services import job_submit
from portal.texts import when

pytestmark = pytest.mark.django_db

QUERY = 'avg(rps{job="{job}"})'


@pytest.fixture
def svc(world, prio):
    job = job_submit(
        actor=world.users["pa1_member"], project=world.pa1, name="svc", kind="inference", flavor=world.F,
        priority_class=prio, image="vllm:0.6", workers=4, min_workers=1, gpus_per_worker=1,
    )
    decided = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
    reason = _reason(QUOTA_SOME, value="60", target="10", wanted=6, desired=3, current=1)
    Job.objects.filter(pk=job.pk).update(
        autoscale_query=QUERY, autoscale_target=Decimal(10), autoscale_status={
            "value": "60", "target": "10", "replicas": 1, "desired": 3, "decided_at": decided.isoformat(),
            "reason": reason,
        },
    )
    return job


def test_the_job_page_shows_the_last_decision_in_english_and_chinese(page_client, svc):
    page = page_client("pa1_member").get(f"/jobs/{svc.pk}/").content.decode()
    assert "Autoscaling" in page and f'avg(rps{{job=&quot;gp-{svc.pk}&quot;}})' in page
    assert "60 per replica against the target 10 wants 6 replicas, the quota allows 3" in page
    assert 'class="autoscale-desired">3<' in page
    assert f'action="/jobs/{svc.pk}/autoscale/"' in page  # its owner may change it
    zh = page_client("pa1_member", "zh-hans").get(f"/jobs/{svc.pk}/").content.decode()
    assert "自动伸缩" in zh and "配额" in zh
    assert "wants 6 replicas" not in zh


def test_owner_changes_and_turns_off_autoscaling_from_the_page(page_client, svc):
    client = page_client("pa1_member")
    url = f"/jobs/{svc.pk}/autoscale/"
    response = client.post(url, {"query": QUERY, "target": "2.5", "cooldown_seconds": "120"}, follow=True)
    assert response.status_code == 200 and "Autoscaling of svc is on." in response.content.decode()
    svc.refresh_from_db()
    assert (svc.autoscale_target, svc.autoscale_cooldown_seconds) == (Decimal("2.5"), 120)
    response = client.post(url, {"query": "up", "target": "1"}, follow=True)
    assert "{job}" in response.content.decode()  # the refusal, shown; nothing changed
    assert Job.objects.get(pk=svc.pk).autoscale_query == QUERY
    response = client.post(url, {"query": QUERY, "target": "x", "cooldown_seconds": "abc"}, follow=True)
    assert response.status_code == 200 and Job.objects.get(pk=svc.pk).autoscale_target == Decimal("2.5")
    response = client.post(url, {"query": "", "target": ""}, follow=True)
    assert "Autoscaling of svc is off." in response.content.decode()
    assert Job.objects.get(pk=svc.pk).autoscale_query == ""


def test_a_teammate_sees_it_but_cannot_change_it(page_client, world, svc, prio):
    from portal.models import Membership, Role, User

    mate = User.objects.create_user(username="mate", password="x")
    Membership.objects.create(user=mate, role=Role.MEMBER, project=world.pa1)
    world.users["mate"] = mate
    client = page_client("mate")
    page = client.get(f"/jobs/{svc.pk}/").content.decode()
    assert "the quota allows 3" in page and "autoscale-form" not in page
    assert client.post(f"/jobs/{svc.pk}/autoscale/", {"query": "", "target": ""}).status_code == 403
    assert Job.objects.get(pk=svc.pk).autoscale_query == QUERY
    assert page_client("pb_member").post(f"/jobs/{svc.pk}/autoscale/", {"query": ""}).status_code == 404


def test_a_training_job_has_no_autoscaling_section(page_client, pa1_job):
    page = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert 'id="autoscale"' not in page


def test_autoscale_api_reads_and_writes_with_clear_400s(api, world, svc, pa1_job):
    client = api(world.users["pa1_member"])
    url = f"/api/v1/jobs/{svc.pk}/autoscale/"
    shown = client.get(url).json()
    assert shown["enabled"] and shown["filled_query"] == f'avg(rps{{job="gp-{svc.pk}"}})'
    assert shown["status"]["reason"] == (
        "60 per replica against the target 10 wants 6 replicas, the quota allows 3"
    )
    sizes = (shown["status"]["desired"], shown["replicas"], shown["min_workers"], shown["workers"])
    assert sizes == (3, 0, 1, 4)
    for bad in ({"query": QUERY, "target": "0"}, {"query": QUERY, "target": "1", "cooldown_seconds": 5},
                {"query": "x" * 501, "target": "1"}, {"query": "sum(up)", "target": "1"}, {}):
        response = client.put(url, bad, format="json")
        assert response.status_code == 400, (bad, response.content)
    answer = client.put(url, {"query": QUERY, "target": "7", "cooldown_seconds": 600}, format="json")
    assert answer.status_code == 200
    assert (answer.json()["target"], answer.json()["cooldown_seconds"]) == ("7.000", 600)
    body = {"query": QUERY, "target": "1"}
    refused = client.put(f"/api/v1/jobs/{pa1_job.pk}/autoscale/", body, format="json")
    assert refused.status_code == 400 and "autoscale_query" in refused.json()
    assert api(world.users["pb_member"]).get(url).status_code == 404
    assert client.get("/api/v1/jobs/999999/autoscale/").status_code == 404


def test_dates_in_reasons_are_shown_in_the_site_zone(page_client, svc):
    from jobs.scheduler.autoscale_decision import COOLDOWN
    from jobs.scheduling.autoscale import REASONS

    until = datetime(2026, 12, 4, 8, 5, tzinfo=UTC)
    reason = _reason(REASONS[COOLDOWN], value="2", target="10", wanted=2, until=when(until))
    status = {**Job.objects.get(pk=svc.pk).autoscale_status, "reason": reason}
    Job.objects.filter(pk=svc.pk).update(autoscale_status=status)
    page = page_client("pa1_member").get(f"/jobs/{svc.pk}/").content.decode()
    assert "cool-down until 2026-12-04 16:05" in page  # Asia/Shanghai
