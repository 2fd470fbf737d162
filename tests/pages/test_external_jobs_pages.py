"""External jobs on the pages (DESIGN §11; issue 20 item 4): marked as external with their
backend user and cluster in the lists, the queue, a job's page and the dashboard; never offered
for cancelling; waiting with the cluster's reason; their share of quota usage, reports and
statements; and the external sources page where platform admins map an unmapped account."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.utils import timezone

from billing.meter import usage_meter
from billing.models import Statement, UsageRecord
from jobs.models import Job, JobKind
from jobs.native.models import ExternalSource
from jobs.states import JobState
from tests.external_world import external_world

pytestmark = pytest.mark.django_db

BADGE = "External · Slurm job {} · user {}"


@pytest.fixture
def ext(world, prio):
    return external_world(world)


def _get(client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, (path, response.status_code)
    return response.content.decode()


def test_the_job_list_marks_external_jobs_with_backend_user_and_cluster(page_client, ext):
    html = _get(page_client("pa1_member"), "/jobs/")
    assert html.count('class="badge external"') == 3
    assert BADGE.format("1234", "alice") in html and BADGE.format("1235", "pa1_member") in html
    assert "alice <small class=\"muted\">@hpc</small>" in html
    only = _get(page_client("pa1_member"), "/jobs/?kind=external")
    assert only.count('class="badge external"') == 3
    assert 'class="badge external"' not in _get(page_client("pb_member"), "/jobs/")  # another tenant's
    assert "外部作业 · Slurm 作业 1234 · 用户 alice" in _get(page_client("pa1_member", "zh-hans"), "/jobs/")


def test_the_queue_shows_a_pending_external_job_with_the_clusters_reason(page_client, ext):
    for path in ("/jobs/queue/", "/jobs/queue/table/"):
        html = _get(page_client("pa1_admin"), path)
        row = next(r for r in html.split("<tr>") if f"#{ext.pending.pk}<" in r)
        assert "Waiting in its cluster&#x27;s own queue" in row and "AssocGrpGRES" in row
        assert BADGE.format("1234", "alice") in row
        running = next(r for r in html.split("<tr>") if f"#{ext.running.pk}<" in r)
        assert BADGE.format("1235", "pa1_member") in running
    assert "AssocGrpGRES" not in _get(page_client("pb_member"), "/jobs/queue/")


def test_an_external_job_page_offers_no_cancel_or_copy_and_says_it_is_managed_on_its_cluster(
    page_client, ext
):
    client = page_client("pa1_admin")  # may cancel the project's portal jobs
    for job in (ext.pending, ext.running, ext.finished):
        html = _get(client, f"/jobs/{job.pk}/")
        assert "It is managed on its cluster" in html and "Cancel job" not in html
        assert "?copy=" not in html
        assert 'class="backend-user">' in html and "hpc" in html
    pending = _get(client, f"/jobs/{ext.pending.pk}/")
    assert "Waiting in its cluster&#x27;s own queue" in pending and "AssocGrpGRES" in pending
    response = client.post(f"/jobs/{ext.running.pk}/cancel/", follow=True)
    assert response.status_code == 200 and "stopped on its cluster" in response.content.decode()
    ext.running.refresh_from_db()
    assert ext.running.state == JobState.RUNNING and ext.running.cancel_requested_at is None
    # A copy of an external job pre-fills nothing (the form cannot submit kind external).
    assert 'value="external"' not in _get(client, f"/jobs/new/?copy={ext.running.pk}")


def test_the_dashboard_marks_my_external_job_and_the_external_part_of_quota_usage(page_client, ext):
    html = _get(page_client("pa1_member"), "/")  # 1235 ran as Slurm user pa1_member
    assert BADGE.format("1235", "pa1_member") in html
    assert "of which 2 external" in html  # 2 GPUs held by the running external job, on pa1's row
    tree = _get(page_client("pa1_member"), "/quotas/")
    assert "of which 2 external" in tree
    assert "external" not in _get(page_client("pb_member"), "/quotas/").split("<table", 1)[-1]


def test_statement_and_reports_show_the_external_card_hours(page_client, ext, world):
    usage_meter(now=timezone.now())
    finished = UsageRecord.objects.filter(job=ext.finished)
    month = finished.values_list("month", flat=True).first()
    statement = Statement.objects.create(department=world.A1, month=month)
    html = _get(page_client("a_finance"), f"/billing/statements/{statement.pk}/")
    section = html.split('id="external-usage"', 1)[1]
    # The finished job's 4 card-hours, and the running one's hour so far (2 GPUs), are external.
    external = sum(r.card_seconds for r in UsageRecord.objects.filter(job__kind=JobKind.EXTERNAL)) / 3600
    cell = re.search(r'class="num external-card-hours">([0-9.]+)<', section).group(1)
    assert abs(float(cell) - float(external)) < 0.01 and float(cell) >= 4
    report = _get(page_client("a_finance"), f"/reports/?month={month:%Y-%m}")
    figure = json.loads(unescape(re.search(r'id="external-split" data-plotly="([^"]*)"', report).group(1)))
    traces = {t["name"]: t for t in figure["data"]}
    assert traces["External jobs"]["x"] == ["Dept A1"]
    assert abs(traces["External jobs"]["y"][0] - float(external)) < 0.01
    assert 'id="external-split"' not in _get(page_client("b_finance"), f"/reports/?month={month:%Y-%m}")


def test_no_page_fails_with_external_jobs_pending_running_and_finished(page_client, ext, world):
    usage_meter(now=timezone.now())
    jobs = [ext.pending, ext.running, ext.finished]
    paths = ["/", "/jobs/", "/jobs/?kind=external", "/jobs/queue/", "/jobs/queue/table/",
             "/jobs/queue/?state=queued", "/quotas/", "/reports/", "/billing/statements/",
             "/external-sources/", *[f"/jobs/{j.pk}/" for j in jobs]]
    for persona in ("platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member", "pb_member"):
        for language in ("en", "zh-hans"):
            client = page_client(persona, language)
            for path in paths:
                response = client.get(path)
                hidden = persona == "pb_member" and re.fullmatch(r"/jobs/\d+/", path)  # another tenant's
                assert response.status_code == (404 if hidden else 200), (persona, path, response.status_code)


def test_platform_admins_see_unmapped_sources_and_map_one_in_one_step(page_client, ext, world):
    client = page_client("platform")
    html = _get(client, "/external-sources/")
    unmapped = html.split('id="unmapped"', 1)[1].split('id="mapped"', 1)[0]
    row = unmapped.split(f'id="source-{ext.stray.pk}"', 1)[1].split("</tr>", 1)[0]
    assert "acct-stray" in row and "hpc" in row and "Slurm account" in row
    assert re.search(r'observed-jobs">2\b', row) and 'observed-card-hours">4.00<' in row
    assert "acct-pa1" in html.split('id="mapped"', 1)[1]
    response = client.post(f"/external-sources/{ext.stray.pk}/map/", {"project": world.pa.pk}, follow=True)
    text = response.content.decode()
    assert "acct-stray is now mapped to project pa: 2 jobs were recorded" in text
    assert "back-fills on the meter" in text
    recorded = Job.objects.filter(project=world.pa, kind=JobKind.EXTERNAL, backend_id__in=["2001", "2002"])
    assert recorded.count() == 2
    ext.stray.refresh_from_db()
    assert ext.stray.project == world.pa and ext.stray.mapped_by == world.users["platform"]
    assert BADGE.format("2001", "alice") in _get(client, "/jobs/?project=pa")
    again = client.post(f"/external-sources/{ext.stray.pk}/map/", {"project": world.pa.pk}, follow=True)
    assert "already mapped" in again.content.decode()


def test_mapping_from_the_page_refuses_bad_input_and_other_roles(page_client, ext, world):
    client = page_client("platform")
    for bad in ({}, {"project": "x"}, {"project": 999999}):
        text = client.post(f"/external-sources/{ext.stray.pk}/map/", bad, follow=True).content.decode()
        assert "Choose an active project" in text
    world.pb.active = False
    world.pb.save(update_fields=["active"])
    text = client.post(f"/external-sources/{ext.stray.pk}/map/", {"project": world.pb.pk}, follow=True)
    assert "Choose an active project" in text.content.decode()
    assert client.post("/external-sources/999999/map/", {"project": world.pa.pk}).status_code == 404
    # The auditor sees the source but may not map it; a department admin does not see it at all.
    assert page_client("auditor").post(f"/external-sources/{ext.stray.pk}/map/",
                                       {"project": world.pa.pk}).status_code == 403
    assert page_client("a_admin").post(f"/external-sources/{ext.stray.pk}/map/",
                                       {"project": world.pa.pk}).status_code == 404
    assert page_client("pa1_admin").post(f"/external-sources/{ext.mapped.pk}/map/",
                                         {"project": world.pa.pk}).status_code == 403
    ext.stray.refresh_from_db()
    assert ext.stray.project is None and ExternalSource.objects.get(pk=ext.stray.pk).observations.count() == 2
    auditor = _get(page_client("auditor"), "/external-sources/")
    assert "acct-stray" in auditor and "map-source" not in auditor
    member = _get(page_client("pa1_member"), "/external-sources/")
    assert "acct-stray" not in member and "acct-pa1" in member
    assert "acct-pa1" not in _get(page_client("pb_member"), "/external-sources/")


def test_the_admin_navigation_links_the_external_sources_page(page_client, ext):
    assert 'href="/external-sources/"' in _get(page_client("platform"), "/")
    assert 'href="/external-sources/"' in _get(page_client("auditor"), "/")
    assert 'href="/external-sources/"' not in _get(page_client("pa1_member"), "/")
