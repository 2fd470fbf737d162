"""The job list, a job's page and cancelling from it, for every persona of the world."""

import json
from datetime import UTC, datetime

import pytest
from django.utils import translation

from jobs import charts, selectors
from jobs.models import Job, JobEvent, JobGpuSample
from jobs.states import JobState
from quotas.models import QuotaNode

pytestmark = pytest.mark.django_db

# Who sees a job of project pa1 (department A1 under A).
SEES_PA1 = {"platform", "auditor", "a_admin", "a_finance", "pa1_admin", "pa1_member"}
ALL = ["platform", "auditor", "a_admin", "b_admin", "a_finance", "b_finance", "pa1_admin", "pa1_member",
       "pb_member", "outsider"]


@pytest.mark.parametrize("persona", ALL)
def test_job_page_is_404_outside_the_scope(page_client, pa1_job, persona):
    response = page_client(persona).get(f"/jobs/{pa1_job.pk}/")
    assert response.status_code == (200 if persona in SEES_PA1 else 404)


@pytest.mark.parametrize("persona", ALL)
def test_job_list_shows_exactly_the_visible_jobs(page_client, pa1_job, pb_job, persona):
    page = page_client(persona).get("/jobs/").content.decode()
    assert ("pa1-train" in page) == (persona in SEES_PA1)
    assert ("pb-secret" in page) == (persona in {"platform", "auditor", "b_admin", "b_finance", "pb_member"})


def test_anonymous_visitors_are_sent_to_the_login_page(page_client, pa1_job):
    for path in ["/jobs/", "/jobs/queue/", "/jobs/new/", f"/jobs/{pa1_job.pk}/", "/priority-classes/",
                 "/quotas/loans/"]:
        response = page_client(None).get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"], path


def test_job_list_filters_and_paginates(page_client, world, pa1_job, pb_job):
    client = page_client("platform")
    assert "pb-secret" not in client.get("/jobs/?project=pa1").content.decode()
    filtered = client.get("/jobs/?project=pa1&state=queued&kind=training&flavor=F").content.decode()
    assert "pa1-train" in filtered
    assert "pa1-train" not in client.get("/jobs/?state=running").content.decode()
    mine = page_client("pa1_member").get("/jobs/?mine=on").content.decode()
    assert "pa1-train" in mine
    # Nonsense filters are ignored with a note, never a 500; a page past the end shows the last.
    bad = client.get("/jobs/?project=nope&state=bogus&page=999")
    assert bad.status_code == 200 and "not valid" in bad.content.decode()


def test_job_page_shows_fields_timeline_and_explain(page_client, pa1_job):
    page = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert "pa1-train" in page and "pytorch:2.3" in page
    assert "Why pending" in page  # queued: the explain box
    assert "submitted" in page  # the first event's reason
    assert f"gp-{pa1_job.pk}" in page  # the backend object name, where to look for logs
    assert "No utilisation samples yet." in page
    assert "plotly" not in page  # plotly.js is loaded only when there is a chart


def test_job_page_times_are_in_the_site_time_zone(page_client, pa1_job):
    Job.objects.filter(pk=pa1_job.pk).update(submitted_at=datetime(2026, 1, 5, 23, 30, tzinfo=UTC))
    page = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert "2026-01-06 07:30" in page  # Asia/Shanghai is UTC+8


def test_running_job_page_shows_nodes_and_the_utilisation_chart(page_client, world, pa1_job):
    node = world.F.nodes.order_by("name").first()
    start = datetime(2026, 1, 5, 2, 0, tzinfo=UTC)
    Job.objects.filter(pk=pa1_job.pk).update(
        state=JobState.RUNNING,
        started_at=start,
        granted_workers=1,
        placement=[[[node.pk, g, 1000] for g in range(4)]],
        on_loan=False,
    )
    for minute, util in [(0, 50.0), (1, 70.0), (5, 10.0)]:  # minutes 2-4 missing: a gap
        JobGpuSample.objects.create(
            job=pa1_job, minute=start.replace(minute=minute), gpu_util_pct=util, fb_used_mib=2048, gpus=4
        )
    page = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert f"<code>{node.name}</code>" in page and "in quota" in page
    assert "data-plotly=" in page and "plotly-cartesian-4.1.1.min.js" in page and "js/charts.js" in page
    assert "3 minutes of samples." in page
    assert "2026-01-05 10:05" in page  # chart x values are local times
    assert "null" in page  # the missing minutes break the line


def test_log_link_comes_from_the_cluster_configuration(page_client, world, pa1_job):
    cluster = world.F.nodes.first().cluster
    cluster.config = {"log_url": "https://logs.example/explore?job={name}"}
    cluster.save()
    Job.objects.filter(pk=pa1_job.pk).update(cluster=cluster, backend_id=f"gp-{pa1_job.pk}")
    page = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert f'href="https://logs.example/explore?job=gp-{pa1_job.pk}"' in page
    cluster.config = {"log_url": "javascript:alert(1)//{name}"}
    cluster.save()
    page = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert "javascript:" not in page


def test_member_cancels_their_job_from_its_page(page_client, pa1_job):
    client = page_client("pa1_member")
    page = client.get(f"/jobs/{pa1_job.pk}/").content.decode()
    assert f'action="/jobs/{pa1_job.pk}/cancel/"' in page
    response = client.post(f"/jobs/{pa1_job.pk}/cancel/", follow=True)
    assert response.redirect_chain[-1][0] == f"/jobs/{pa1_job.pk}/"
    pa1_job.refresh_from_db()
    assert pa1_job.state == JobState.CANCELLED
    event = JobEvent.objects.get(job=pa1_job, to_state=JobState.CANCELLED)
    assert event.actor.username == "pa1_member"
    page = response.content.decode()
    assert "was cancelled" in page and 'action="/jobs/' not in page  # no button on a finished job
    # Cancelling again is a message, not an error page.
    again = client.post(f"/jobs/{pa1_job.pk}/cancel/", follow=True)
    assert again.status_code == 200 and "cannot be cancelled" in again.content.decode()


def test_cancel_needs_a_post(page_client, pa1_job):
    assert page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/cancel/").status_code == 405
    pa1_job.refresh_from_db()
    assert pa1_job.state == JobState.QUEUED


@pytest.mark.parametrize("persona", ALL)
def test_cancel_button_appears_exactly_when_the_service_allows_it(page_client, world, pa1_job, persona):
    """The button's rule (selectors.can_cancel) and the service's rule (job_cancel) agree: the
    page's POST goes through the service, so a shown button cancels and a hidden one is 403."""
    response = page_client(persona).get(f"/jobs/{pa1_job.pk}/")
    button = f'action="/jobs/{pa1_job.pk}/cancel/"'
    shown = response.status_code == 200 and button in response.content.decode()
    assert shown == (persona in SEES_PA1 and selectors.can_cancel(world.users[persona], pa1_job))
    post = page_client(persona).post(f"/jobs/{pa1_job.pk}/cancel/")
    assert post.status_code == (404 if persona not in SEES_PA1 else 302 if shown else 403)
    pa1_job.refresh_from_db()
    assert (pa1_job.state == JobState.CANCELLED) == shown


def _sample(minute: int) -> JobGpuSample:
    at = datetime(2026, 1, 5, 2, minute, tzinfo=UTC)
    return JobGpuSample(minute=at, gpu_util_pct=50.0, fb_used_mib=2048, gpus=4)


def test_item15_a_lone_utilisation_sample_is_drawn_as_a_marker():
    # One sample: a line through one point draws nothing, so the point gets a marker.
    [util, memory] = json.loads(charts.utilisation([_sample(0)]))["data"]
    for trace in (util, memory):
        assert "markers" in trace["mode"] and trace["marker"]["size"] == [7]
    # A run of samples is a line; a sample alone between gaps gets a marker of its own.
    [util, _] = json.loads(charts.utilisation([_sample(0), _sample(1), _sample(5)]))["data"]
    assert util["x"][2] is None and util["marker"]["size"] == [0, 0, 0, 7]
    [util, _] = json.loads(charts.utilisation([_sample(0), _sample(1), _sample(2)]))["data"]
    assert util["mode"] == "lines" and "size" not in util.get("marker", {})


@pytest.fixture
def waits_for_quota(world):
    """pa1 may not borrow: its second 4-GPU job meets pa1's borrow limit (4 + 4 > 4 + 0)."""
    from jobs.scheduling.cycle import schedule_once
    from tests import factories as fx

    QuotaNode.objects.filter(pk=world.quota["pa1"].pk).update(borrow_limit=0)
    fx.submit(world.pa1, world.F, gpus=4, name="first")
    waiting = fx.submit(world.pa1, world.F, gpus=4, name="second")
    schedule_once()
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED
    return waiting


def test_item15_explain_speaks_in_cards_and_names_on_the_page_and_in_the_api(
    page_client, api, world, waits_for_quota
):
    job, tree_id = waits_for_quota, f"p{world.pa1.pk}"
    page = page_client("pa1_member").get(f"/jobs/{job.pk}/").content.decode()
    expected = "The borrow limit of Project a1 is reached: usage 4 + 4 requested &gt; quota 4 + borrow limit"
    assert expected in page
    assert "4000" not in page and tree_id not in page
    answer = api(world.users["pa1_member"]).get(f"/api/v1/jobs/{job.pk}/explain/").json()
    # Machine-readable fields stay; the figures are cards, the text names the level.
    assert (answer["reason"], answer["blocking_node"], answer["numbers"]) == (
        "borrow_limit", tree_id, {"usage": 4.0, "request": 4.0, "quota": 4.0, "borrow_limit": 0.0}
    )
    assert answer["blocking_node_name"] == "Project a1"
    assert answer["text"] == (
        "The borrow limit of Project a1 is reached: usage 4 + 4 requested > quota 4 + borrow limit 0."
    )
    assert "in-quota 4 + 4 > 4" in answer["message"] and "4000" not in answer["message"]
    chinese = api(world.users["pa1_member"]).get(
        f"/api/v1/jobs/{job.pk}/explain/", HTTP_ACCEPT_LANGUAGE="zh-hans"
    ).json()
    assert chinese["text"] == "Project a1 已达借用上限：用量 4 + 申请 4 > 配额 4 + 借用上限 0。"
    queue = page_client("pa1_member").get("/jobs/queue/").content.decode()
    assert 'title="The borrow limit of Project a1 is reached' in queue and tree_id not in queue


def test_item15_explain_figures_keep_decimals_and_hide_levels_the_reader_cannot_see(world):
    from jobs.scheduler.engine.model import Explain
    from jobs.scheduling.cycle import explain_to_dict
    from jobs.scheduling.explaining import for_reader

    shared = {"reason": "quota", "flavor": "T4", "blocking_node": f"d{world.A.pk}",
              "numbers": {"in_quota_usage": 7.5, "request": 0.5, "quota": 8.0}}
    with translation.override("en"):
        [member, admin] = [for_reader([shared], world.users[p])[0] for p in ("pa1_member", "a_admin")]
    assert member["blocking_node_name"] is None
    assert member["text"].startswith(
        "Not in quota at a department above your project: in-quota usage 7.5 + 0.5 requested > quota 8"
    )
    assert admin["text"].startswith("Not in quota at Dept A: ")
    placement = Explain(3, "placement", "F", numbers=(("per_worker", 500), ("workers", 2),
                                                      ("largest_free_node", 250)))
    answer = explain_to_dict(placement, datetime(2026, 1, 5, tzinfo=UTC))
    assert answer["numbers"] == {"per_worker": 0.5, "workers": 2, "largest_free_node": 0.25}
    with translation.override("en"):
        [text] = [e["text"] for e in for_reader([answer], world.users["pa1_member"])]
    assert text.startswith("No set of nodes fits 2 × 0.5 of F: the largest free node has 0.25")


def test_item2_an_over_long_name_filter_says_it_is_ignored_and_why(page_client, world, pa1_job):
    """The list's search box no longer cuts at 63 characters (issue 32 item 2): a longer search is
    not cut either, it is named as ignored with its length."""
    page = page_client("platform").get("/jobs/", {"q": "p" * 80}).content.decode()
    assert "Some filters were not valid and are ignored:" in page
    assert "at most 63 characters (it has 80)" in page


@pytest.mark.django_db(transaction=True)
def test_item7_the_header_and_the_timeline_come_from_one_snapshot(page_client, pa1_job):
    """The scheduler admits the job while its page is being read (after the job row, before the
    events): header, state and timeline still tell one story."""
    import threading

    from django.db import connection, connections

    from jobs.scheduling.cycle import schedule_once

    admitted = []

    def admit_elsewhere():
        try:
            schedule_once()  # a real cycle on its own connection, committed
            admitted.append(Job.objects.get(pk=pa1_job.pk).state)
        finally:
            connections.close_all()

    def between(execute, sql, params, many, context):
        if "jobs_jobevent" in sql and not admitted:
            worker = threading.Thread(target=admit_elsewhere)
            worker.start()
            worker.join()
        return execute(sql, params, many, context)

    with connection.execute_wrapper(between):
        response = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/")
    assert admitted == [JobState.ADMITTED]  # the commit did land in the middle of the page
    job = response.context["job"]
    last = [e.to_state for e in response.context["events"] if e.kind == "transition"][-1]
    assert (job.state, last) == (JobState.QUEUED, JobState.QUEUED)
    # The next visit shows the admission everywhere.
    again = page_client("pa1_member").get(f"/jobs/{pa1_job.pk}/")
    last = [e.to_state for e in again.context["events"] if e.kind == "transition"][-1]
    assert (again.context["job"].state, last) == (JobState.ADMITTED, JobState.ADMITTED)
